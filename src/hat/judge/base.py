"""What every judge shares: the result type, the ``Judge`` signature, and the text and trace
helpers the dimensions agree on (numbers, phrases, grounding, tool calls seen through the
harness's *current* names).

A judge is a pure function ``(episode, trace, harness) -> JudgeResult`` with ``score`` in [0, 1]
(1 = best). It reads the harness as it is *now*: HSA renames tools, skills and parameters, so a
call is mapped to its stable function through ``harness.tool(name).function_id`` and its
arguments to canonical names through the tool's ``metadata.param_map`` (canonical -> current; an
absent map is the identity). Gold (:class:`~hat.env.episode.Gold`) speaks only in function ids
and canonical names, so the label follows the transformation.

Numbers are read, and their grounding decided, by :mod:`hat.harness.grounding` - the one parser
the runtime's ``grounded_claims`` and ``claims_check`` hooks and the simulator's oracle use too, so
hook, oracle and judge agree on what a number is (``49.90`` == ``49.9``; ``1,299`` is 1299, a
thousands separator, not a decimal comma; its docstring lists the rules). ``norm_number``,
``numbers_in``, ``typed_numbers`` and ``Grounding`` are re-exported here under their old names.

Grounding (where a reply's numbers may come from) is *typed*, because the numbers of a live
room's prompt are everywhere ("12 turns", "30 min", "110 cm") and a model that borrows them for
a price ("just $30, 12% off!") passes an untyped check. A reply number is supported when:

- it occurs in a successful, non-empty tool result, a gold fact, or the hook's ``allowed_numbers``
  (structured data: any kind); or
- it occurs with the *same kind* in the system prompt or an earlier host turn of the history,
  where kinds are ``money`` (``$30``, ``30 USD``), ``percent`` (``12%``) and ``plain``; a plain
  reply number may match any kind; or
- it is a plain number the viewer wrote (echoing an order number is not inventing one; repeating a
  viewer's guessed price is).

Skill bodies are not grounding (their digits are list markers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hat.env.episode import Episode
from hat.harness.grounding import NUMBER, Grounding, norm_number, numbers_in, typed_numbers
from hat.harness.state import Harness, ToolSpec
from hat.harness.trace import ToolCallRecord, Trace

__all__ = [
    "FAULT_STATUSES",
    "Grounding",
    "Judge",
    "JudgeResult",
    "ResolvedCall",
    "acknowledges",
    "canonical_arguments",
    "clamp",
    "declines",
    "flagged_decoy",
    "grounding",
    "harness_forbidden_phrases",
    "is_empty_result",
    "norm_number",
    "numbers_in",
    "param_map",
    "phrase_in",
    "request_is_empty",
    "resolve_calls",
    "typed_numbers",
    "unrecovered_faults",
    "unsupported_numbers",
]

FAULT_STATUSES = ("timeout", "error", "empty")
"""Tool statuses that are the backend's fault (the model did nothing wrong by calling)."""

_NO_DATA_KEYS = frozenset({"note", "query", "message"})
# a number as the grounding module reads it, a word (letters, then letters or digits: "LIVE10" is one
# word, so the number 10 is not in it), or stray digits the number pattern leaves (".5", "1.2.3")
_PHRASE_TOKEN = re.compile(rf"{NUMBER.pattern}|[^\W\d_][^\W_]*|\d+")

