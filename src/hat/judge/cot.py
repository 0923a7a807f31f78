"""CoT length: the report's ``q(L)`` on the reasoning a trace spent.

``L`` is the number of reasoning tokens: the sum over rounds of ``Round.reasoning`` (the
``<think>`` spans), counted with a caller's tokenizer, or by default with a regex that counts
each word (``\\w+``) and each punctuation mark as one token (close to a BPE count for English,
and free of model dependencies)::

    q(L) = 0                 for L ≤ 100
         = (L − 100) / 100   for 100 < L < 200
         = 1                 for L ≥ 200
    raw reward contribution  = −0.1 · q(L)          (:func:`cot_reward`)
    judge score              = 1 − q(L)             (:func:`cot_length`; 1 = short enough)

Why the judge reports ``1 − q`` rather than ``q``: every judge scores 1 for the behaviour we
want, so reports and rejection sampling can treat the five dimensions alike. RL uses the raw
contribution (GDPO normalises it per group; its sign is what matters).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sized
from typing import Any

from hat.env.episode import Episode
from hat.harness.state import Harness
from hat.harness.trace import Trace
from hat.judge.base import JudgeResult

__all__ = [
    "COT_WEIGHT",
    "L_FREE",
    "L_FULL",
    "Tokenizer",
    "cot_length",
    "cot_reward",
    "count_tokens",
    "q",
    "reasoning_tokens",
]

L_FREE = 100
L_FULL = 200
COT_WEIGHT = 0.1

Tokenizer = Callable[[str], Any]
"""Text -> token count (``int``) or a sized sequence of tokens (e.g. a HF tokenizer's ``encode``)."""

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str, tokenizer: Tokenizer | None = None) -> int:
    if not text:
        return 0
    if tokenizer is None:
        return len(_TOKEN.findall(text))
    out = tokenizer(text)
    if isinstance(out, Sized):
        return len(out)
    return int(out)


def reasoning_tokens(trace: Trace, tokenizer: Tokenizer | None = None) -> int:
    """``L``: reasoning tokens summed over the trace's rounds."""
    return sum(count_tokens(r.reasoning, tokenizer) for r in trace.rounds)


def q(length: float) -> float:
    if length <= L_FREE:
        return 0.0
    if length >= L_FULL:
        return 1.0
    return (length - L_FREE) / (L_FULL - L_FREE)


def cot_reward(trace: Trace, tokenizer: Tokenizer | None = None) -> float:
    """The raw reward contribution ``−0.1 · q(L)``."""
    return -COT_WEIGHT * q(reasoning_tokens(trace, tokenizer))


def cot_length(episode: Episode, trace: Trace, harness: Harness, *, tokenizer: Tokenizer | None = None) -> JudgeResult:
    """The CoT-length judge: ``1 − q(L)``."""
    length = reasoning_tokens(trace, tokenizer)
    value = q(length)
    reason = f"{length} reasoning tokens" + ("" if value == 0 else f", q={value:.2f}")
    details = {"tokens": length, "q": value, "reward": -COT_WEIGHT * value}
    return JudgeResult(1.0 - value, reason, details)
