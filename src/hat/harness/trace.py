"""What one request did, step by step: :class:`Trace` made of :class:`Round` s.

Traces are the common currency of HAT: evaluation judges read them, training turns them into
chat rows and RL rollouts, serving returns their id, evolution clusters their failures. So they
are plain frozen data that round-trips through JSON (``to_dict`` / ``from_dict``) and converts to
chat messages (``to_messages``) in the Hugging Face format.

Units: every ``*_ms`` field is wall-clock milliseconds; token counts are the backend tokenizer's.

Trace files are JSONL that a crash (``kill -9``, a full disk) may leave with a torn last line. So
writers start every record on a fresh line (:func:`append_jsonl`) and readers skip a torn line and
report it (:func:`read_jsonl`, :class:`TornLineWarning`) rather than failing on the whole file.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from hat.harness.types import CallKind, CallStatus, Outcome, RoundAction, TraceStatus

__all__ = [
    "HookEvent",
    "JsonLines",
    "Round",
    "ToolCallRecord",
    "TornLineWarning",
    "Trace",
    "append_jsonl",
    "read_jsonl",
    "read_traces",
    "write_traces",
]


@dataclass(frozen=True)
class HookEvent:
    """One hook verdict. ``verdict`` is ``allow`` | ``block`` | ``rewrite`` | ``retry``."""

    point: str
    hook: str
    verdict: str
    reason: str = ""


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool (or skill-loading) call as dispatched, after hooks.

    ``status``: ``ok`` | ``error`` | ``timeout`` | ``blocked`` | ``unknown_tool`` | ``invalid_args``.
    ``result`` is what the model saw as the observation. ``attempts`` counts retries + 1.
    ``outcome`` (timeouts only): ``unknown`` - abandoned while running, it may still take effect;
    ``not_started`` - cancelled before it ran.
    """

    name: str
    arguments: dict[str, Any]
    result: Any = None
    status: CallStatus = "ok"
    error: str = ""
    latency_ms: float = 0.0
    attempts: int = 1
    kind: CallKind = "tool"
    outcome: Outcome = ""


@dataclass(frozen=True)
class Round:
    """One model call and what followed it.

    ``action``: :data:`~hat.harness.types.RoundAction` - ``tool_calls`` | ``reply`` | ``invalid``
    (unparseable output; ``feedback`` says why) | ``rejected`` (a stop-check hook or the comment
    guard refused it) | ``error`` (the backend failed).
    ``model_ms`` is the generation time; ``total_ms`` the whole round (hooks and tools included).
    """

    index: int
    raw_output: str
    action: RoundAction
    reasoning: str = ""
    tool_calls: tuple[ToolCallRecord, ...] = ()
    reply: dict[str, Any] | None = None
    feedback: str = ""
    hook_events: tuple[HookEvent, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    model_ms: float = 0.0
    total_ms: float = 0.0


@dataclass(frozen=True)
class Trace:
    """Everything one request did. ``status``: :data:`~hat.harness.types.TraceStatus`."""

    request_id: str
    harness_name: str
    harness_hash: str
    model: str
    comments: tuple[str, ...]
    system_prompt: str
    block_hashes: dict[str, str]
    tools_visible: tuple[str, ...]
    skills_available: tuple[str, ...]
    rounds: tuple[Round, ...] = ()
    skills_loaded: tuple[str, ...] = ()
    reply: str = ""
    reply_payload: dict[str, Any] = field(default_factory=dict)
    status: TraceStatus = "ok"
    hook_events: tuple[HookEvent, ...] = ()
    context: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        return [c for r in self.rounds for c in r.tool_calls if c.kind == "tool"]

    @property
    def model_ms(self) -> float:
        return sum(r.model_ms for r in self.rounds)

    @property
    def overhead_ms(self) -> float:
        """Everything that was not model time: prompt assembly, parsing, hooks, tools, bookkeeping."""
        return max(0.0, self.latency_ms - self.model_ms)

    # -- conversions ----------------------------------------------------------------------------
    def to_messages(self, include_system: bool = True) -> list[dict[str, str]]:
        """Chat messages in HF format: system, user, then per round the raw assistant output and
        the observations/feedback that followed it as ``tool`` / ``user`` messages."""
        messages: list[dict[str, str]] = []
        if include_system:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": self.context.get("user_message", "\n".join(self.comments))})
        for rnd in self.rounds:
            messages.append({"role": "assistant", "content": rnd.raw_output})
            messages.extend(round_observations(rnd))
        return messages

    def to_dict(self) -> dict[str, Any]:
        """Plain data (dicts, lists/tuples, JSON scalars). A value that is none of these — a tool
        result holding a lock, a client, a numpy scalar — becomes its ``repr`` instead of making
        the whole trace unserialisable (``dataclasses.asdict`` would deep-copy and raise)."""
        return _plain(self)  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        rounds = tuple(
            Round(
                **{
                    **r,
                    "tool_calls": tuple(ToolCallRecord(**c) for c in r.get("tool_calls", ())),
                    "hook_events": tuple(HookEvent(**e) for e in r.get("hook_events", ())),
                }
            )
            for r in data.get("rounds", ())
        )
        fields = {
            **data,
            "rounds": rounds,
            "comments": tuple(data.get("comments", ())),
            "tools_visible": tuple(data.get("tools_visible", ())),
            "skills_available": tuple(data.get("skills_available", ())),
            "skills_loaded": tuple(data.get("skills_loaded", ())),
            "hook_events": tuple(HookEvent(**e) for e in data.get("hook_events", ())),
        }
        return cls(**fields)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, default=str)