# "I'll check / customer service will follow up": the honest answer when a tool failed.
_ACK = re.compile(
    r"\b(check(?:ing)?|look(?:ing)? into|get back|follow(?:ing)? up|customer (?:service|care|support)|"
    r"support team|service team|ticket|hand(?:ed|ing)? (?:it )?(?:off|over)|pass(?:ed|ing)? (?:it |this )?on|"
    r"colleague|one moment|just a moment|give me a (?:moment|sec)|hold on|can(?:no|['’])t (?:load|see|reach|access)|"
    r"could(?:n['’]?t| not) (?:load|get|find|reach)|unable to|not available right now|try again|confirm)\b",
    re.IGNORECASE,
)
# "Sorry, I can only help with the products in this stream": the right answer when there is none.
_DECLINE = re.compile(
    r"\b(sorry|can(?:no|['’])t|can not|unable|not able|don['’]?t (?:have|know)|no (?:info|information|details)|"
    r"not sure|only (?:help|answer|talk)|here to (?:help|talk|chat)|let['’]?s (?:focus|talk|get back|stick)|"
    r"stick to|outside (?:what|my)|customer (?:service|care|support)|instead|(?:back|stick) to the (?:stream|show))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class JudgeResult:
    """One judge's verdict: ``score`` in [0, 1] (1 = best), a one-line ``reason`` a person can
    read, and ``details`` (sub-scores, counts) for reports and failure clustering."""

    score: float
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"a judge score must lie in [0, 1], got {self.score!r}; clamp it with clamp()")


class Judge(Protocol):
    """The judge extension point: a pure function of the episode, the trace and the harness."""

    def __call__(self, episode: Episode, trace: Trace, harness: Harness, /) -> JudgeResult: ...


def clamp(value: float) -> float:
    return min(1.0, max(0.0, float(value)))


def flagged_decoy(metadata: Mapping[str, Any]) -> bool:
    """``metadata.decoy`` is true (a bool, or "true"/"yes"/"1" from YAML written by hand)."""
    flag = metadata.get("decoy", False)
    return flag is True or str(flag).strip().lower() in ("true", "yes", "1")


# -- numbers and phrases ------------------------------------------------------------------------------
def _phrase_tokens(text: str) -> list[str]:
    return [norm_number(t) if t[0].isdigit() else t.lower() for t in _PHRASE_TOKEN.findall(text)]


