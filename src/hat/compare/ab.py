"""A/B analysis: uplift with a bootstrap interval and CUPED, from logged visits or the simulator.

**Logged visits** (``hat compare ab --data``): one row per visit, JSONL or CSV, with an arm column,
a metric column (GMV, conversion 0/1, …) and optionally a pre-period covariate (the same metric for
the same viewer *before* the experiment, which the treatment cannot have changed).
:func:`analyse_ab` gives the uplift of treatment over control, absolute and relative to the
control mean, each with a percentile-bootstrap interval; with a covariate also the CUPED-adjusted
uplift, θ, and how much CUPED cut the variance of the estimate (:mod:`hat.compare.stats`).

**Simulated A/B** (``hat compare ab-sim``): two systems (model specs, simulator policies, or two
harness versions) answer the same pool of simulated comments through the real runtime; the
judges score every reply. A viewer population then visits the room (:class:`ConversionModel`):

- viewer ``i`` has a latent propensity ``u_i ~ N(0, viewer_sd²)`` and a basket value
  ``b_i ~ LogNormal(log(basket_median), basket_sigma²)``;
- in the pre-period (before the experiment, the same experience for everybody) the viewer makes
  ``pre_visits`` visits, each converting with ``sigmoid(base_logit + u_i + effect · pre_quality)``;
  the covariate is the viewer's mean GMV per pre-period visit;
- in the experiment the viewer is assigned an arm by a fair coin, asks one comment from the pool,
  gets that arm's reply, and converts with ``p = sigmoid(base_logit + u_i + effect · q)``, where
  ``q`` is the reply's quality: the mean of the four task judges (the eval's overall score);
  the visit's GMV is ``b_i`` on conversion, else 0.

Because both systems answered every comment, each viewer's expected GMV under *both* arms is
known, so the **true uplift** of this population (the mean over viewers of
``(p_T − p_C) · b_i``) is known exactly and a test can check the interval covers it.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hat.compare.stats import Interval, bootstrap_diff, cuped_theta, mean_diff, require_numpy
from hat.errors import HatError
from hat.eval.run_options import RunOptions
from hat.textio import read_jsonl, read_text

__all__ = [
    "ABResult",
    "ConversionModel",
    "SimulatedAB",
    "analyse_ab",
    "episode_qualities",
    "read_visits",
    "simulate_ab",
    "simulate_visits",
]


# -- reading ---------------------------------------------------------------------------------------
def read_visits(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line, row)`` for every visit of a JSONL file, or of a CSV/TSV file (by suffix, header row
    first). Errors name the file and line."""
    path = Path(path)
    if path.suffix.lower() not in (".csv", ".tsv"):
        rows = read_jsonl(path, what="visits file")
        for number, row in rows:
            if not isinstance(row, dict):
                raise HatError(f"{path}:{number}: a visit must be a JSON object, got {type(row).__name__}")
        return rows
    text = read_text(path, what="visits file")
    reader = csv.DictReader(io.StringIO(text), delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
    return [(reader.line_num, dict(row)) for row in reader]


def _number(value: Any, where: str, column: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise HatError(f"{where}: column {column!r} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise HatError(f"{where}: column {column!r} must be finite, got {value!r}")
    return out


@dataclass
class _Arms:
    y: dict[str, list[float]] = field(default_factory=dict)
    x: dict[str, list[float]] = field(default_factory=dict)


def _split(
    rows: Sequence[tuple[int, dict[str, Any]]], source: str, arm: str, metric: str, covariate: str | None
) -> _Arms:
    arms = _Arms()
    for number, row in rows:
        where = f"{source}:{number}"
        for column in (arm, metric, *([covariate] if covariate else [])):
            if column not in row or row[column] in (None, ""):
                raise HatError(f"{where}: no value in column {column!r}; columns there: {', '.join(row)}")
        name = str(row[arm])
        arms.y.setdefault(name, []).append(_number(row[metric], where, metric))
        if covariate:
            arms.x.setdefault(name, []).append(_number(row[covariate], where, covariate))
    return arms


# -- analysis --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ABResult:
    """What ``hat compare ab`` reports. ``cuped_*`` are ``None`` without a covariate;
    ``variance_reduction`` is ``1 − Var(uplift_cuped) / Var(uplift)`` from the per-arm variances."""

    control: str
    treatment: str
    n: dict[str, int]
    means: dict[str, float]
    uplift: Interval
    relative: Interval
    n_boot: int
    seed: int
    theta: float | None = None
    variance_reduction: float | None = None
    cuped_uplift: Interval | None = None
    cuped_relative: Interval | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "control": self.control,
            "treatment": self.treatment,
            "n": self.n,
            "means": {k: round(v, 6) for k, v in self.means.items()},
            "uplift": self.uplift.to_dict(),
            "relative_uplift": self.relative.to_dict(),
            "n_boot": self.n_boot,
            "seed": self.seed,
        }
        if self.cuped_uplift is not None and self.cuped_relative is not None:
            out["cuped"] = {
                "theta": round(self.theta or 0.0, 6),
                "variance_reduction": round(self.variance_reduction or 0.0, 4),
                "uplift": self.cuped_uplift.to_dict(),
                "relative_uplift": self.cuped_relative.to_dict(),
                "ci_width_ratio": round(self.cuped_uplift.width / self.uplift.width, 4) if self.uplift.width else None,
            }
        return out


def _variance_reduction(arms: _Arms, control: str, treatment: str, theta: float) -> float:
    np = require_numpy()
    x_all = np.concatenate([arms.x[control], arms.x[treatment]])
    raw = adj = 0.0
    for name in (control, treatment):
        y, x = np.asarray(arms.y[name]), np.asarray(arms.x[name])
        raw += y.var(ddof=1) / y.size
        adj += (y - theta * (x - x_all.mean())).var(ddof=1) / y.size
    return float(1.0 - adj / raw) if raw > 0 else 0.0


def analyse_ab(
    rows: Sequence[tuple[int, dict[str, Any]]],
    *,
    control: str = "control",
    treatment: str = "treatment",
    arm: str = "arm",
    metric: str = "metric",
    covariate: str | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    source: str = "visits",
) -> ABResult:
    """Uplift of ``treatment`` over ``control`` in ``metric`` (see the module docstring). Rows in
    other arms are ignored; an arm with fewer than 2 visits is an error naming the arms found."""
    arms = _split(rows, source, arm, metric, covariate)
    for name in (control, treatment):
        if len(arms.y.get(name, ())) < 2:
            found = ", ".join(f"{k} ({len(v)})" for k, v in sorted(arms.y.items())) or "none"
            raise HatError(
                f"{source}: arm {name!r} needs at least 2 visits in column {arm!r}; arms found: {found} "
                "(choose them with --control / --treatment)"
            )
    yc, yt = arms.y[control], arms.y[treatment]
    raw = mean_diff(yc, yt)
    uplift, relative = bootstrap_diff(yc, yt, n_boot=n_boot, seed=seed, level=level)
    result = ABResult(
        control,
        treatment,
        {control: len(yc), treatment: len(yt)},
        {control: raw.control, treatment: raw.treatment},
        uplift,
        relative,
        n_boot,
        seed,
    )
    if not covariate:
        return result
    xc, xt = arms.x[control], arms.x[treatment]
    theta = cuped_theta([*yc, *yt], [*xc, *xt])
    c_abs, c_rel = bootstrap_diff(yc, yt, control_x=xc, treatment_x=xt, n_boot=n_boot, seed=seed, level=level)
    return replace(
        result,
        theta=theta,
        variance_reduction=_variance_reduction(arms, control, treatment, theta),
        cuped_uplift=c_abs,
        cuped_relative=c_rel,
    )


# -- simulation ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConversionModel:
    """How simulated viewers convert (see the module docstring for the formulas)."""

    base_logit: float = -2.0
    quality_effect: float = 1.5
    viewer_sd: float = 1.0
    basket_median: float = 40.0
    basket_sigma: float = 0.5
    pre_visits: int = 10
    pre_quality: float = 0.5

    def logit(self, u: Any, quality: Any) -> Any:
        return self.base_logit + u + self.quality_effect * quality


def _sigmoid(z: Any) -> Any:
    np = require_numpy()
    return 1.0 / (1.0 + np.exp(-z))


@dataclass(frozen=True)
class SimulatedAB:
    """The visit rows (``arm``, ``metric`` = GMV, ``pre_gmv`` covariate, and what produced them)
    and the population's true uplift, absolute and relative."""

    rows: list[dict[str, Any]]
    true_uplift: float
    true_relative: float

    def numbered(self) -> list[tuple[int, dict[str, Any]]]:
        return list(enumerate(self.rows, 1))


def simulate_visits(
    control_quality: Sequence[float],
    treatment_quality: Sequence[float],
    *,
    n_viewers: int,
    seed: int = 0,
    model: ConversionModel | None = None,
    intents: Sequence[str] | None = None,
) -> SimulatedAB:
    """Viewers visiting under either arm. ``*_quality[j]``: the arm's reply quality (0–1) on comment
    ``j`` of the pool; every viewer asks one comment drawn uniformly from the pool."""
    np = require_numpy()
    m = model or ConversionModel()
    qc, qt = np.asarray(control_quality, dtype=float), np.asarray(treatment_quality, dtype=float)
    if qc.shape != qt.shape or qc.size == 0:
        raise ValueError("both arms need a quality for every comment of the pool")
    rng = np.random.default_rng(seed)
    u = rng.normal(0.0, m.viewer_sd, n_viewers)
    basket = np.exp(rng.normal(math.log(m.basket_median), m.basket_sigma, n_viewers))
    pre_p = _sigmoid(m.logit(u, m.pre_quality))
    pre_gmv = rng.binomial(m.pre_visits, pre_p) * basket / m.pre_visits
    treated = rng.random(n_viewers) < 0.5
    comment = rng.integers(0, qc.size, n_viewers)
    p_c, p_t = _sigmoid(m.logit(u, qc[comment])), _sigmoid(m.logit(u, qt[comment]))
    converted = rng.random(n_viewers) < np.where(treated, p_t, p_c)
    gmv = np.where(converted, basket, 0.0)
    rows = [
        {
            "viewer": i,
            "arm": "treatment" if treated[i] else "control",
            "metric": round(float(gmv[i]), 4),
            "pre_gmv": round(float(pre_gmv[i]), 4),
            "converted": bool(converted[i]),
            "comment": int(comment[i]),
            "quality": round(float(qt[comment[i]] if treated[i] else qc[comment[i]]), 4),
            **({"intent": intents[int(comment[i])]} if intents is not None else {}),
        }
        for i in range(n_viewers)
    ]
    exp_c, exp_t = float(np.mean(p_c * basket)), float(np.mean(p_t * basket))
    return SimulatedAB(rows, exp_t - exp_c, exp_t / exp_c - 1.0 if exp_c else math.nan)


def episode_qualities(
    system: str,
    *,
    suite: str = "t1",
    n: int = 200,
    seed: int = 0,
    harness: str = "livestream",
    batch_size: int = 1,
    load_options: Mapping[str, Any] | None = None,
) -> tuple[list[float], list[str]]:
    """Reply quality (mean of the four task judges) of ``system`` on each comment of the pool, and
    the comments' intents. Runs through :func:`hat.eval.runner.run_cases` (the real runtime)."""
    from hat.eval.runner import run_cases
    from hat.eval.suites import build_cases

    cases = build_cases(suite, n=n, seed=seed, harness=harness)
    result = run_cases(suite, cases, system, seed=seed, batch_size=batch_size, load_options=dict(load_options or {}))
    return [c.overall for c in result.cases], [c.intent for c in result.cases]


def simulate_ab(
    control: str,
    treatment: str,
    *,
    n_viewers: int = 20000,
    n_comments: int = 200,
    seed: int = 0,
    suite: str = "t1",
    control_harness: str = "livestream",
    treatment_harness: str = "livestream",
    model: ConversionModel | None = None,
    batch_size: int = 1,
    run_options: Mapping[str, RunOptions] | None = None,
) -> SimulatedAB:
    """A simulated A/B of two systems on the same comment pool (see the module docstring).
    ``run_options``: per system spec, how it decodes (:mod:`hat.eval.run_options`); a spec not in
    it runs ``batch_size`` episodes at once with the backend's defaults."""
    runs = {
        arm: (opts.batch_size, opts.load_options) if (opts := (run_options or {}).get(arm)) else (batch_size, {})
        for arm in (control, treatment)
    }
    qc, intents = episode_qualities(
        control, suite=suite, n=n_comments, seed=seed, harness=control_harness, batch_size=runs[control][0],
        load_options=runs[control][1],
    )  # fmt: skip
    qt, _ = episode_qualities(
        treatment, suite=suite, n=n_comments, seed=seed, harness=treatment_harness, batch_size=runs[treatment][0],
        load_options=runs[treatment][1],
    )  # fmt: skip
    return simulate_visits(qc, qt, n_viewers=n_viewers, seed=seed, model=model, intents=intents)
