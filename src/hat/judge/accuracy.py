"""Accuracy: does the reply say what is true, and nothing that is made up?

Formula (``reply`` = the trace's final reply text)::

    C = |{f in gold.facts : f appears in reply}| / |gold.facts|      (1 when there are no facts)
    C = max(C, 0.5)  when a required tool failed for good (timeout / error / empty, no later
                     success) and the reply says it will check or hand over
    U = number of distinct unsupported numbers in reply
    F = number of forbidden claims in reply
    E = U + 2·F
    accuracy = C · 0.4^E            if gold.answerable
    accuracy =     0.4^E            otherwise (nothing to get right; only invention counts)

- A fact *appears* when it occurs case-insensitively with numbers compared as numbers and
  punctuation ignored (``"$49.90"`` matches ``"49.9"``; see :func:`~hat.judge.base.phrase_in`).
- A number is *supported* by a successful tool result, a gold fact or the hook's
  ``allowed_numbers`` (any form); by the system prompt or the host's earlier turns only in the
  same form (``$30`` needs a ``$30`` there: "30 min left" does not make "$30" true); by the
  viewer's own words only as a plain number (an order id). See :mod:`hat.judge.base`. A correct
  number is not an invented one even if the model never looked it up; Tool Rationality scores that.
- Forbidden claims are ``gold.forbidden`` plus the ``forbidden_phrases`` of the harness's
  ``grounded_claims`` hook (invented promises), matched like facts. Matching is literal: "I can't
  promise guaranteed delivery" still contains "guaranteed delivery" — deliberate, a live host
  should not say the phrase at all.

Why the fault excuse: facts behind a failed backend cannot be given; an honest "let me check"
invents nothing and must beat a confident guess (which gets the 0.4 factor instead), yet stay
below a retry that found the facts.

Why 0.4 per error: one invented price must pull a perfect reply down to the "broken" band
(≤ 0.4), and a forbidden promise counts double because it is a business risk, not only a
mistake. Derived numbers (a saving computed from two prices) count as unsupported, as they do
for the runtime's hook; a model should quote tool values.
"""

from __future__ import annotations

from hat.env.episode import Episode
from hat.harness.state import Harness
from hat.harness.trace import Trace
from hat.judge.base import (
    JudgeResult,
    acknowledges,
    clamp,
    harness_forbidden_phrases,
    phrase_in,
    resolve_calls,
    unrecovered_faults,
    unsupported_numbers,
)

__all__ = ["ERROR_FACTOR", "accuracy", "facts_found", "forbidden_found"]

ERROR_FACTOR = 0.4
"""Multiplier per invention (an unsupported number; a forbidden claim counts twice)."""
EXCUSED = 0.5
"""Coverage granted when a required tool failed for good and the reply honestly says so."""


def _excused(episode: Episode, trace: Trace, harness: Harness) -> bool:
    return bool(unrecovered_faults(episode, resolve_calls(trace, harness))) and acknowledges(trace.reply)


def facts_found(facts: tuple[str, ...] | list[str], reply: str) -> list[str]:
    return [f for f in facts if phrase_in(f, reply)]


def forbidden_found(episode: Episode, harness: Harness, reply: str) -> list[str]:
    claims = dict.fromkeys([*episode.gold.forbidden, *harness_forbidden_phrases(harness)])
    return [c for c in claims if phrase_in(c, reply)]


def accuracy(episode: Episode, trace: Trace, harness: Harness) -> JudgeResult:
    """The accuracy judge (formula in the module docstring)."""
    gold, reply = episode.gold, trace.reply
    found = facts_found(gold.facts, reply)
    coverage = len(found) / len(gold.facts) if gold.facts else 1.0
    unsupported = unsupported_numbers(episode, trace, harness)
    excused = coverage < EXCUSED and _excused(episode, trace, harness)
    coverage = EXCUSED if excused else coverage
    forbidden = forbidden_found(episode, harness, reply)
    errors = len(unsupported) + 2 * len(forbidden)
    score = (coverage if gold.answerable else 1.0) * ERROR_FACTOR**errors
    parts: list[str] = []
    if excused:
        parts.append("a required tool failed and the reply says so (coverage 0.5)")
    elif gold.answerable and gold.facts:
        missing = [f for f in gold.facts if f not in found]
        parts.append(f"{len(found)}/{len(gold.facts)} facts" + (f" (missing {missing})" if missing else ""))
    if unsupported:
        parts.append(f"unsupported numbers {unsupported}")
    if forbidden:
        parts.append(f"forbidden claims {forbidden}")
    if not parts:
        parts.append("nothing invented")
    details = {
        "coverage": coverage,
        "excused_by_fault": excused,
        "facts_found": found,
        "unsupported_numbers": unsupported,
        "forbidden_claims": forbidden,
        "answerable": gold.answerable,
    }
    return JudgeResult(clamp(score), "; ".join(parts), details)
