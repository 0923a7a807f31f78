"""Foreign tool schemas → a HAT harness, and the first tool call(s) a model makes under it.

External tool-use benchmarks (BFCL, RoTBench) ship their own tool lists and their own prompt
formats. We evaluate *our* model under *our* runtime, so each sample's tools become an in-memory
:class:`~hat.harness.state.Harness`: the foreign names, descriptions and JSON-Schema parameters
as :class:`~hat.harness.state.ToolSpec` s, three prompt blocks (role, tool signatures, an output
format that explains the ``<tool_call>`` protocol), no hooks, and ``max_rounds=1``: a benchmark
asks for the *first* call(s), so nothing the model does after its first output matters.

Choices worth knowing:

- Schemas are normalised to JSON Schema (BFCL writes ``"dict"``, ``"float"``, ``"tuple"``, ...;
  see :data:`TYPE_MAP`). A type we cannot map is dropped rather than guessed, because the tool
  registry validates arguments with ``jsonschema`` and an unknown type name would raise there.
  Scoring always uses the *original* schemas; only the model's view is normalised.
- Every tool is bound to :func:`record_call`, which only answers ``{"ok": true}``: with one round
  the observation is never shown to the model, the binding just keeps the registry honest.
- ``rename`` lets a later HSA step show the tools under other names. The mapping original → new
  is kept in ``harness.settings["tool_renames"]`` so :func:`first_turn` maps the model's calls
  back and scorers compare against the benchmark's own labels. A name the model invents (not in
  the mapping) is returned unchanged, so a wrong call stays wrong.
- :func:`first_turn` accepts a bare model or an :class:`~hat.harness.runtime.Agent`. With a model
  it runs the runtime's first round itself (render the pipeline, one generation, the protocol
  parser) and keeps the benchmark's user turn verbatim; an agent runs the full runtime, whose
  user turn is framed the runtime's way (``Viewer comment: ...``), which is what a model trained
  on our harness has seen. Foreign system messages (a few BFCL live items) are appended to our
  system prompt on the model path and kept as history on the agent path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hat.errors import HatError
from hat.harness.pipeline import render_prompt, template_context
from hat.harness.protocol import ParsedOutput, ToolCall, parse_output
from hat.harness.runtime import Agent, Request
from hat.harness.state import Harness, Limits, PromptBlock, ToolSpec
from hat.models.base import GenerationConfig, Message, Model

__all__ = [
    "RECORDER_BINDING",
    "TYPE_MAP",
    "FirstTurn",
    "first_tool_calls",
    "first_turn",
    "harness_from_tools",
    "normalise_schema",
    "original_name",
    "record_call",
]

RECORDER_BINDING = "python:hat.eval.external.foreign:record_call"
RENAMES_KEY = "tool_renames"

TYPE_MAP: dict[str, str] = {
    "string": "string",
    "str": "string",
    "char": "string",
    "integer": "integer",
    "int": "integer",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "bigint": "integer",
    "number": "number",
    "float": "number",
    "double": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "arraylist": "array",
    "queue": "array",
    "stack": "array",
    "object": "object",
    "dict": "object",
    "hashmap": "object",
    "hashtable": "object",
    "null": "null",
}
"""Foreign type names (lower-cased) → JSON Schema types. ``any`` is absent on purpose: no ``type``
means any value, which is what it says (BFCL's own FC converter maps it to ``string``)."""

ROLE_TEMPLATE = (
    "You are an assistant that fulfils the user's request by calling tools. Use only the tools "
    "listed below, with their exact names and argument names."
)
TOOLS_TEMPLATE = (
    "Tools (name, description and JSON Schema of the arguments):\n"
    "{% for t in tool_signatures_json %}{{ t }}\n{% endfor %}"
)
FORMAT_TEMPLATE = (
    "Output: optional <think>short reasoning</think>, then EITHER one or more "
    '<tool_call>{"name": "<tool name>", "arguments": {"<argument>": <value>}}</tool_call> '
    "(one per call; several when the request needs several calls), OR, when no tool fits the "
    'request, one <reply>{"{{ reply_field }}": "..."}</reply>. Nothing else.'
)


def record_call(**arguments: Any) -> dict[str, Any]:
    """The binding of every foreign tool: accepts any arguments and reports success."""
    return {"ok": True}


# -- schemas ---------------------------------------------------------------------------------------
def _json_type(value: Any) -> Any:
    if isinstance(value, str):
        return TYPE_MAP.get(value.lower())
    if isinstance(value, list):
        mapped = [m for v in value if (m := _json_type(v)) is not None]
        return mapped or None
    return None


def normalise_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a foreign parameter schema in JSON Schema's dialect, recursively (``properties``,
    ``items``, ``additionalProperties``). Unknown types are dropped; other keys are kept."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            mapped = _json_type(value)
            if mapped is not None:
                out["type"] = mapped
        elif key == "properties" and isinstance(value, Mapping):
            out[key] = {k: normalise_schema(v) if isinstance(v, Mapping) else v for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = normalise_schema(value)
        elif key == "required" and not isinstance(value, list):
            continue  # a malformed "required" would make the validator itself fail
        else:
            out[key] = value
    return out


def _unwrap(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """Accept OpenAI's ``{"type": "function", "function": {...}}`` as well as the bare form."""
    inner = schema.get("function")
    return inner if isinstance(inner, Mapping) else schema


def _tool_spec(schema: Mapping[str, Any], name: str) -> ToolSpec:
    params = schema.get("parameters")
    params = normalise_schema(params) if isinstance(params, Mapping) else {}
    params["type"] = "object"
    params.setdefault("properties", {})
    return ToolSpec(
        name=name,
        description=str(schema.get("description", "")),
        parameters=params,
        binding=RECORDER_BINDING,
        metadata={"function_id": str(schema["name"])},
    )


def _renames(names: Sequence[str], rename: Callable[[str], str] | None) -> dict[str, str]:
    mapping = {n: (rename(n) if rename else n) for n in names}
    seen: dict[str, str] = {}
    for original, new in mapping.items():
        if new in seen and seen[new] != original:
            raise ValueError(f"rename maps both {seen[new]!r} and {original!r} to {new!r}; names must stay distinct")
        seen[new] = original
    return mapping


# -- harness ---------------------------------------------------------------------------------------
def harness_from_tools(
    tool_schemas: Sequence[Mapping[str, Any]],
    *,
    name: str,
    rename: Callable[[str], str] | None = None,
    role: str | None = None,
    max_new_tokens: int = 256,
) -> tuple[Harness, dict[str, str]]:
    """Build a one-round harness whose tools are ``tool_schemas`` (``name``, ``description``,
    ``parameters``; BFCL, RoTBench or OpenAI form). Returns the harness and the mapping
    original tool name → name shown to the model (identity without ``rename``).

    ``role`` replaces the role block's text; ``max_new_tokens`` bounds the one generation.
    Duplicate names in the source are kept as the source lists them.
    """
    schemas = [_unwrap(s) for s in tool_schemas]
    for s in schemas:
        if not isinstance(s.get("name"), str) or not s["name"]:
            raise ValueError(f"every tool schema needs a non-empty string 'name'; got {dict(s)!r:.200}")
    mapping = _renames([str(s["name"]) for s in schemas], rename)
    tools = tuple(_tool_spec(s, mapping[str(s["name"])]) for s in schemas)
    blocks = (
        PromptBlock("role", role if role is not None else ROLE_TEMPLATE),
        PromptBlock("tool_signatures", TOOLS_TEMPLATE),
        PromptBlock("output_format", FORMAT_TEMPLATE),
    )
    harness = Harness(
        name=name,
        version="1",
        description="in-memory harness built from foreign tool schemas",
        tools=tools,
        blocks=blocks,
        pipeline=tuple(b.id for b in blocks),
        limits=Limits(max_rounds=1, max_retries=0, max_new_tokens=max_new_tokens),
        settings={RENAMES_KEY: dict(mapping)},
    )
    return harness, mapping


def original_name(harness: Harness, name: str) -> str:
    """The benchmark's name for a tool the model called as ``name`` (unchanged when unknown)."""
    renames = harness.settings.get(RENAMES_KEY, {})
    back = {new: original for original, new in renames.items()}
    return back.get(name, name)


# -- the first turn --------------------------------------------------------------------------------
@dataclass(frozen=True)
class FirstTurn:
    """What the model did first. ``calls`` carry the benchmark's original tool names.

    ``kind``: ``tool_calls`` | ``reply`` | ``invalid`` (unparseable output) | ``error`` (the
    backend failed; ``error`` says why). ``raw_output`` is the model's text as generated.
    """

    calls: tuple[ToolCall, ...]
    raw_output: str
    kind: str
    error: str = ""

    def calls_as_dicts(self) -> list[dict[str, Any]]:
        return [{"name": c.name, "arguments": c.arguments} for c in self.calls]


def _as_messages(messages: Sequence[Message | str]) -> list[Message]:
    out = [{"role": "user", "content": m} if isinstance(m, str) else dict(m) for m in messages]
    if not out or out[-1].get("role") != "user":
        raise ValueError("messages must end with a user turn")
    return out


def _map_back(harness: Harness, calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(original_name(harness, c.name), dict(c.arguments)) for c in calls)


def _model_turn(model: Model, harness: Harness, messages: list[Message]) -> FirstTurn:
    prompt = render_prompt(harness, template_context(harness)).text
    foreign_system = [m["content"] for m in messages if m.get("role") == "system"]
    chat = [{"role": "system", "content": "\n\n".join([prompt, *foreign_system])}]
    chat += [m for m in messages if m.get("role") != "system"]
    config = GenerationConfig(max_new_tokens=harness.limits.max_new_tokens, stop=("</reply>",))
    try:
        text = model.generate(chat, config, cache_key=harness.content_hash()).text
    except HatError as exc:
        return FirstTurn((), "", "error", f"model failed: {exc}")
    parsed: ParsedOutput = parse_output(text, harness.output.reply_field)
    return FirstTurn(_map_back(harness, parsed.tool_calls), text, parsed.kind, parsed.error)


def _agent_turn(agent: Agent, messages: list[Message]) -> FirstTurn:
    *history, last = messages
    response = agent.respond(Request.of(last["content"], history=tuple(history)))
    trace = response.trace
    if not trace.rounds:
        return FirstTurn((), "", "error", trace.context.get("status_reason", trace.status))
    rnd = trace.rounds[0]
    calls = [ToolCall(c.name, dict(c.arguments)) for c in rnd.tool_calls]
    kind = "error" if rnd.action == "error" else rnd.action
    return FirstTurn(_map_back(agent.harness, calls), rnd.raw_output, kind, rnd.feedback)


def first_turn(runner: Agent | Model, harness: Harness | None, messages: Sequence[Message | str]) -> FirstTurn:
    """Run one request and return the model's first output, parsed, names mapped back.

    ``runner`` is a model (then ``harness`` is required) or an :class:`Agent` (its own harness is
    used; ``harness`` may be None). ``messages``: chat messages or plain strings (user turns),
    ending with a user turn.
    """
    chat = _as_messages(messages)
    if isinstance(runner, Agent):
        return _agent_turn(runner, chat)
    if harness is None:
        raise ValueError("first_turn needs the harness when it is given a model rather than an Agent")
    return _model_turn(runner, harness, chat)


def first_tool_calls(
    runner: Agent | Model, harness: Harness | None, messages: Sequence[Message | str]
) -> list[ToolCall]:
    """The tool calls of the model's first output (empty for a reply or unparseable output)."""
    return list(first_turn(runner, harness, messages).calls)
