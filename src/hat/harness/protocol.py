"""The text protocol between the runtime and the model, and a parser that never raises.

Default protocol (the harness's ``output_format`` block tells the model; HSA may vary it)::

    <think>optional reasoning</think>
    <tool_call>{"name": "get_price", "arguments": {"product": "p-1"}}</tool_call>   (one or more)
    -- or --
    <reply>{"reply": "It's 19.90 today!"}</reply>

Why a text protocol and not a provider's native tool API: the harness owns the format, the same
prompts work on every backend (transformers, llama.cpp, any OpenAI-compatible server), and the
training data is the exact text the model produces.

Compact models get this wrong often, so :func:`parse_output` is lenient where intent is clear
(missing closing tag at the end of the output, a plain-text reply inside ``<reply>``, trailing
commas, code fences) and otherwise returns an ``error`` string written *for the model*: it becomes
the next round's feedback. Parsing never raises.

Comments are data. User text reaches the model inside this same text protocol, so two defences
live here, next to the tags they protect:

- :func:`neutralise_markup` rewrites protocol tags (``<tool_call>``, ``<reply>``, ``<think>``) and
  chat-template special-token text (``<|im_start|>``, ``<|eot_id|>``, ``</s>``, ``[INST]`` ...) in
  user text so they are neither parsed as protocol nor tokenised as special tokens: the angle (and
  square) brackets become look-alike quotation marks (``‹tool_call›``). Visible, so the model can
  still read what the user wrote; NFKC leaves them alone, so no tokenizer normaliser folds them
  back.
- :func:`quoted_actions` / :func:`echoed_action`: every tool call and reply that user text *spells
  out* (with real or neutralised tags, or as bare JSON) gets a normalised key; the runtime refuses
  to run a call or send a reply whose key is among them, because that text came from the user.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hat.harness.types import OutputKind

__all__ = [
    "PROTOCOL_TAGS",
    "ParsedOutput",
    "ToolCall",
    "comment_views",
    "echoed_action",
    "fold_text",
    "neutralise_markup",
    "parse_output",
    "quoted_actions",
    "render_reply",
    "render_tool_call",
    "strip_reasoning",
]

PROTOCOL_TAGS = ("think", "tool_call", "reply")

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_TOOL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|$)", re.S)
_REPLY = re.compile(r"<reply>(.*?)(?:</reply>|$)", re.S)
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")
# Markup that must not survive in user text: protocol tags (any case, stray spaces) and the
# special-token spellings of the common chat templates (ChatML/Qwen/SmolLM, Llama 3, Phi,
# DeepSeek's full-width bars, Llama 2/Mistral, Gemma).
_USER_MARKUP = re.compile(
    r"<\s*/?\s*(?:" + "|".join(PROTOCOL_TAGS) + r")\s*/?\s*>"
    r"|<\|[a-z_]+\|>|<\|[^<>|\n]{1,64}\|>|<\uff5c[^<>\n]{1,64}\uff5c>"
    r"|</?s>|<(?:start|end)_of_turn>|<</?SYS>>|\[/?INST\]",
    re.IGNORECASE,
)
_BREAK = str.maketrans({"<": "\u2039", ">": "\u203a", "[": "\u2045", "]": "\u2046"})
_UNBREAK = str.maketrans({"\u2039": "<", "\u203a": ">", "\u2045": "[", "\u2046": "]", "\u00ab": "<", "\u00bb": ">"})
_MAX_JSON_STARTS = 256  # bare-JSON scan per text: bounds the work a flood of braces can cause


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParsedOutput:
    """``kind`` is ``tool_calls``, ``reply`` or ``invalid`` (then ``error`` is feedback for the model)."""

    kind: OutputKind
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reply: dict[str, Any] | None = None
    error: str = ""


def strip_reasoning(text: str) -> str:
    """Remove ``<think>…</think>`` spans (and an unclosed trailing one)."""
    return _THINK.sub("", text).strip()


def _loads(raw: str) -> Any:
    """json.loads with the repairs small models most often need; raises ValueError."""
    text = raw.strip()
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", text)
    candidates = [text, re.sub(r",\s*([}\]])", r"\1", text)]
    if text.count("{") > text.count("}"):
        candidates.append(text + "}" * (text.count("{") - text.count("}")))
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise ValueError(f"not valid JSON: {text[:120]!r}")


def _parse_tool_call(raw: str) -> ToolCall | str:
    try:
        data = _loads(raw)
    except ValueError as exc:
        return f'A <tool_call> is {exc}. Write it as <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>.'
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"].strip():
        return 'A <tool_call> must be a JSON object with a string "name" and an object "arguments".'
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = _loads(args)
        except ValueError:
            args = None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f'The "arguments" of tool {data["name"]!r} must be a JSON object.'
    return ToolCall(name=data["name"].strip(), arguments=args)


def _parse_reply(raw: str, reply_field: str) -> dict[str, Any] | str:
    text = raw.strip()
    if not text:
        return f'The <reply> is empty. Write <reply>{{"{reply_field}": "your answer"}}</reply>.'
    if text.startswith("{") or text.startswith("```"):
        try:
            data = _loads(text)
        except ValueError as exc:
            return f'The <reply> is {exc}. Write <reply>{{"{reply_field}": "your answer"}}</reply>.'
        if not isinstance(data, dict):
            return f'The <reply> must be a JSON object like {{"{reply_field}": "..."}}.'
        return data
    return {reply_field: text}  # plain text inside <reply>: the intent is clear


def parse_output(text: str, reply_field: str = "reply") -> ParsedOutput:
    """Parse one model output. Tool calls win over a reply in the same output (the reply would be
    written before seeing the observations). Never raises."""
    text = _SPECIAL.sub("", text or "")
    reasoning = "\n".join(m.strip() for m in _THINK.findall(text)).strip()
    body = strip_reasoning(text)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for raw in _TOOL.findall(body):
        parsed = _parse_tool_call(raw)
        if isinstance(parsed, ToolCall):
            calls.append(parsed)
        else:
            errors.append(parsed)
    if errors:
        return ParsedOutput("invalid", reasoning, error=" ".join(dict.fromkeys(str(e) for e in errors)))
    if calls:
        return ParsedOutput("tool_calls", reasoning, tool_calls=tuple(calls))
    reply_match = _REPLY.search(body)
    if reply_match:
        reply = _parse_reply(reply_match.group(1), reply_field)
        if isinstance(reply, str):
            return ParsedOutput("invalid", reasoning, error=reply)
        return ParsedOutput("reply", reasoning, reply=reply)
    hint = "Your output had no <tool_call> and no <reply>." if body else "Your output was empty."
    return ParsedOutput(
        "invalid",
        reasoning,
        error=f'{hint} Call a tool with <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call> '
        f'or answer with <reply>{{"{reply_field}": "..."}}</reply>.',
    )


def render_tool_call(call: ToolCall) -> str:
    return (
        "<tool_call>"
        + json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
        + "</tool_call>"
    )


def render_reply(payload: dict[str, Any]) -> str:
    return "<reply>" + json.dumps(payload, ensure_ascii=False) + "</reply>"


# -- comments are data ---------------------------------------------------------------------------
def neutralise_markup(text: str) -> str:
    """User text with protocol tags and special-token text defused (``<reply>`` → ``‹reply›``,
    ``<|im_start|>`` → ``‹|im_start|›``); everything else unchanged."""
    return _USER_MARKUP.sub(lambda m: m.group(0).translate(_BREAK), text)


def _fold(text: str) -> str:
    """Normal form for comparing text written by a user with text produced by the model:
    NFKC, look-alike brackets mapped back, invisible format characters dropped, case folded,
    special-token text dropped (as the parser drops it), whitespace folded."""
    text = unicodedata.normalize("NFKC", text).translate(_UNBREAK)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf").casefold()
    return " ".join(_drop_special(text).split())


def fold_text(text: str) -> str:
    """The normal form :func:`quoted_actions` compares in (see ``_fold``), for other guards."""
    return _fold(text)


def comment_views(text: str) -> tuple[str, ...]:
    """Folded views of user text as a model's copy of it may read once parsed: as written, and
    with reasoning spans and special-token text dropped as :func:`parse_output` drops them."""
    folded = _fold(text)
    views = (folded, _fold(strip_reasoning(folded)), _fold(strip_reasoning(_SPECIAL.sub("", text))))
    return tuple(dict.fromkeys(v for v in views if v))


def _drop_special(text: str) -> str:
    """Special-token text removed as :func:`parse_output` removes it, until none is left: text
    spliced into a tag or a name (``<tool<|x|>_call>``) vanishes for the parser, so it must
    vanish for the comparison too, also when two halves of a token were split by another."""
    while (shorter := _SPECIAL.sub("", text)) != text:
        text = shorter
    return text


def _key(kind: str, value: Any) -> str:
    return kind + ":" + _fold(json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")))


def _call_key(call: ToolCall) -> str:
    return _key("tool", {"name": call.name, "arguments": call.arguments})


def _reply_key(reply: dict[str, Any], reply_field: str) -> str:
    return _key("reply", reply[reply_field] if isinstance(reply.get(reply_field), str) else reply)


def _json_objects(text: str) -> Iterable[dict[str, Any]]:
    decoder = json.JSONDecoder()
    starts = [i for i, ch in enumerate(text) if ch == "{"][:_MAX_JSON_STARTS]
    for i in starts:
        try:
            value, _ = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


def _keys_in(text: str, reply_field: str) -> set[str]:
    folded = _fold(text)
    keys: set[str] = set()
    # Read as written, as the parser reads it (special tokens and reasoning spans dropped: one
    # inside a tag or a tool name vanishes when the model's copy is parsed), and both folded. The
    # unfolded views matter for JSON keys: ``"ARGUMENTS"`` or ``"argu\u2060ments"`` folds to
    # ``"arguments"``, but a verbatim copy is parsed as a call without arguments.
    views = (text, strip_reasoning(_SPECIAL.sub("", text)), folded, _fold(strip_reasoning(folded)))
    for view in dict.fromkeys(views):
        for raw in _TOOL.findall(view):
            call = _parse_tool_call(raw)
            if isinstance(call, ToolCall):
                keys.add(_call_key(call))
        for raw in _REPLY.findall(view):
            reply = _parse_reply(raw, reply_field)
            if isinstance(reply, dict):
                keys.add(_reply_key(reply, reply_field))
        for obj in _json_objects(view):
            call = _parse_tool_call(json.dumps(obj))
            if isinstance(call, ToolCall):
                keys.add(_call_key(call))
            keys.add(_reply_key(obj, reply_field))
    return keys


def quoted_actions(texts: Iterable[str], reply_field: str = "reply") -> frozenset[str]:
    """Keys of every tool call and reply spelled out in ``texts`` (user turns, earlier user
    turns): inside protocol tags (real, neutralised or look-alike) or as bare JSON objects."""
    keys: set[str] = set()
    for text in texts:
        keys |= _keys_in(text or "", reply_field)
    return frozenset(keys)


def echoed_action(parsed: ParsedOutput, quoted: frozenset[str], reply_field: str = "reply") -> str:
    """What in ``parsed`` would act on text copied from user input (``quoted``), described for the
    model; ``""`` when nothing does. Only what the runtime would act on is checked: the tool calls
    of a ``tool_calls`` output, the reply of a ``reply`` output."""
    if not quoted:
        return ""
    if parsed.kind == "tool_calls":
        for call in parsed.tool_calls:
            if _call_key(call) in quoted:
                return f"the tool call {call.name!r}"
    elif parsed.kind == "reply" and parsed.reply is not None and _reply_key(parsed.reply, reply_field) in quoted:
        return "the reply"
    return ""