def phrase_in(phrase: str, text: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as a run of whole tokens: case-insensitive, numbers
    compared as numbers, punctuation and currency signs ignored (``"$49.90"`` is in
    ``"only 49.9 today"``; ``"49.9"`` is not in ``"149.9"``). A phrase without Latin letters or
    digits (CJK) is matched as a plain substring."""
    if not phrase.strip():
        return False
    if not re.search(r"[A-Za-z0-9]", phrase):  # e.g. CJK: no word boundaries to tokenise on
        return phrase.strip().lower() in text.lower()
    needle, hay = _phrase_tokens(phrase), _phrase_tokens(text)
    if not needle:
        return False
    n = len(needle)
    return any(hay[i : i + n] == needle for i in range(len(hay) - n + 1))


def acknowledges(text: str) -> bool:
    """The reply says it will check, follow up or hand over (what to do when a tool failed)."""
    return bool(_ACK.search(text))


def declines(text: str) -> bool:
    """The reply declines or redirects (what to do when the request has no answer)."""
    return bool(_DECLINE.search(text))


# -- tool calls through the current harness --------------------------------------------------------------
def is_empty_result(result: Any) -> bool:
    """An "empty" answer (how :mod:`hat.env.faults` injects the ``empty`` fault): nothing, a
    mapping with no data besides a ``note`` / ``query``, a search with no ``results``, or an
    explicit ``{"empty": true}``."""
    if result is None or result == "" or result == [] or result == {}:
        return True
    if isinstance(result, Mapping):
        if result.get("empty") is True or not set(result) - _NO_DATA_KEYS:
            return True
        return "results" in result and not result["results"]
    return False


@dataclass(frozen=True)
class ResolvedCall:
    """A tool call seen through the current harness. ``function_id`` is ``None`` when the name is
    not a tool of this harness (stale after a rename, or invented); ``arguments`` use canonical
    parameter names; ``stale_params`` lists canonical names used after they were renamed."""

    position: int
    record: ToolCallRecord
    function_id: str | None
    arguments: Mapping[str, Any]
    stale_params: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.record.status == "ok" and not is_empty_result(self.record.result)

    @property
    def failed(self) -> bool:
        """Failed through no fault of the model: timeout, error, or an empty result."""
        status = self.record.status
        return status in FAULT_STATUSES or (status == "ok" and is_empty_result(self.record.result))

    @property
    def unknown(self) -> bool:
        return self.function_id is None or self.record.status == "unknown_tool"


def unrecovered_faults(episode: Episode, calls: list[ResolvedCall]) -> list[str]:
    """Required functions (gold) whose calls failed (timeout / error / empty) with no later success."""
    out = []
    for fid in dict.fromkeys(g.function_id for g in episode.gold.tool_calls):
        mine = [c for c in calls if c.function_id == fid and not c.unknown]
        failures = [c for c in mine if c.failed]
        if failures and not any(c.ok and c.position > failures[0].position for c in mine):
            out.append(fid)
    return out


def param_map(spec: ToolSpec) -> dict[str, str]:
    """canonical -> current parameter names of ``spec`` (identity where absent)."""
    raw = spec.metadata.get("param_map") or {}
    return {str(k): str(v) for k, v in dict(raw).items()}


def canonical_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Rename a call's arguments to canonical names. A canonical name that was renamed and is
    not also a current name is stale: dropped from the result and reported."""
    mapping = param_map(spec)
    inverse = {current: canonical for canonical, current in mapping.items()}
    renamed_away = {c for c, cur in mapping.items() if c != cur} - set(inverse)
    out: dict[str, Any] = {}
    stale: list[str] = []
    for key, value in arguments.items():
        if key in renamed_away:
            stale.append(key)
            continue
        out[inverse.get(key, key)] = value
    return out, tuple(stale)


def resolve_calls(trace: Trace, harness: Harness) -> list[ResolvedCall]:
    """Every tool call of the trace (skill loads excluded), in order, mapped to function ids."""
    out: list[ResolvedCall] = []
    for record in trace.tool_calls:
        spec = harness.tool(record.name)
        if spec is None:
            out.append(ResolvedCall(len(out), record, None, dict(record.arguments)))
            continue
        args, stale = canonical_arguments(spec, dict(record.arguments))
        out.append(ResolvedCall(len(out), record, spec.function_id, args, stale))
    return out


# -- grounding ---------------------------------------------------------------------------------------------
def _hook_config(harness: Harness, name: str) -> Mapping[str, Any]:
    return next((h.config for h in harness.hooks if h.name == name), {})


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def grounding(episode: Episode, trace: Trace, harness: Harness) -> Grounding:
    """Where this episode's reply may take numbers from (module docstring): ``data`` from the
    successful tool results, the gold facts and the hook's ``allowed_numbers``; ``typed`` from the
    system prompt and the host's earlier turns; ``plain`` from what the viewer wrote."""
    results = [_as_text(call.record.result) for call in resolve_calls(trace, harness) if call.ok]
    host = [trace.system_prompt] + [str(m.get("content", "")) for m in episode.history if m.get("role") != "user"]
    viewer = [*trace.comments, *episode.comments] + [
        str(m.get("content", "")) for m in episode.history if m.get("role") == "user"
    ]
    allowed = _hook_config(harness, "grounded_claims").get("allowed_numbers", [])
    return Grounding.of([*results, *episode.gold.facts], typed=host, plain=viewer, values=allowed)


def unsupported_numbers(episode: Episode, trace: Trace, harness: Harness, reply: str | None = None) -> list[str]:
    """Numbers in the reply that no grounding source supports, normalised, in order."""
    text = trace.reply if reply is None else reply
    return list(dict.fromkeys(n.value for n in grounding(episode, trace, harness).unsupported(text)))


def harness_forbidden_phrases(harness: Harness) -> list[str]:
    """The ``forbidden_phrases`` of the harness's ``grounded_claims`` hook (invented promises)."""
    return [str(p) for p in _hook_config(harness, "grounded_claims").get("forbidden_phrases", [])]


def request_is_empty(comments: Iterable[str]) -> bool:
    """True when no comment has a visible character (what the input guard refuses)."""
    return not any(re.sub(r"[\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]", "", c) for c in comments)
