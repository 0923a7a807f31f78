"""Tool Rationality: the right tools, with the right arguments, under their current names, once,
and an honest answer when a backend failed.

Formula::

    for each gold call g (whose function the current harness still has):
        credit(g) = 0.5 + 0.5 · args(g, c)   for the best matching call c of g's function
                  = 0                          when no such call was made
    C = mean credit(g)                         (1 when no call is required)
    tool_rationality = C · Π_k PENALTY[k]^n_k

=================  =====  ================================================================
k                  PEN.   counted per call (each call in its first matching category)
=================  =====  ================================================================
unknown_tool       0.4    the name is not a tool of the current harness (stale after a
                          rename, or invented), or the runtime said ``unknown_tool``
decoy_tool         0.4    a tool with ``metadata.decoy: true`` (HSA's distractors)
invalid_args       0.7    ``invalid_args``, or a parameter used under its pre-rename name
irrelevant         0.5    a function neither required nor optional for the episode
redundant          0.7    same function and arguments as an earlier call that succeeded
unhandled_fault    0.3    per required function whose calls failed (timeout / error /
                          empty) with no later success, when the reply does not say it
                          will check / hand over, or states an unsupported number
=================  =====  ================================================================

``args(g, c)`` is the share of g's arguments that c matches, after renaming c's arguments to
canonical names through ``metadata.param_map``. Values compare case-insensitively, numbers as
numbers; a successful call's *result* also counts as the value it used (``"medium"`` resolved to
``"M"``, ``"dress"`` to ``p-dress-01``), which is how product arguments compare by product id. A
gold value of ``None`` means "may be omitted": omitted, empty, or (for ``product``) the product on
display all match; for a free-text argument (``query``, ``reason``) ``None`` means any wording
(the simulator's convention). A free-text gold *string* matches when the call's text contains at
least half of its content words.

Why a failed call still earns credit: calling the right tool was the right decision; what the
model does *after* the failure is scored by ``unhandled_fault``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from hat.env.episode import Episode, GoldCall
from hat.harness.state import Harness, canonical_json
from hat.harness.trace import Trace
from hat.judge.base import (
    JudgeResult,
    ResolvedCall,
    acknowledges,
    clamp,
    flagged_decoy,
    norm_number,
    resolve_calls,
    unrecovered_faults,
    unsupported_numbers,
)

__all__ = ["FREE_TEXT_PARAMS", "PENALTY", "arguments_score", "tool_rationality", "values_match"]

PENALTY: dict[str, float] = {
    "unknown_tool": 0.4,
    "decoy_tool": 0.4,
    "invalid_args": 0.7,
    "irrelevant": 0.5,
    "redundant": 0.7,
    "unhandled_fault": 0.3,
}
FREE_TEXT_PARAMS = frozenset({"query", "reason"})
Resolver = Callable[[str, str], "str | None"]  # (written product argument, function id) -> product id
_ECHO_KEYS: dict[str, tuple[str, ...]] = {"product": ("product", "on_display")}
_NUMERIC = re.compile(r"[-+]?\d+(?:[.,]\d+)*")
_STOP = frozenset(
    {"the", "and", "for", "with", "from", "that", "this", "have", "has", "was", "are", "not", "but", "you"}
)


def values_match(gold: Any, value: Any) -> bool:
    """Case- and whitespace-insensitive equality; numbers compared as numbers."""
    if gold is None or value is None:
        return gold is value
    g, v = " ".join(str(gold).split()), " ".join(str(value).split())
    if _NUMERIC.fullmatch(g) and _NUMERIC.fullmatch(v):
        return norm_number(g.lstrip("+")) == norm_number(v.lstrip("+"))
    return g.casefold() == v.casefold()


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]{3,}", text.lower()) if w not in _STOP}


def _free_text_match(gold: str, value: Any) -> bool:
    wanted = _content_words(gold)
    if not wanted:
        return bool(str(value or "").strip())
    return len(wanted & _content_words(str(value or ""))) >= 0.5 * len(wanted)


def _echoes(name: str, call: ResolvedCall) -> list[Any]:
    """What the call used for ``name``: the argument as written, and the value its result reports."""
    out = [call.arguments.get(name)]
    result = call.record.result
    if call.ok and isinstance(result, Mapping):
        out += [result.get(key) for key in _ECHO_KEYS.get(name, (name,)) if key in result]
    return [v for v in out if v is not None and v != ""]


def _arg_matches(name: str, gold: Any, call: ResolvedCall, on_display: Any, resolve: Resolver | None = None) -> bool:
    echoes = _echoes(name, call)
    written = call.arguments.get(name)
    if resolve is not None and name in _ECHO_KEYS and isinstance(gold, str) and isinstance(written, str):  # noqa: SIM102
        if resolve(written, call.function_id or "") == gold:  # words or a step the tool reads as the gold product
            return True
    if gold is None and name in FREE_TEXT_PARAMS:
        return True  # any wording of a free-text argument is fine
    if gold is None:
        omitted = call.arguments.get(name) in (None, "")
        on_screen = name in _ECHO_KEYS and on_display is not None
        return omitted or (on_screen and any(values_match(on_display, v) for v in echoes))
    if name in FREE_TEXT_PARAMS and isinstance(gold, str):
        return _free_text_match(gold, call.arguments.get(name))
    return any(values_match(gold, v) for v in echoes)


def arguments_score(
    gold: GoldCall, call: ResolvedCall, on_display: Any = None, resolve: Resolver | None = None
) -> float:
    """Share of the gold call's arguments the call matches (1 when the gold call has none). A
    product argument matches when the call's result names the gold product, or — for a call that
    failed or came back empty — when ``resolve`` (what the tools would make of the written words)
    maps it to the gold product."""
    if not gold.arguments:
        return 1.0
    hits = sum(_arg_matches(name, value, call, on_display, resolve) for name, value in gold.arguments.items())
    return hits / len(gold.arguments)


# -- the parts of the formula ----------------------------------------------------------------------------------
def _coverage(
    gold_calls: list[GoldCall], calls: list[ResolvedCall], on_display: Any, resolve: Resolver | None = None
) -> tuple[float, list[str]]:
    used: set[int] = set()
    credits, notes = [], []
    for g in gold_calls:
        candidates = [
            c
            for c in calls
            if c.function_id == g.function_id
            and not c.unknown
            and c.record.status != "invalid_args"
            and c.position not in used
        ]
        if not candidates:
            credits.append(0.0)
            notes.append(f"{g.function_id} not called")
            continue
        best = max(candidates, key=lambda c: (arguments_score(g, c, on_display, resolve), c.ok, -c.position))
        used.add(best.position)
        score = arguments_score(g, best, on_display, resolve)
        credits.append(0.5 + 0.5 * score)
        if score < 1.0:
            notes.append(f"{g.function_id} arguments {score:.0%} right")
    return (sum(credits) / len(credits) if credits else 1.0), notes


def _resolver(episode: Episode) -> Resolver:
    """What the livestream tools would make of a written product reference in this episode's room."""
    from hat.env.livestream_tools import resolve_reference
    from hat.env.world import world_catalog

    catalog = world_catalog(episode.world_seed)
    room = dict(episode.room)
    return lambda text, function_id: resolve_reference(text, catalog, room, steps=function_id == "switch_product_link")