def round_observations(rnd: Round) -> list[dict[str, str]]:
    """The messages that follow one assistant turn: tool observations, then any feedback."""
    out = [
        {
            "role": "tool",
            "content": "<tool_response>"
            + json.dumps({"name": c.name, "status": c.status, "result": c.result}, ensure_ascii=False, default=str)
            + "</tool_response>",
        }
        for c in rnd.tool_calls
    ]
    if rnd.feedback:
        out.append({"role": "user", "content": rnd.feedback})
    return out


@dataclass(frozen=True)
class JsonLines:
    """The records of a JSONL file and the lines that were not JSON (1-based line numbers): a line
    torn by a crash mid-write, kept out of ``rows`` instead of failing the whole file. A record
    that a torn fragment glued itself to (a writer that did not start on a fresh line) is salvaged."""

    rows: list[dict[str, Any]]
    torn: tuple[int, ...] = ()
    salvaged: int = 0


def read_jsonl(path: str | Path) -> JsonLines:
    """Every JSON object of a JSONL file; torn lines skipped and reported in ``torn``."""
    rows: list[dict[str, Any]] = []
    torn: list[int] = []
    salvaged = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                torn.append(number)
                row = _salvage(line)
                salvaged += row is not None
            if isinstance(row, dict):
                rows.append(row)
            elif row is not None:
                torn.append(number)
    return JsonLines(rows, tuple(torn), salvaged)


def _salvage(line: str) -> Any:
    """The whole record at the end of a line that starts with a torn fragment, or None."""
    text = line.rstrip()
    decoder = json.JSONDecoder()
    start = text.find("{", 1)
    while start > 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value, end = None, -1
        if end == len(text) and isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def append_jsonl(path: str | Path, lines: Iterable[str], *, fsync: bool = False) -> int:
    """Append one line per item (without its newline), starting on a fresh line: if the file does not
    end in a newline (a crash mid-write), one is written first, so a torn line never glues onto the
    next record. Each line is one ``write``; ``fsync`` makes the lines durable before returning."""
    n = 0
    with open(path, "a+b") as fh:
        if fh.seek(0, os.SEEK_END) > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        for line in lines:
            fh.write(line.encode("utf-8") + b"\n")
            n += 1
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())
    return n


def write_traces(path: str | Path, traces: Iterable[Trace], append: bool = True) -> int:
    """Append traces as JSONL (one trace per line, on a fresh line). Returns how many were written."""
    if not append:
        Path(path).write_text("", encoding="utf-8")
    return append_jsonl(path, (t.to_json() for t in traces))


def read_traces(path: str | Path) -> list[Trace]:
    """The traces of a JSONL file. A torn line (a crash mid-write) is skipped with a
    :class:`TornLineWarning` saying how many and where, instead of failing the whole file."""
    read = read_jsonl(path)
    if read.torn:
        warnings.warn(
            f"{path}: skipped {len(read.torn)} torn line(s) (line {', '.join(map(str, read.torn[:10]))})"
            + (f"; salvaged {read.salvaged} record(s) glued onto them" if read.salvaged else ""),
            TornLineWarning,
            stacklevel=2,
        )
    return [Trace.from_dict(row) for row in read.rows]


class TornLineWarning(UserWarning):
    """A JSONL reader skipped lines that are not JSON (a crash cut them short)."""


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, (list, set, frozenset)):
        return [_plain(v) for v in value]
    return repr(value)
