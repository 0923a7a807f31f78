"""The statistics of the comparison tools: Wilson intervals, a seeded bootstrap, CUPED.

One small module so the pairwise tally, the A/B analysis and their tests share one implementation:

- **Wilson score interval** for a proportion ``k / n`` (win, tie and loss shares). Unlike the
  normal ("Wald") interval it stays inside [0, 1] and does not collapse to a point at 0 % or
  100 %, which is where pairwise win rates live (the report's 97.2 %)::

      centre = (p + z²/2n) / (1 + z²/n)
      half   = z / (1 + z²/n) · sqrt(p(1 − p)/n + z²/4n²)

- **Percentile bootstrap** of a difference in means, resampling each arm on its own (the arms are
  independent samples), vectorised with numpy. Every call takes a ``seed``; the same seed gives
  the same interval.
- **CUPED** (Deng et al. 2013): with a pre-period covariate ``X`` that the treatment cannot
  affect, ``Y_cuped = Y − θ (X − mean(X))`` with ``θ = cov(Y, X) / var(X)`` estimated on both
  arms pooled. The adjusted means differ by the same expected amount as the raw ones, with
  variance ``var(Y)(1 − ρ²)``. The bootstrap re-estimates θ in each replicate, so the interval
  carries θ's own noise.

numpy is used where it is installed (it comes with the ``models`` extra); the Wilson interval is
pure Python so the pairwise tally works without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from hat.errors import MissingDependencyError

__all__ = [
    "Interval",
    "bootstrap_diff",
    "cuped_adjust",
    "cuped_theta",
    "mean_diff",
    "require_numpy",
    "wilson_interval",
    "z_value",
]


@dataclass(frozen=True)
class Interval:
    """A point estimate and its two-sided confidence interval at ``level`` (0.95 = 95 %)."""

    estimate: float
    low: float
    high: float
    level: float = 0.95

    @property
    def width(self) -> float:
        return self.high - self.low

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def to_dict(self, digits: int = 6) -> dict[str, float]:
        return {
            "estimate": round(self.estimate, digits),
            "low": round(self.low, digits),
            "high": round(self.high, digits),
            "level": self.level,
        }


def z_value(level: float = 0.95) -> float:
    """The two-sided standard-normal quantile for ``level`` (1.959964 for 95 %)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    return NormalDist().inv_cdf(0.5 + level / 2.0)


def wilson_interval(k: float, n: int, level: float = 0.95) -> Interval:
    """Wilson score interval of the proportion ``k / n``; ``n = 0`` gives the vacuous [0, 1]."""
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return Interval(0.0, 0.0, 1.0, level)
    z = z_value(level)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # at k = 0 (k = n) the bound is exactly 0 (1); the float formula leaves ~1e-17 there
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return Interval(p, low, high, level)


def require_numpy() -> Any:
    try:
        import numpy
    except ImportError as exc:  # pragma: no cover - numpy ships with the models extra
        raise MissingDependencyError("numpy", "models", "The A/B analysis (bootstrap, CUPED)") from exc
    return numpy


def cuped_theta(y: Sequence[float], x: Sequence[float]) -> float:
    """``θ = cov(Y, X) / var(X)``; 0 when ``X`` is constant (nothing to adjust by)."""
    np = require_numpy()
    ya, xa = np.asarray(y, dtype=float), np.asarray(x, dtype=float)
    if ya.shape != xa.shape or ya.size < 2:
        raise ValueError("CUPED needs Y and X of the same length, at least 2")
    xc = xa - xa.mean()
    var = float(xc @ xc)
    return float(xc @ (ya - ya.mean()) / var) if var > 0 else 0.0


def cuped_adjust(y: Sequence[float], x: Sequence[float], theta: float | None = None) -> list[float]:
    """``Y − θ (X − mean(X))``; θ from :func:`cuped_theta` unless given."""
    np = require_numpy()
    ya, xa = np.asarray(y, dtype=float), np.asarray(x, dtype=float)
    t = cuped_theta(ya, xa) if theta is None else theta
    return [float(v) for v in ya - t * (xa - xa.mean())]


@dataclass(frozen=True)
class Diff:
    """Control and treatment means and their difference, absolute and relative to control."""

    control: float
    treatment: float

    @property
    def absolute(self) -> float:
        return self.treatment - self.control

    @property
    def relative(self) -> float:
        return self.absolute / self.control if self.control else math.nan


def mean_diff(control: Sequence[float], treatment: Sequence[float]) -> Diff:
    np = require_numpy()
    return Diff(float(np.mean(control)), float(np.mean(treatment)))


