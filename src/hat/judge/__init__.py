"""Judges of the simulated live room: pure functions ``(episode, trace, harness) -> JudgeResult``.

Five dimensions, as in the report (formulas in each module's docstring):

=================  ==================================  ==============================
name               module                              segment (GDPO)
=================  ==================================  ==============================
accuracy           :mod:`hat.judge.accuracy`           reply
effectiveness      :mod:`hat.judge.effectiveness`      reply
tool_rationality   :mod:`hat.judge.tools`              tool
skill_selection    :mod:`hat.judge.skills`             tool
cot_length         :mod:`hat.judge.cot` (``1 − q(L)``) both (raw reward ``−0.1·q(L)``)
=================  ==================================  ==============================

Every judge reads the harness as it is *now* (names, ``param_map``, limits, reply rules, decoy
skills), so a trajectory produced under an augmented harness is judged against that harness and
gold written in function ids follows every rename. :func:`judge_trace` runs them all;
:mod:`hat.judge.rewards` wraps them as TRL reward functions; :mod:`hat.judge.llm` is an optional
LLM judge of free-text quality (not part of :data:`JUDGES`).
"""

from __future__ import annotations

from collections.abc import Mapping

from hat.env.episode import Episode
from hat.harness.state import Harness
from hat.harness.trace import Trace
from hat.judge.accuracy import accuracy
from hat.judge.base import Judge, JudgeResult
from hat.judge.cot import cot_length, cot_reward, q, reasoning_tokens
from hat.judge.effectiveness import effectiveness
from hat.judge.skills import skill_selection
from hat.judge.tools import tool_rationality

__all__ = [
    "JUDGES",
    "SEGMENTS",
    "Judge",
    "JudgeResult",
    "accuracy",
    "cot_length",
    "cot_reward",
    "effectiveness",
    "get_judge",
    "judge_trace",
    "q",
    "reasoning_tokens",
    "skill_selection",
    "tool_rationality",
]

JUDGES: dict[str, Judge] = {
    "accuracy": accuracy,
    "effectiveness": effectiveness,
    "tool_rationality": tool_rationality,
    "skill_selection": skill_selection,
    "cot_length": cot_length,
}
"""The default judges, by dimension name (the keys of :func:`judge_trace`'s result)."""

SEGMENTS: dict[str, tuple[str, ...]] = {
    "tool": ("tool_rationality", "skill_selection"),
    "reply": ("accuracy", "effectiveness"),
}
"""GDPO segments: which dimensions' advantages apply to which tokens."""


def get_judge(name: str) -> Judge:
    """The judge registered as ``name``; an unknown name lists the known ones."""
    try:
        return JUDGES[name]
    except KeyError:
        raise KeyError(f"unknown judge {name!r}; known judges: {', '.join(JUDGES)}") from None


def judge_trace(
    episode: Episode, trace: Trace, harness: Harness, *, judges: Mapping[str, Judge] | None = None
) -> dict[str, JudgeResult]:
    """Run every judge (default :data:`JUDGES`) on one trajectory, in a stable order."""
    return {name: judge(episode, trace, harness) for name, judge in (judges or JUDGES).items()}
