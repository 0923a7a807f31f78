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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ParsedOutput", "ToolCall", "parse_output", "render_reply", "render_tool_call", "strip_reasoning"]

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_TOOL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|$)", re.S)
_REPLY = re.compile(r"<reply>(.*?)(?:</reply>|$)", re.S)
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParsedOutput:
    """``kind`` is ``tool_calls``, ``reply`` or ``invalid`` (then ``error`` is feedback for the model)."""

    kind: str
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