_CHUNK_ELEMENTS = 1 << 22
"""Resampled values held at once (about 32 MB per float64 array): replicates run in chunks of
``_CHUNK_ELEMENTS // n`` so 2,000 replicates of 20,000 visits do not need gigabytes."""


def _moments(y: Any, x: Any | None, idx: Any) -> tuple[Any, ...]:
    """Per replicate (rows of ``idx``): Σy, and with a covariate Σx, Σxy, Σx²."""
    ys = y[idx]
    if x is None:
        return (ys.sum(axis=1),)
    xs = x[idx]
    return ys.sum(axis=1), xs.sum(axis=1), (xs * ys).sum(axis=1), (xs * xs).sum(axis=1)


def _arm_means(nc: int, c: tuple[Any, ...], nt: int, t: tuple[Any, ...]) -> tuple[Any, Any]:
    """Control and treatment means per replicate; CUPED-adjusted when the moments carry a
    covariate, θ = cov(Y, X) / var(X) over both arms pooled, per replicate."""
    np = require_numpy()
    if len(c) == 1:
        return c[0] / nc, t[0] / nt
    (syc, sxc, sxyc, sxxc), (syt, sxt, sxyt, sxxt) = c, t
    n = nc + nt
    mx, my = (sxc + sxt) / n, (syc + syt) / n
    cov = sxyc + sxyt - n * mx * my
    var = sxxc + sxxt - n * mx * mx
    theta = np.divide(cov, var, out=np.zeros_like(cov), where=var > 0)
    return syc / nc - theta * (sxc / nc - mx), syt / nt - theta * (sxt / nt - mx)


def bootstrap_diff(
    control: Sequence[float],
    treatment: Sequence[float],
    *,
    control_x: Sequence[float] | None = None,
    treatment_x: Sequence[float] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[Interval, Interval]:
    """Percentile-bootstrap intervals of the absolute and relative uplift ``mean(T) − mean(C)``.

    With covariates (``control_x``, ``treatment_x``) the uplift is CUPED-adjusted, θ pooled and
    re-estimated per replicate (see the module docstring). Each arm is resampled with
    replacement on its own; ``seed`` fixes every draw. The point estimates are the full-sample
    ones, not the replicates' mean. Values are centred on their pooled means first (θ and the
    difference do not change; the sums of squares stay well conditioned)."""
    np = require_numpy()
    yc, yt = np.asarray(control, dtype=float), np.asarray(treatment, dtype=float)
    if yc.size < 2 or yt.size < 2:
        raise ValueError("each arm needs at least 2 observations")
    if n_boot < 100:
        raise ValueError(f"n_boot must be at least 100, got {n_boot}")
    y0 = float(np.concatenate([yc, yt]).mean())
    yc, yt = yc - y0, yt - y0
    xc = xt = None
    if control_x is not None and treatment_x is not None:
        xc, xt = np.asarray(control_x, dtype=float), np.asarray(treatment_x, dtype=float)
        if xc.shape != yc.shape or xt.shape != yt.shape:
            raise ValueError("each arm's covariate must have one value per observation")
        x0 = float(np.concatenate([xc, xt]).mean())
        xc, xt = xc - x0, xt - x0
    nc, nt = yc.size, yt.size
    pc, pt = _arm_means(nc, _moments(yc, xc, np.arange(nc)[None]), nt, _moments(yt, xt, np.arange(nt)[None]))
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // (nc + nt))
    parts = []
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        ic, it = rng.integers(0, nc, size=(b, nc)), rng.integers(0, nt, size=(b, nt))
        parts.append(_arm_means(nc, _moments(yc, xc, ic), nt, _moments(yt, xt, it)))
    mc = np.concatenate([p[0] for p in parts]) + y0
    mt = np.concatenate([p[1] for p in parts]) + y0
    point = Diff(float(pc[0]) + y0, float(pt[0]) + y0)
    alpha = (1.0 - level) / 2.0
    q = (alpha, 1.0 - alpha)
    lo_a, hi_a = np.quantile(mt - mc, q)
    rel = np.divide(mt - mc, mc, out=np.full_like(mc, np.nan), where=mc != 0)
    lo_r, hi_r = np.nanquantile(rel, q) if np.isfinite(rel).any() else (math.nan, math.nan)
    return (
        Interval(point.absolute, float(lo_a), float(hi_a), level),
        Interval(point.relative, float(lo_r), float(hi_r), level),
    )
