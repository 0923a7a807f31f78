"""The segment-decomposed GDPO advantage (:mod:`hat.train.gdpo`) on groups computed by hand.

Every expected value is written out as arithmetic. Two facts do most of the work: a group of
three with rewards ``(0, 0.5, 1)`` has mean 0.5 and sample std 0.5, so it normalises to
``(−1, 0, 1)``; a group ``(1, 0, 0)`` has mean 1/3 and sample variance ((2/3)² + 2·(1/3)²)/2 = 1/3,
so with ``S = 1/√3`` it normalises to ``(2/3, −1/3, −1/3) / S = (2S, −S, −S)``. A group of two with
different rewards always normalises to ``±1/√2``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hat.train.gdpo import (
    decomposed_advantages,
    group_normalize,
    normalize_then_sum_advantages,
    plain_grpo_advantages,
    scatter_to_tokens,
    zero_advantage_groups,
)

S = 1 / math.sqrt(3)
A = 1 / math.sqrt(2)
SEGMENTS = {"tool": ("tool_rationality", "skill_selection"), "reply": ("accuracy", "effectiveness")}

# two groups of three rollouts: group 0 = rollouts 0-2, group 1 = rollouts 3-5
GROUPS = [0, 0, 0, 1, 1, 1]
REWARDS = {
    "tool_rationality": [0.0, 0.5, 1.0, 1.0, 1.0, 1.0],  # g0: (−1, 0, 1)      g1: zero variance
    "skill_selection": [1.0, 0.0, 0.0, 1.0, 1.0, 1.0],  # g0: (2S, −S, −S)    g1: zero variance
    "accuracy": [1.0, 1.0, 1.0, 0.0, 0.5, 1.0],  # g0: zero variance   g1: (−1, 0, 1)
    "effectiveness": [1.0] * 6,  # zero variance everywhere
}
COT = {"tool": [0.0] * 6, "reply": [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]}  # g1 reply q: (2S, −S, −S)


def _batch_scaled(raw: list[float]) -> list[float]:
    """Divide by the batch's sample std; the raw values sum to 0, so std = sqrt(Σx² / (n − 1))."""
    std = math.sqrt(sum(x * x for x in raw) / (len(raw) - 1))
    return [x / std for x in raw]


def test_hand_computed_groups() -> None:
    tool_raw = [-1 + 2 * S, 0 - S, 1 - S, 0.0, 0.0, 0.0]  # Â_tool_rationality + Â_skill_selection
    reply_raw = [0.0, 0.0, 0.0, -1 - 0.1 * 2 * S, 0 + 0.1 * S, 1 + 0.1 * S]  # Â_accuracy − 0.1·Â_q
    got = decomposed_advantages(REWARDS, GROUPS, SEGMENTS, COT, lam=0.1, eps=0.0)
    assert set(got) == {"tool", "reply"}
    assert got["tool"].tolist() == pytest.approx(_batch_scaled(tool_raw), rel=1e-12)
    assert got["reply"].tolist() == pytest.approx(_batch_scaled(reply_raw), rel=1e-12)
    # ε only shrinks the values a little
    with_eps = decomposed_advantages(REWARDS, GROUPS, SEGMENTS, COT, lam=0.1)
    assert with_eps["tool"].tolist() == pytest.approx(got["tool"].tolist(), rel=1e-5)


def test_group_normalize_by_hand_and_exact_zeros() -> None:
    assert group_normalize([0.0, 0.5, 1.0], [0, 0, 0], eps=0.0).tolist() == pytest.approx([-1.0, 0.0, 1.0])
    assert group_normalize([1.0, 0.0, 0.0], [7, 7, 7], eps=0.0).tolist() == pytest.approx([2 * S, -S, -S])
    # zero variance: exactly 0, even for floats whose mean is a rounding residue away from them
    assert group_normalize([0.1, 0.1, 0.1, 0.3, 0.3], [0, 0, 0, 1, 1]).tolist() == [0.0] * 5
    # a lone rollout says nothing; NaN = not scored: out of mean and std, advantage 0
    assert group_normalize([5.0], [0]).tolist() == [0.0]
    got = group_normalize([1.0, math.nan, 0.0], [0, 0, 0], eps=0.0)
    assert got.tolist() == pytest.approx([A, 0.0, -A])


