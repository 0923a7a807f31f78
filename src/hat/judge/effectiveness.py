"""Effectiveness: did the viewer get what they came for, in a reply the harness allows?

Formula::

    trace.status == "refused"   -> 1 if every comment was empty (refusing was right), else 0
    trace.status != "ok"        -> 0   (fallback / error: the viewer got the canned reply)
    reply empty                 -> 0
    otherwise  effectiveness = I · 0.3^(O + V)

- ``O`` = 1 when ``len(reply) > harness.limits.reply_max_chars`` (the limit *now*, after any HSA
  perturbation), else 0;
- ``V`` = number of violated reply rules: ``harness.settings["reply_rules"]`` is a list of
  ``{id, text, forbid_patterns: [regex], intents: [intent]}`` (``intents`` absent = all); a rule
  is violated when the episode's intent is among its intents and any pattern matches the reply
  (``re.IGNORECASE``; a pattern that does not compile is matched literally);
- ``I`` (intent served), by gold intent:

  ==========================  ==============================================================
  after_sales / order_change  1 if the handoff / switch function ran successfully; 0.5 if it
                              was called, failed, and the reply says it will check or hand
                              over; else 0
  other, or not answerable    0 if the reply states an unsupported number; 1 if it declines or
                              redirects (sorry / can't / customer service / let's get back to
                              the stream ...); else 0.2
  casual_chat                 (0.3 if tool facts are dumped: a value from a tool result or ≥ 2
                              numbers) · (0.7 if longer than 75% of the limit) · (0.5 if it is
                              the harness's fallback text, i.e. no answer at all)
  everything else             1 if a gold fact appears, or a value of a required tool's result
  (product_qa, discount,      is reflected; 0.5 if every required call failed and the reply
  faq, clarification)         says it will check; 1 when nothing is required; else 0
  ==========================  ==============================================================

Why multiplicative 0.3 per broken form rule: an over-long reply is cut by the TTS and a reply
that breaks an operator's rule cannot be sent, so either must pull a perfect answer into the
"broken" band (≤ 0.4) however good its content.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from hat.env.episode import Episode
from hat.harness.state import Harness
from hat.harness.trace import Trace
from hat.judge.accuracy import facts_found
from hat.judge.base import (
    JudgeResult,
    ResolvedCall,
    acknowledges,
    clamp,
    declines,
    numbers_in,
    phrase_in,
    request_is_empty,
    resolve_calls,
    unsupported_numbers,
)

__all__ = ["FORM_FACTOR", "INTENT_ACTIONS", "ReplyRule", "effectiveness", "reply_rules", "violated_rules"]

FORM_FACTOR = 0.3
"""Multiplier per broken form rule (over-length reply, each violated reply rule)."""

INTENT_ACTIONS = {"after_sales": "handoff_to_service", "order_change": "switch_product_link"}
"""Intents served by an action, not by words: the function that must run."""

SHORT_SHARE = 0.75
_IGNORED_KEYS = frozenset({"product", "name", "id", "on_display", "previous", "query", "currency", "status", "score"})


class ReplyRule:
    """One operator rule from ``settings.reply_rules``, compiled."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.id = str(spec.get("id", ""))
        self.text = str(spec.get("text", ""))
        intents = spec.get("intents")
        self.intents = None if intents is None else frozenset(str(i) for i in intents)
        self.patterns = [_compile(str(p)) for p in spec.get("forbid_patterns", [])]

    def applies(self, intent: str) -> bool:
        return self.intents is None or intent in self.intents

    def violated_by(self, reply: str) -> bool:
        return any(p.search(reply) for p in self.patterns)


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error:
        return re.compile(re.escape(pattern), re.IGNORECASE)


def reply_rules(harness: Harness) -> list[ReplyRule]:
    return [ReplyRule(spec) for spec in harness.settings.get("reply_rules", []) or [] if isinstance(spec, Mapping)]


def violated_rules(harness: Harness, intent: str, reply: str) -> list[str]:
    """Ids (or texts) of the reply rules the reply breaks for this intent."""
    return [r.id or r.text for r in reply_rules(harness) if r.applies(intent) and r.violated_by(reply)]