def _category(call: ResolvedCall, allowed: set[str], seen_ok: set[str], decoys: set[str]) -> str | None:
    if call.unknown:
        return "unknown_tool"
    if call.function_id in decoys:
        return "decoy_tool"
    if call.record.status == "invalid_args" or call.stale_params:
        return "invalid_args"
    if call.function_id not in allowed:
        return "irrelevant"
    if _key(call) in seen_ok:
        return "redundant"
    return None


def _key(call: ResolvedCall) -> str:
    return f"{call.function_id}:{canonical_json(dict(call.arguments))}"


def _mistakes(calls: list[ResolvedCall], allowed: set[str], decoys: set[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {k: [] for k in PENALTY}
    seen_ok: set[str] = set()
    for call in calls:
        kind = _category(call, allowed, seen_ok, decoys)
        if kind is not None:
            found[kind].append(call.record.name)
        if call.ok and not call.unknown:
            seen_ok.add(_key(call))
    return found


def _unhandled_faults(episode: Episode, trace: Trace, harness: Harness, calls: list[ResolvedCall]) -> list[str]:
    """Unrecovered required faults, unless the reply says it will check and invents no number."""
    faults = unrecovered_faults(episode, calls)
    if faults and acknowledges(trace.reply) and not unsupported_numbers(episode, trace, harness):
        return []
    return faults


def tool_rationality(episode: Episode, trace: Trace, harness: Harness) -> JudgeResult:
    """The tool-rationality judge (formula in the module docstring)."""
    gold = episode.gold
    calls = resolve_calls(trace, harness)
    available = [g for g in gold.tool_calls if harness.tool_by_function(g.function_id) is not None]
    coverage, notes = _coverage(available, calls, episode.room.get("on_display"), _resolver(episode))
    allowed = {g.function_id for g in gold.tool_calls} | set(gold.optional_tools)
    decoys = {t.function_id for t in harness.tools if flagged_decoy(t.metadata)}
    mistakes = _mistakes(calls, allowed, decoys)
    mistakes["unhandled_fault"] = _unhandled_faults(episode, trace, harness, calls)
    score = coverage
    for kind, items in mistakes.items():
        score *= PENALTY[kind] ** len(items)
        if items:
            notes.append(f"{kind.replace('_', ' ')}: {', '.join(items)}")
    if not notes:
        notes.append("no tools needed, none called" if not gold.tool_calls and not calls else "right calls")
    details = {
        "coverage": coverage,
        "mistakes": {k: v for k, v in mistakes.items() if v},
        "calls": [c.record.name for c in calls],
        "unavailable_gold": [g.function_id for g in gold.tool_calls if g not in available],
    }
    return JudgeResult(clamp(score), "; ".join(notes), details)