def test_zero_variance_group_gives_zero_advantages_and_is_dropped() -> None:
    rewards = {d: [1.0, 0.0, 0.5, 0.5] for d in ("tool_rationality", "skill_selection", "accuracy", "effectiveness")}
    got = decomposed_advantages(rewards, [0, 0, 1, 1], SEGMENTS, eps=0.0)
    # group 0 (1, 0): every dimension ±1/√2, summed per segment → (2A, −2A); group 1 is all 0.5
    for segment in ("tool", "reply"):
        assert got[segment][2:].tolist() == [0.0, 0.0]
        assert got[segment][:2].tolist() == pytest.approx(_batch_scaled([2 * A, -2 * A, 0.0, 0.0])[:2])
    labels = [["tool", "reply"]] * 4
    _, drop = scatter_to_tokens(got, labels)
    assert drop.tolist() == [False, False, True, True]
    assert zero_advantage_groups(drop, [0, 0, 1, 1]) == 0.5


def test_missing_tool_segment_is_in_the_statistics_but_carries_on_no_token() -> None:
    # rollout 0 called the tool it needed, rollout 1 answered without one; both replies were right
    rewards = {"tool_rationality": [1.0, 0.0], "skill_selection": [1.0, 1.0], "accuracy": [1.0, 1.0]}
    segments = {"tool": ("tool_rationality", "skill_selection"), "reply": ("accuracy",)}
    got = decomposed_advantages(rewards, [0, 0], segments, eps=0.0)
    # tool: (A, −A) scaled by the batch std sqrt((A² + A²)/1) = 1 → (A, −A); reply: zero variance → 0
    assert got["tool"].tolist() == pytest.approx([A, -A])
    assert got["reply"].tolist() == [0.0, 0.0]
    labels = [["", "tool", "tool", "", "reply"], ["reply", "reply", "reply"]]  # rollout 1: no tool round
    tokens, drop = scatter_to_tokens(got, labels)
    assert tokens[0].tolist() == pytest.approx([0.0, A, A, 0.0, 0.0])
    assert tokens[1].tolist() == [0.0, 0.0, 0.0, 0.0, 0.0]  # its −A has no token to go to
    assert drop.tolist() == [False, True]


def test_lambda_scales_the_cot_term_and_can_flip_the_sign() -> None:
    # group 0 differs only in tool rationality: Â = (A, −A); group 1 only in tool-segment q: Â_q = (A, −A)
    rewards = {"tool_rationality": [1.0, 0.0, 1.0, 1.0], "skill_selection": [1.0] * 4}
    cot = {"tool": [0.0, 0.0, 1.0, 0.0]}
    segments = {"tool": ("tool_rationality", "skill_selection")}
    for lam in (0.1, 0.5):
        got = decomposed_advantages(rewards, [0, 0, 1, 1], segments, cot, lam=lam, eps=0.0)["tool"]
        # raw (A, −A, −λA, λA): the batch scale cancels in ratios
        assert got[0] / got[2] == pytest.approx(-1 / lam)
        assert got[2] < 0 < got[3]  # the longer reasoning is the worse rollout
    # in one group, a better tool call with longer reasoning: (1 − λ)·A, positive below λ = 1
    one = {"tool_rationality": [1.0, 0.0], "skill_selection": [1.0, 1.0]}
    longer = {"tool": [1.0, 0.0]}
    assert decomposed_advantages(one, [0, 0], segments, longer, lam=0.1)["tool"][0] > 0
    assert decomposed_advantages(one, [0, 0], segments, longer, lam=2.0)["tool"][0] < 0
    assert decomposed_advantages(one, [0, 0], segments, longer, lam=0.0)["tool"].tolist() == pytest.approx(
        decomposed_advantages(one, [0, 0], segments, None)["tool"].tolist()
    )


