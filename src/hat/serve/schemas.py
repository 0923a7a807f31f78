"""The HTTP API's wire types (pydantic: the one boundary where HAT uses it, see STYLE.md).

Why the request model is *built* per app (:func:`reply_request_model`) instead of declared once:
the comment count and length limits are settings of ``create_app``, and the OpenAPI document
must state the limits the server actually enforces. So the limits go into the field constraints
(``maxLength``, ``maxItems``) of a model made for that app; FastAPI then rejects an over-long
comment with a 422 that names the field, and ``/openapi.json`` shows the same numbers.

Strings are checked for lone UTF-16 surrogates (``"\\ud800"`` is valid JSON but not encodable
as UTF-8, so it would crash the response encoder later); control characters are allowed in
comments because the harness's ``input_guard`` hook removes them and records that it did.
Room state is free-form but bounded (keys, depth, string length) so it cannot blow up the
prompt or the recursion limit.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model, field_validator, model_validator

__all__ = [
    "ErrorBody",
    "ErrorResponse",
    "HarnessInfo",
    "HarnessRef",
    "HealthResponse",
    "HistoryMessage",
    "ReloadRequest",
    "ReloadResponse",
    "ReplyRequestBase",
    "ReplyResponse",
    "RequestLimits",
    "StreamInfo",
    "Timings",
    "ToolCallSummary",
    "reply_request_model",
]

ROOM_MAX_KEYS = 64
ROOM_MAX_DEPTH = 4
ROOM_MAX_STRING = 2000
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$"


def _check_text(value: str, where: str) -> str:
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise ValueError(f"{where} contains a lone UTF-16 surrogate; send valid Unicode text")
    return value


def _check_room_value(value: Any, depth: int, where: str) -> None:
    if depth > ROOM_MAX_DEPTH:
        raise ValueError(f"room state is nested deeper than {ROOM_MAX_DEPTH} levels at {where}")
    if isinstance(value, str):
        _check_text(value, where)
        if len(value) > ROOM_MAX_STRING:
            raise ValueError(f"room value {where} is longer than {ROOM_MAX_STRING} characters")
    elif isinstance(value, dict):
        if len(value) > ROOM_MAX_KEYS:
            raise ValueError(f"room object {where} has more than {ROOM_MAX_KEYS} keys")
        for key, item in value.items():
            _check_text(str(key), f"{where} key")
            _check_room_value(item, depth + 1, f"{where}.{key}")
    elif isinstance(value, list):
        if len(value) > ROOM_MAX_KEYS:
            raise ValueError(f"room list {where} has more than {ROOM_MAX_KEYS} items")
        for i, item in enumerate(value):
            _check_room_value(item, depth + 1, f"{where}[{i}]")


class HistoryMessage(BaseModel):
    """One earlier turn of the host dialogue. No ``system`` role: clients cannot replace the
    harness's system prompt."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str = Field(max_length=8000)

    @field_validator("content")
    @classmethod
    def _text(cls, value: str) -> str:
        return _check_text(value, "history content")