# -- what a tool result contributes to a reply ---------------------------------------------------------------
def _leaves(value: Any) -> list[Any]:
    """The scalar values of a tool result, minus identity fields (ids, names, the query)."""
    if isinstance(value, Mapping):
        return [leaf for k, v in value.items() if k not in _IGNORED_KEYS for leaf in _leaves(v)]
    if isinstance(value, list | tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [] if isinstance(value, bool) or value is None else [value]


def _reflected(reply: str, results: Sequence[Any]) -> bool:
    """Whether the reply repeats a value of one of ``results``: a number, a short string, or most
    of the content words of a long one (a paraphrased FAQ answer)."""
    reply_numbers = set(numbers_in(reply))
    reply_words = set(re.findall(r"[a-z0-9]{4,}", reply.lower()))
    for leaf in (leaf for result in results for leaf in _leaves(result)):
        text = str(leaf)
        if isinstance(leaf, int | float):
            if set(numbers_in(text)) & reply_numbers:
                return True
            continue
        words = set(re.findall(r"[a-z0-9]{4,}", text.lower()))
        if len(words) > 4 and len(words & reply_words) >= 0.4 * len(words):
            return True
        if len(text) >= 3 and len(words) <= 4 and phrase_in(text, reply):
            return True
    return False


# -- intent scores -------------------------------------------------------------------------------------------
def _action_score(calls: list[ResolvedCall], function_id: str, reply: str) -> tuple[float, str]:
    mine = [c for c in calls if c.function_id == function_id]
    if any(c.ok for c in mine):
        return 1.0, f"{function_id} done"
    if mine and acknowledges(reply):
        return 0.5, f"{function_id} failed; the reply says it will follow up"
    return 0.0, f"{function_id} failed" if mine else f"{function_id} never called"


def _decline_score(episode: Episode, trace: Trace, harness: Harness) -> tuple[float, str]:
    if unsupported_numbers(episode, trace, harness):
        return 0.0, "unanswerable request answered with invented numbers"
    if declines(trace.reply) or acknowledges(trace.reply):
        return 1.0, "declined / redirected"
    return 0.2, "neither declined nor redirected"


def _casual_score(trace: Trace, harness: Harness, calls: list[ResolvedCall]) -> tuple[float, str]:
    reply = trace.reply
    dumped = len(numbers_in(reply)) >= 2 or _reflected(reply, [c.record.result for c in calls if c.ok])
    long = len(reply) > SHORT_SHARE * harness.limits.reply_max_chars
    canned = reply.strip() == harness.output.fallback_reply.strip()
    score = (0.3 if dumped else 1.0) * (0.7 if long else 1.0) * (0.5 if canned else 1.0)
    notes = [n for n, bad in (("tool facts dumped", dumped), ("not short", long), ("canned reply", canned)) if bad]
    return score, ", ".join(notes) or "short on-topic chat"


def _info_score(episode: Episode, trace: Trace, calls: list[ResolvedCall]) -> tuple[float, str]:
    gold, reply = episode.gold, trace.reply
    if facts_found(gold.facts, reply):
        return 1.0, "needed fact given"
    required = {g.function_id for g in gold.tool_calls}
    results = [c.record.result for c in calls if c.ok and (c.function_id in required or not required)]
    if results and _reflected(reply, results):
        return 1.0, "tool result reflected"
    if not gold.facts and not required:
        return 1.0, "nothing specific required"
    tried = [c for c in calls if c.function_id in required]
    if tried and not any(c.ok for c in tried) and acknowledges(reply):
        return 0.5, "tools failed; the reply says it will check"
    return 0.0, "the needed information is missing"


def intent_score(episode: Episode, trace: Trace, harness: Harness) -> tuple[float, str]:
    """``I`` of the module docstring, with a short reason."""
    intent, calls = episode.gold.intent, resolve_calls(trace, harness)
    if intent in INTENT_ACTIONS:
        return _action_score(calls, INTENT_ACTIONS[intent], trace.reply)
    if intent == "other" or not episode.gold.answerable:
        return _decline_score(episode, trace, harness)
    if intent == "casual_chat":
        return _casual_score(trace, harness, calls)
    return _info_score(episode, trace, calls)


def effectiveness(episode: Episode, trace: Trace, harness: Harness) -> JudgeResult:
    """The effectiveness judge (formula in the module docstring)."""
    if trace.status == "refused":
        empty = request_is_empty(episode.comments)
        return JudgeResult(1.0 if empty else 0.0, "refused an empty request" if empty else "refused a real request")
    if trace.status != "ok":
        return JudgeResult(0.0, f"status {trace.status}: the viewer got the fallback reply")
    reply = trace.reply.strip()
    if not reply:
        return JudgeResult(0.0, "empty reply")
    served, why = intent_score(episode, trace, harness)
    limit = harness.limits.reply_max_chars
    over = len(reply) > limit
    violated = violated_rules(harness, episode.gold.intent, reply)
    score = served * FORM_FACTOR ** (int(over) + len(violated))
    parts = [why] + ([f"{len(reply)} chars > limit {limit}"] if over else [])
    parts += [f"breaks reply rule {v!r}" for v in violated]
    details = {"intent_score": served, "over_length": over, "limit": limit, "violated_rules": violated}
    return JudgeResult(clamp(score), "; ".join(parts), details)