def test_batch_normalisation_per_segment() -> None:
    got = decomposed_advantages(REWARDS, GROUPS, SEGMENTS, COT, lam=0.1, eps=0.0)
    for values in got.values():
        assert float(np.std(values, ddof=1)) == pytest.approx(1.0)
        assert float(np.mean(values)) == pytest.approx(0.0, abs=1e-12)
    # scale-free: rewards × 5 + 2 give the same advantages
    shifted = {d: [5 * r + 2 for r in v] for d, v in REWARDS.items()}
    again = decomposed_advantages(shifted, GROUPS, SEGMENTS, COT, lam=0.1, eps=0.0)
    assert again["tool"].tolist() == pytest.approx(got["tool"].tolist())
    # each segment is scaled by its own std: the reply segment's scale does not leak into the tool's
    louder = {**REWARDS, "effectiveness": [1.0, 1.0, 1.0, 0.0, 0.5, 1.0]}  # reply now sums two (−1, 0, 1)
    assert decomposed_advantages(louder, GROUPS, SEGMENTS, COT, eps=0.0)["tool"].tolist() == pytest.approx(
        got["tool"].tolist()
    )


def test_plain_grpo_by_hand() -> None:
    rewards = {"tool_rationality": [1.0, 0.0, 0.0], "accuracy": [0.0, 0.0, 1.0], "q": [0.0, 0.0, 1.0]}
    # summed without q: (1, 0, 1): mean 2/3, deviations (1/3, −2/3, 1/3), var (1/9 + 4/9 + 1/9)/2 = 1/3
    got = plain_grpo_advantages({k: rewards[k] for k in ("tool_rationality", "accuracy")}, [0, 0, 0], eps=0.0)
    assert got.tolist() == pytest.approx([(1 / 3) / S, (-2 / 3) / S, (1 / 3) / S])
    # with the raw −0.1·q(L): (1, 0, 0.9): mean 19/30, deviations (11/30, −19/30, 8/30)
    weighted = plain_grpo_advantages(rewards, [0, 0, 0], {"q": -0.1}, eps=0.0)
    devs = [11 / 30, -19 / 30, 8 / 30]
    std = math.sqrt(sum(d * d for d in devs) / 2)
    assert weighted.tolist() == pytest.approx([d / std for d in devs])
    with pytest.raises(KeyError, match="unknown dimension"):
        plain_grpo_advantages(rewards, [0, 0, 0], {"length": 1.0})


def test_normalize_then_sum_by_hand() -> None:
    rewards = {"tool_rationality": [1.0, 0.0, 1.0, 1.0], "accuracy": [1.0, 0.0, 0.0, 1.0]}
    # group 0: both dims (A, −A) → (2A, −2A); group 1: tool zero variance, accuracy (−A, A)
    raw = [2 * A, -2 * A, -A, A]
    std = math.sqrt(sum(x * x for x in raw) / 3)  # mean 0
    got = normalize_then_sum_advantages(rewards, [0, 0, 1, 1], eps=0.0)
    assert got.tolist() == pytest.approx([x / std for x in raw])
    # versus the segments: rollout 2's tool segment gets 0, its reply segment carries the loss
    seg = decomposed_advantages(rewards, [0, 0, 1, 1], {"tool": ("tool_rationality",), "reply": ("accuracy",)})
    assert seg["tool"][2] == 0.0 and seg["reply"][2] < 0


def test_scatter_to_tokens_layout_and_errors() -> None:
    advantages = {"tool": [0.5, -1.0], "reply": [2.0, 0.0]}
    tokens, drop = scatter_to_tokens(advantages, [["", "tool", "", "reply", "reply"], ["reply", ""]])
    assert tokens.tolist() == [[0.0, 0.5, 0.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0, 0.0]]  # right-padded
    assert drop.tolist() == [False, True]
    with pytest.raises(KeyError, match="summary"):
        scatter_to_tokens(advantages, [["summary"], ["reply"]])
    with pytest.raises(ValueError, match="one value per rollout"):
        scatter_to_tokens({"tool": [1.0]}, [["tool"], ["tool"]])
    with pytest.raises(KeyError, match="no rewards for dimension"):
        decomposed_advantages({"accuracy": [1.0, 0.0]}, [0, 0], SEGMENTS)