class ReplyRequestBase(BaseModel):
    """Fields whose limits do not depend on the app's settings; see :func:`reply_request_model`."""

    model_config = ConfigDict(extra="forbid")

    room_id: str = Field(min_length=1, max_length=128, pattern=ID_PATTERN, description="Live room id.")
    request_id: str | None = Field(
        default=None,
        max_length=64,
        pattern=ID_PATTERN,
        description="Optional client id for the request; becomes the trace id (one is generated otherwise).",
    )
    room: dict[str, Any] | None = Field(
        default=None,
        description="Room state (turns_left, time_left_s, on_display, campaign, ...); overrides the "
        "deployment's default room key by key.",
    )

    @field_validator("room")
    @classmethod
    def _room(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _check_room_value(value, 1, "room")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> ReplyRequestBase:
        comment, comments = getattr(self, "comment", None), getattr(self, "comments", None)
        if (comment is None) == (comments is None):
            raise ValueError("give exactly one of 'comment' (one viewer comment) or 'comments' (several)")
        for text in [comment] if comment is not None else list(comments or []):
            _check_text(str(text), "a comment")
        return self

    def texts(self) -> tuple[str, ...]:
        """The viewer comments, in order (one for ``comment``)."""
        comment, comments = getattr(self, "comment", None), getattr(self, "comments", None)
        return (comment,) if comment is not None else tuple(comments or ())


class RequestLimits(BaseModel):
    """The per-app limits that shape :func:`reply_request_model`."""

    max_comments: int = 16
    max_comment_chars: int = 2000
    max_history: int = 32


def reply_request_model(limits: RequestLimits) -> type[ReplyRequestBase]:
    """A ``ReplyRequest`` model whose comment and history limits are ``limits``."""
    comment_type = Annotated[str, StringConstraints(min_length=1, max_length=limits.max_comment_chars)]
    return create_model(
        "ReplyRequest",
        __base__=ReplyRequestBase,
        comment=(comment_type | None, Field(default=None, description="One viewer comment.")),
        comments=(
            list[comment_type] | None,  # type: ignore[valid-type]
            Field(default=None, min_length=1, max_length=limits.max_comments, description="Several comments."),
        ),
        history=(
            list[HistoryMessage],
            Field(default_factory=list, max_length=limits.max_history, description="Earlier dialogue turns."),
        ),
    )


# -- responses -------------------------------------------------------------------------------------
class HarnessRef(BaseModel):
    """Which harness version answered: ``generation`` counts loads in this process (1 = startup)."""

    name: str
    version: str
    hash: str
    generation: int


class HarnessInfo(HarnessRef):
    path: str
    loaded_at: float = Field(description="Unix time (seconds) the version was loaded.")
    loaded_at_iso: str
    in_flight: int = Field(description="Requests now running on this version.")


class Timings(BaseModel):
    """Milliseconds. ``total_ms``: handler entry to reply (queue included); ``queue_ms``: waiting
    for a worker slot; ``agent_ms``: the agent's own wall time; ``model_ms``: model calls within it;
    ``ttft_ms`` (stream only): handler entry to the first delta of the reply that stood."""

    total_ms: float
    queue_ms: float
    agent_ms: float
    model_ms: float
    ttft_ms: float | None = None


class ToolCallSummary(BaseModel):
    name: str
    status: str
    error: str = ""
    latency_ms: float = 0.0


class StreamInfo(BaseModel):
    """How the streamed deltas relate to the reply. ``source``: ``model`` when the reply's text was
    streamed as the model generated it, ``final`` when it was sent after the agent finished
    (fallback reply, a hook rewrote it, or the model streamed nothing usable)."""

    source: Literal["model", "final"]
    deltas: int
    retracted_rounds: list[int]
    reply_tokens: int = Field(description="Tokens of the reply text (see reply_tokens_method).")
    reply_tokens_method: Literal["tokenizer", "words"]


class ReplyResponse(BaseModel):
    """The reply and how it came about. ``status``: ``ok`` | ``fallback`` (the harness's fallback
    reply) | ``refused`` (an input hook refused the comment) | ``error`` (the model failed)."""

    reply: str
    payload: dict[str, Any]
    status: str
    status_reason: str = ""
    room_id: str
    trace_id: str
    harness: HarnessRef
    model: str
    rounds: int
    actions: list[str]
    tool_calls: list[ToolCallSummary]
    skills_loaded: list[str]
    hook_blocks: int = Field(description="Hook verdicts other than allow/rewrite (block or retry).")
    prompt_tokens: int
    completion_tokens: int
    timings: Timings
    stream: StreamInfo | None = None


class ErrorBody(BaseModel):
    code: str = Field(description="Machine-readable: invalid_json, invalid_request, too_large, overloaded, ...")
    message: str
    details: list[dict[str, Any]] = Field(default_factory=list)


class ErrorResponse(BaseModel):
    error: ErrorBody


class HealthResponse(BaseModel):
    status: Literal["ok"]
    model: str
    harness: HarnessInfo
    running: int
    queued: int
    max_concurrency: int
    max_queue: int
    uptime_s: float


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        default=None,
        max_length=4096,
        description="Harness folder or built-in name; default: reload the current version's folder.",
    )

    @field_validator("path")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else _check_text(value, "path")


class ReloadResponse(BaseModel):
    changed: bool = Field(description="False when the folder hashes the same as the running version.")
    previous: HarnessInfo
    current: HarnessInfo
