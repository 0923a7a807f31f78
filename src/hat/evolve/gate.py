"""Evaluate + regression gate: old and new harness on the same episodes and seeds, compared pair by
pair; promote only if the target cluster improves and nothing else drops beyond noise.

Pairing: for every suite, both harnesses get the cases ``build_cases(suite, n, seed)`` makes from
them — the same episodes (checked by id), the same policy seeds, and for the variant suites
(t2, t3) the same augmentation seeds. Each episode therefore gives one difference per metric,
``new − old``, and the noise that matters is the spread of those differences, not of two
independent means: the paired design needs far fewer episodes to see a real change.

Cells: per suite, every task dimension and the overall score over all episodes; the overall score
of each intent; and the **target** (the cluster's intent and dimension, on the first suite). Each
cell gets the mean difference (points, ×100) and a percentile **paired bootstrap** confidence
interval (episodes resampled with replacement, ``resamples`` times, ``random.Random(seed)``).

Decision:

- the target must improve: the CI's lower bound above 0;
- no cell may regress: a cell regresses when its CI's upper bound is below ``−tolerance`` (the drop
  is beyond noise and beyond what the operator tolerates; default 0 points);
- both hold → ``promoted``, else ``blocked``, with the reasons. Without a target (a person's edit
  not tied to a cluster) only the second rule applies.

No correction for the number of cells is made: with ~15 cells a suite and 95 % intervals, a
harmless edit under a noisy model is blocked now and then (a false alarm costs a re-run, a missed
regression costs production). The decision, every cell and both runs' summaries go into the
lineage (:meth:`~hat.evolve.lineage.Lineage.record_gate`).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hat.errors import HatError
from hat.eval.runner import TASK_DIMS, CaseResult, SuiteResult, run_cases
from hat.eval.suites import build_cases
from hat.evolve.lineage import Lineage

__all__ = [
    "Cell",
    "GateResult",
    "Target",
    "compare",
    "decide",
    "evaluate",
    "evaluate_proposal",
    "gate",
    "paired_bootstrap",
    "run_paired",
]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    """The slice the edit must improve: ``intent`` (None: every episode) and ``dimension``."""

    intent: str | None
    dimension: str = "overall"
    suite: str | None = None  # None: the first suite of the gate

    @classmethod
    def from_cluster(cls, cluster: dict[str, Any]) -> Target | None:
        key = cluster.get("key") or {}
        if not key:
            return None
        return cls(key.get("intent"), key.get("dimension", "overall"))


@dataclass(frozen=True)
class Cell:
    suite: str
    slice: str  # "all", "intent:<name>" or "target:<intent>"
    dim: str  # a task dimension or "overall"
    n: int
    old: float
    new: float
    diff: float
    lo: float
    hi: float
    verdict: str  # "better" | "worse" | "same"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GateResult:
    decision: str  # "promoted" | "blocked"
    reasons: list[str]
    target: Target | None
    cells: list[Cell]
    settings: dict[str, Any] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def promoted(self) -> bool:
        return self.decision == "promoted"

    def target_cell(self) -> Cell | None:
        return next((c for c in self.cells if c.slice.startswith("target:")), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "reasons": self.reasons,
            "target": asdict(self.target) if self.target else None,
            "cells": [c.to_dict() for c in self.cells],
            "settings": self.settings,
            "summaries": self.summaries,
        }


def paired_bootstrap(
    diffs: Sequence[float], rng: random.Random, *, resamples: int = 1000, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(mean, lower, upper) of the mean of ``diffs``: a percentile bootstrap over the pairs."""
    if not diffs:
        return 0.0, 0.0, 0.0
    mean = statistics.fmean(diffs)
    if max(diffs) == min(diffs):
        return mean, mean, mean
    n = len(diffs)
    means = sorted(statistics.fmean(diffs[rng.randrange(n)] for _ in range(n)) for _ in range(resamples))
    alpha = (1 - confidence) / 2
    lo = means[max(0, math.floor(alpha * resamples))]
    hi = means[min(resamples - 1, math.ceil((1 - alpha) * resamples) - 1)]
    return mean, lo, hi


