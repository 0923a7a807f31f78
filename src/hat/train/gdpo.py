"""The segment-decomposed GDPO advantage of HSA-RL, and the two ablations it is compared with.

Pure functions over numpy arrays, one value per rollout; the trainer (:mod:`hat.train.rl`) and a
scale-out engine call the same code. A batch holds ``B`` rollouts in groups of ``G`` (same episode,
same harness state); ``group_ids[i]`` names rollout ``i``'s group.

The decomposed advantage (DESIGN.md, the report's Eq. for HSA-RL)::

    Â_d   = (r_d − mean_G(r_d)) / (std_G(r_d) + ε)            per dimension d, within each group
    Â_s   = Σ_{d ∈ D_s} Â_d  −  λ · Â_CoT,s                     per segment s (tool, reply)
    Â_s  ←  Â_s / (std_B(Â_s) + ε)                              over the batch, per segment

``Â_CoT,s`` is the group-normalised ``q(L)`` of the reasoning spent in segment ``s`` (so longer
reasoning lowers that segment's advantage; λ = 0.1 is the report's weight). The segment's tokens
then carry ``Â_s`` (:func:`scatter_to_tokens`); prompt, tool-observation and feedback tokens carry
nothing, and a sequence whose tokens all carry 0 is dropped from the loss.

Conventions, and why:

- **std** is the sample standard deviation (Bessel's correction), as TRL's ``nanstd``, so the
  ``normalize_then_sum`` ablation equals TRL's ``multi_objective_aggregation="normalize_then_sum"``.
- **Zero-variance group → 0.** When every rollout of a group scored the same on a dimension, that
  dimension says nothing about which rollout was better: its ``Â_d`` is exactly 0 (tested as
  ``max == min``, not through ``ε``, because ``r − mean`` of equal floats can be a rounding residue
  that ``ε`` would blow up into a spurious non-zero).
- **NaN = not scored.** A NaN reward (a judge that does not apply) is left out of its group's mean
  and std and gets ``Â_d = 0``; a group with fewer than two scored rollouts gives 0.
- **Batch normalisation divides by the std only.** Each ``Â_d`` and ``Â_CoT`` sums to zero over
  every group (or is zero), so ``Â_s`` has batch mean exactly 0 in exact arithmetic; subtracting
  the float mean would only turn the exact zeros of zero-variance groups into residues, and then no
  sequence could ever be dropped. Per segment, so one segment's scale does not depend on how many
  dimensions the other sums or how much it varies.
- **A missing segment** (no tool call in a rollout) still has an advantage value — its rewards are
  part of the group statistics, which is how a rollout that called the right tool is credited over
  one that did not — but no tokens to carry it: :func:`scatter_to_tokens` puts it nowhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from hat.errors import HatError
from hat.train.rl_defaults import ADVANTAGES

__all__ = [
    "decomposed_advantages",
    "group_normalize",
    "normalize_then_sum_advantages",
    "plain_grpo_advantages",
    "scatter_to_tokens",
    "segment_advantages",
    "zero_advantage_groups",
]

FloatArray = npt.NDArray[np.float64]


def _array(values: Sequence[float] | FloatArray, n: int, what: str) -> FloatArray:
    out = np.asarray(values, dtype=np.float64)
    if out.shape != (n,):
        raise ValueError(f"{what} has shape {out.shape}; expected ({n},), one value per rollout")
    return out


def _sample_std(values: FloatArray) -> float:
    return float(np.std(values, ddof=1)) if values.size > 1 else 0.0


def group_normalize(values: Sequence[float] | FloatArray, group_ids: Sequence[int], eps: float = 1e-6) -> FloatArray:
    """``(r − mean_G) / (std_G + ε)`` within each group; zero-variance groups, groups with fewer
    than two scored values and NaN values give 0 (see the module docstring)."""
    groups = np.asarray(group_ids)
    r = _array(values, len(groups), "values")
    out = np.zeros_like(r)
    for group in np.unique(groups):
        members = (groups == group) & ~np.isnan(r)
        scored = r[members]
        if scored.size < 2 or scored.max() == scored.min():
            continue
        out[members] = (scored - scored.mean()) / (_sample_std(scored) + eps)
    return out


def _batch_scale(values: FloatArray, eps: float) -> FloatArray:
    std = _sample_std(values)
    return values / (std + eps) if std > 0 else np.zeros_like(values)


def decomposed_advantages(
    rewards: Mapping[str, Sequence[float]],
    group_ids: Sequence[int],
    segment_dims: Mapping[str, Sequence[str]],
    cot: Mapping[str, Sequence[float]] | None = None,
    lam: float = 0.1,
    eps: float = 1e-6,
) -> dict[str, FloatArray]:
    """Per segment, one advantage per rollout (module docstring). ``rewards``: judge score per
    dimension per rollout; ``segment_dims``: the dimensions each segment sums (e.g.
    :data:`hat.judge.SEGMENTS`); ``cot``: per segment, ``q(L)`` of that segment's reasoning per
    rollout (``None``: no length term); ``lam``: its weight λ."""
    n = len(group_ids)
    missing = sorted({d for dims in segment_dims.values() for d in dims} - set(rewards))
    if missing:
        raise KeyError(f"no rewards for dimension(s) {missing}; have {sorted(rewards)}")
    normalised = {d: group_normalize(_array(rewards[d], n, d), group_ids, eps) for d in rewards}
    out: dict[str, FloatArray] = {}
    for segment, dims in segment_dims.items():
        total = np.zeros(n)
        for dim in dims:
            total += normalised[dim]
        if cot is not None and segment in cot:
            total -= lam * group_normalize(_array(cot[segment], n, f"cot[{segment}]"), group_ids, eps)
        out[segment] = _batch_scale(total, eps)
    return out


def _weighted(rewards: Mapping[str, Sequence[float]], weights: Mapping[str, float] | None, n: int) -> dict:
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(rewards))
    if unknown:
        raise KeyError(f"weights for unknown dimension(s) {unknown}; have {sorted(rewards)}")
    return {d: (_array(r, n, d), float(weights.get(d, 1.0))) for d, r in rewards.items()}


def plain_grpo_advantages(
    rewards: Mapping[str, Sequence[float]],
    group_ids: Sequence[int],
    weights: Mapping[str, float] | None = None,
    eps: float = 1e-6,
) -> FloatArray:
    """The plain-GRPO ablation: one scalar reward per rollout, ``Σ_d w_d·r_d`` (NaN counts 0, as
    TRL's ``nansum``), group-normalised (TRL's ``sum_then_normalize`` with ``scale_rewards="group"``).
    One value per rollout: the same advantage on every token the policy wrote."""
    n = len(group_ids)
    total = np.zeros(n)
    for r, w in _weighted(rewards, weights, n).values():
        total += w * np.nan_to_num(r, nan=0.0)
    return group_normalize(total, group_ids, eps)


def normalize_then_sum_advantages(
    rewards: Mapping[str, Sequence[float]],
    group_ids: Sequence[int],
    weights: Mapping[str, float] | None = None,
    eps: float = 1e-6,
) -> FloatArray:
    """GDPO without segments (TRL's ``multi_objective_aggregation="normalize_then_sum"``): each
    dimension group-normalised, ``Σ_d w_d·Â_d``, then ``(x − mean_B) / (std_B + ε)`` over the batch.
    One value per rollout, on every token the policy wrote."""
    n = len(group_ids)
    total = np.zeros(n)
    for r, w in _weighted(rewards, weights, n).values():
        total += w * group_normalize(r, group_ids, eps)
    std = _sample_std(total)
    return (total - total.mean()) / (std + eps) if std > 0 else np.zeros(n)


def scatter_to_tokens(
    segment_advantages: Mapping[str, Sequence[float] | FloatArray],
    token_segments: Sequence[Sequence[str]],
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Per-token advantages and the sequences to drop.

    ``token_segments[i][t]``: the segment that token ``t`` of sequence ``i`` belongs to (a key of
    ``segment_advantages``), or ``""`` for a token the policy did not write in a segment (prompt,
    chat-template headers, tool observations, feedback). Returns ``(advantages, drop)``:
    ``advantages`` is ``(B, T_max)``, right-padded with 0, each token carrying its segment's value
    and every other token 0; ``drop[i]`` is True when every token of sequence ``i`` carries 0 (no
    learning signal: leave it out of the loss)."""
    n = len(token_segments)
    width = max((len(s) for s in token_segments), default=0)
    values = {k: _array(v, n, f"advantages[{k}]") for k, v in segment_advantages.items()}
    out = np.zeros((n, width))
    for i, labels in enumerate(token_segments):
        for segment, adv in values.items():
            mask = np.fromiter((label == segment for label in labels), dtype=bool, count=len(labels))
            out[i, : len(labels)][mask] = adv[i]
        unknown = {label for label in labels if label and label not in values}
        if unknown:
            raise KeyError(f"sequence {i} has tokens of segment(s) {sorted(unknown)} with no advantage")
    drop = ~np.any(out != 0.0, axis=1)
    return out, drop


def zero_advantage_groups(drop: Sequence[bool], group_ids: Sequence[int]) -> float:
    """The share of groups whose every sequence is dropped (the report's zero-advantage groups)."""
    groups = np.asarray(group_ids)
    dropped = np.asarray(drop, dtype=bool)
    names = np.unique(groups)
    if names.size == 0:
        return 0.0
    return float(np.mean([dropped[groups == g].all() for g in names]))


def segment_advantages(
    kind: str,
    rewards: Mapping[str, Sequence[float]],
    cot_q: Mapping[str, Sequence[float]],
    q_total: Sequence[float],
    group_ids: Sequence[int],
    segment_dims: Mapping[str, Sequence[str]],
    lam: float,
    eps: float,
) -> dict[str, npt.NDArray[np.float64]]:
    """Per segment, one advantage per rollout for the chosen ``kind`` (``HatRLConfig.advantage``).
    The ablations give every segment the same sequence-level value; their length term is the
    report's raw ``−λ·q(L)`` of the whole rollout, weighted like any dimension."""
    if kind == "segments":
        return decomposed_advantages(rewards, group_ids, segment_dims, cot_q, lam, eps)
    summed = {**rewards, "q": q_total}
    weights = {"q": -lam}
    if kind == "grpo":
        value = plain_grpo_advantages(summed, group_ids, weights, eps)
    elif kind == "normalize_then_sum":
        value = normalize_then_sum_advantages(summed, group_ids, weights, eps)
    else:
        raise HatError(f"unknown advantage {kind!r}; use one of {', '.join(ADVANTAGES)}")
    return {segment: value for segment in segment_dims}