# -- running --------------------------------------------------------------------------------------------
def run_paired(
    old: str | Path,
    new: str | Path,
    *,
    suites: Sequence[str],
    n: int,
    seed: int,
    model: str,
    fault_rate: float = 0.0,
    progress: Progress | None = None,
    batch_size: int = 1,
    load_options: Mapping[str, Any] | None = None,
    on_case: Callable[[CaseResult], None] | None = None,
) -> dict[str, tuple[SuiteResult, SuiteResult]]:
    """Both harness folders on every suite's same episodes (see the module docstring).
    ``batch_size``/``load_options``: as for :func:`~hat.eval.runner.run_cases` (the CLI passes the
    fast path's, :mod:`hat.eval.run_options`); both versions run with the same ones. ``on_case`` is
    called as each of the ``2 · n · len(suites)`` episodes finishes (a progress bar)."""
    out = {}
    for suite in suites:
        results = []
        for label, folder in (("old", old), ("new", new)):
            if progress:
                progress(f"{suite}: {label} harness, {n} episodes")
            cases = build_cases(suite, n=n, seed=seed, harness=str(folder), fault_rate=fault_rate)
            results.append(
                run_cases(
                    suite,
                    cases,
                    model,
                    seed=seed,
                    batch_size=batch_size,
                    load_options=dict(load_options or {}),
                    on_case=on_case,
                )
            )
        ids = [[c.episode_id for c in r.cases] for r in results]
        if ids[0] != ids[1]:
            raise HatError(f"{suite}: the two harnesses got different episodes; the gate needs pairs")
        out[suite] = (results[0], results[1])
    return out


def _value(case: CaseResult, dim: str) -> float:
    return 100 * (case.overall if dim == "overall" else case.scores[dim])


def _cell(
    suite: str, name: str, dim: str, pairs: list[tuple[CaseResult, CaseResult]], rng: random.Random, **kw: Any
) -> Cell:
    olds = [_value(a, dim) for a, _ in pairs]
    news = [_value(b, dim) for _, b in pairs]
    mean, lo, hi = paired_bootstrap([b - a for a, b in zip(olds, news, strict=True)], rng, **kw)
    old_mean = statistics.fmean(olds) if olds else 0.0
    new_mean = statistics.fmean(news) if news else 0.0
    return Cell(suite, name, dim, len(pairs), round(old_mean, 3), round(new_mean, 3), round(mean, 3), lo, hi, "same")


def compare(
    paired: dict[str, tuple[SuiteResult, SuiteResult]],
    target: Target | None,
    *,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
    tolerance: float = 0.0,
) -> list[Cell]:
    """Every cell of the module docstring, with its verdict."""
    cells: list[Cell] = []
    first = next(iter(paired), None)
    for suite, (old, new) in paired.items():
        rng = random.Random(f"gate:{seed}:{suite}")
        kw = {"resamples": resamples, "confidence": confidence}
        pairs = list(zip(old.cases, new.cases, strict=True))
        cells += [_cell(suite, "all", dim, pairs, rng, **kw) for dim in (*TASK_DIMS, "overall")]
        for intent in sorted({a.intent for a, _ in pairs}):
            cells.append(
                _cell(suite, f"intent:{intent}", "overall", [p for p in pairs if p[0].intent == intent], rng, **kw)
            )
        if target is not None and suite == (target.suite or first):
            chosen = [p for p in pairs if target.intent in (None, p[0].intent)]
            cells.append(_cell(suite, f"target:{target.intent or 'all'}", target.dimension, chosen, rng, **kw))
    return [_with_verdict(c, tolerance) for c in cells]


def _with_verdict(cell: Cell, tolerance: float) -> Cell:
    verdict = "better" if cell.lo > 0 else "worse" if cell.hi < -tolerance else "same"
    lo, hi = round(cell.lo, 3), round(cell.hi, 3)
    return Cell(**{**asdict(cell), "lo": lo, "hi": hi, "verdict": verdict})


def decide(cells: Sequence[Cell], target: Target | None) -> tuple[str, list[str]]:
    """(``promoted`` | ``blocked``, reasons) by the rules of the module docstring."""
    reasons = []
    target_cell = next((c for c in cells if c.slice.startswith("target:")), None)
    if target is not None:
        if target_cell is None or target_cell.n == 0:
            reasons.append(f"no episode of the target ({target.intent}, {target.dimension}) in the gate's episodes")
        elif target_cell.verdict != "better":
            reasons.append(
                f"target {target.intent}/{target.dimension} did not improve beyond noise: "
                f"{target_cell.diff:+.2f} points, CI [{target_cell.lo:+.2f}, {target_cell.hi:+.2f}]"
            )
    for c in cells:
        if c.verdict == "worse" and not c.slice.startswith("target:"):
            reasons.append(f"{c.suite} {c.slice} {c.dim} dropped {c.diff:+.2f} points, CI [{c.lo:+.2f}, {c.hi:+.2f}]")
    if not reasons:
        reasons.append(
            "target improved and no dimension, suite or intent dropped beyond noise"
            if target
            else "no dimension, suite or intent dropped beyond noise"
        )
        return "promoted", reasons
    return "blocked", reasons


def evaluate(
    old: str | Path,
    new: str | Path,
    target: Target | None,
    *,
    model: str,
    suites: Sequence[str] = ("t1",),
    n: int = 200,
    seed: int = 0,
    fault_rate: float = 0.0,
    resamples: int = 1000,
    confidence: float = 0.95,
    tolerance: float = 0.0,
    progress: Progress | None = None,
    batch_size: int = 1,
    load_options: Mapping[str, Any] | None = None,
    on_case: Callable[[CaseResult], None] | None = None,
) -> GateResult:
    """Run both harness folders paired, compare, decide (nothing recorded). ``model``: a model spec
    or simulator policy, as for ``hat eval``; ``batch_size``/``load_options``: see :func:`run_paired`."""
    paired = run_paired(
        old, new, suites=suites, n=n, seed=seed, model=model, fault_rate=fault_rate, progress=progress,
        batch_size=batch_size, load_options=load_options, on_case=on_case,
    )  # fmt: skip
    cells = compare(paired, target, seed=seed, resamples=resamples, confidence=confidence, tolerance=tolerance)
    decision, reasons = decide(cells, target)
    settings = {"suites": list(suites), "n": n, "seed": seed, "model": model, "fault_rate": fault_rate}
    settings |= {"resamples": resamples, "confidence": confidence, "tolerance": tolerance}
    settings |= {"batch_size": batch_size} | dict(load_options or {})
    summaries = {s: {"old": _brief(a), "new": _brief(b)} for s, (a, b) in paired.items()}
    return GateResult(decision, reasons, target, cells, settings, summaries)


def gate(
    lineage: Lineage,
    version: str,
    *,
    against: str | None = None,
    target: Target | None = None,
    record: bool = True,
    **options: Any,
) -> GateResult:
    """Gate lineage ``version`` against ``against`` (default: its parent) and record the decision.
    ``target`` defaults to the cluster of the proposal the version came from; ``options`` are
    :func:`evaluate`'s."""
    new = lineage.get(version)
    old = lineage.get(against or new.parent or new.hash)
    if old.hash == new.hash:
        raise HatError(f"{new.short} is the root of the lineage; there is nothing to gate it against")
    if target is None and new.proposal_id:
        from hat.evolve.propose import ProposalStore

        try:
            target = Target.from_cluster(ProposalStore(lineage).get(new.proposal_id).cluster)
        except HatError:
            target = None
    result = evaluate(lineage.folder(old.hash), lineage.folder(new.hash), target, **options)
    result.settings |= {"old": old.hash, "new": new.hash}
    if record:
        lineage.record_gate(new.hash, result.to_dict())
    return result


def evaluate_proposal(lineage: Lineage, proposal_id: str, **options: Any) -> GateResult:
    """The gate's evaluation of a pending proposal against its base, stored in the proposal for the
    review page (the decision is a preview: only :func:`gate` on an approved version records one)."""
    from dataclasses import replace

    from hat.evolve.propose import ProposalStore

    store = ProposalStore(lineage)
    proposal = store.get(proposal_id)
    target = Target.from_cluster(proposal.cluster)
    result = evaluate(lineage.folder(proposal.base_hash), store.folder(proposal_id), target, **options)
    store.save(replace(proposal, evaluation=result.to_dict()))
    return result


def _brief(result: SuiteResult) -> dict[str, Any]:
    return {"score": result.score(), "dims": result.dims(), "by_intent": result.by_intent(), "n": len(result.cases)}
