"""The HTTP API's wire types (pydantic: the one boundary where HAT uses it, see STYLE.md).

Why the request model is *built* per app (:func:`reply_request_model`) instead of declared once:
the comment count and length limits are settings of ``create_app``, and the OpenAPI document
must state the limits the server actually enforces. So the limits go into the field constraints
(``maxLength``, ``maxItems``) of a model made for that app; FastAPI then rejects an over-long
comment with a 422 that names the field, and ``/openapi.json`` shows the same numbers.

Strings are checked for lone UTF-16 surrogates (``"\\ud800"`` is valid JSON but not encodable
as UTF-8, so it would crash the response encoder later); control characters are allowed in
comments because the harness's ``input_guard`` hook removes them and records that it did.
Room state is typed (:class:`RoomState`): the keys the prompts render, each bounded, unknown
keys refused - a free-form dict let a request put a string where a template does arithmetic and
turn every such request into a crash. An app for another domain passes its own room model to
:func:`reply_request_model`.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    field_validator,
    model_validator,
)

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
    "RoomState",
    "StreamInfo",
    "Timings",
    "ToolCallSummary",
    "reply_request_model",
]

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$"
ROOM_MAX_ITEMS = 64
ROOM_MAX_TEXT = 500


def _check_text(value: str, where: str) -> str:
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise ValueError(f"{where} contains a lone UTF-16 surrogate; send valid Unicode text")
    return value


def _room_text(value: str) -> str:
    """Room values go into the system prompt: valid Unicode, no control characters."""
    _check_text(value, "a room value")
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ValueError("a room value contains a control character; send plain text")
    return value


RoomText = Annotated[str, StringConstraints(max_length=ROOM_MAX_TEXT), AfterValidator(_room_text)]
HostName = Annotated[str, StringConstraints(min_length=1, max_length=64), AfterValidator(_room_text)]
ProductId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=ID_PATTERN)]


class RoomState(BaseModel):
    """The live room's state as a request may set it: the keys the livestream harness's prompts and
    the simulator's rooms use (``hat.env.catalog``), typed and bounded.

    Every field is optional; the keys a request sets override the deployment's default room one by
    one (``null`` clears a key). Unknown keys are *rejected* (422 naming the key), not ignored: a
    misspelt ``turns_lefts`` silently dropped would leave the model with the wrong room. The room
    id is the request's top-level ``room_id``. Numbers are strict (``"3"`` is not a turn count),
    so a prompt template doing arithmetic on them cannot fail on a string.
    """

    model_config = ConfigDict(extra="forbid")

    host: HostName | None = Field(default=None, description="The host's name.")
    on_display: ProductId | None = Field(default=None, description="Id of the product on screen.")
    order: list[ProductId] | None = Field(
        default=None, max_length=ROOM_MAX_ITEMS, description="Product ids in presentation order."
    )
    turns_left: int | None = Field(default=None, ge=0, le=10_000, strict=True, description="Host turns left.")
    time_left_s: int | None = Field(
        default=None, ge=0, le=7 * 24 * 3600, strict=True, description="Seconds left in the show."
    )
    campaign: RoomText | None = Field(default=None, description="The running campaign, e.g. a coupon and its terms.")
    host_script: list[RoomText] | None = Field(
        default=None, max_length=32, description="Lines the host says, in order (simulator rooms)."
    )


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


MAX_CONTEXT_KEYS = 32
MAX_CONTEXT_BYTES = 16_384


class ReplyRequestBase(BaseModel):
    """Fields whose limits do not depend on the app's settings; see :func:`reply_request_model`."""

    model_config = ConfigDict(extra="forbid")

    room_id: str = Field(
        min_length=1,
        max_length=128,
        pattern=ID_PATTERN,
        description="Id of the live room (or channel, conversation) the request belongs to; echoed in the reply.",
    )
    request_id: str | None = Field(
        default=None,
        max_length=64,
        pattern=ID_PATTERN,
        description="Optional client id for the request; becomes the trace id (one is generated otherwise).",
    )
    room: RoomState | None = Field(
        default=None,
        description="Room state (turns_left, time_left_s, on_display, campaign, ...); the keys given "
        "override the deployment's default room one by one. Unknown keys are refused.",
    )
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="Free-form request context for harnesses that are not the live room (e.g. "
        '{"customer_id": "C-100"}); the harness\'s context provider may replace keys it owns, and '
        "numbers from it never ground a reply unless the harness trusts that key. JSON object, at most "
        f"{MAX_CONTEXT_KEYS} keys and {MAX_CONTEXT_BYTES:,} bytes; `room` is given by the field above.",
    )

    @field_validator("context")
    @classmethod
    def _bounded_context(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) > MAX_CONTEXT_KEYS:
            raise ValueError(f"at most {MAX_CONTEXT_KEYS} context keys")
        if "room" in value:
            raise ValueError("give the room in the 'room' field, not in 'context'")
        size = len(json.dumps(value, ensure_ascii=False))
        if size > MAX_CONTEXT_BYTES:
            raise ValueError(f"the context is {size:,} bytes of JSON; at most {MAX_CONTEXT_BYTES:,}")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> ReplyRequestBase:
        comment, comments = getattr(self, "comment", None), getattr(self, "comments", None)
        if (comment is None) == (comments is None):
            raise ValueError("give exactly one of 'comment' (one viewer comment) or 'comments' (several)")
        for text in [comment] if comment is not None else list(comments or []):
            _check_text(str(text), "a comment")
        return self

    def room_overrides(self) -> dict[str, Any]:
        """The room keys this request set (explicit ``null`` included), as plain data."""
        room = getattr(self, "room", None)
        return room.model_dump(exclude_unset=True) if isinstance(room, BaseModel) else {}

    def texts(self) -> tuple[str, ...]:
        """The viewer comments, in order (one for ``comment``)."""
        comment, comments = getattr(self, "comment", None), getattr(self, "comments", None)
        return (comment,) if comment is not None else tuple(comments or ())


class RequestLimits(BaseModel):
    """The per-app limits that shape :func:`reply_request_model`."""

    max_comments: int = 16
    max_comment_chars: int = 2000
    max_history: int = 32


def reply_request_model(limits: RequestLimits, room_model: type[BaseModel] = RoomState) -> type[ReplyRequestBase]:
    """A ``ReplyRequest`` model whose comment and history limits are ``limits`` and whose ``room``
    is ``room_model`` (a pydantic model; make it ``extra="forbid"`` and bound its fields)."""
    comment_type = Annotated[str, StringConstraints(min_length=1, max_length=limits.max_comment_chars)]
    room_doc = ReplyRequestBase.model_fields["room"].description
    return create_model(
        "ReplyRequest",
        __base__=ReplyRequestBase,
        room=(room_model | None, Field(default=None, description=room_doc)),  # type: ignore[arg-type]
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
    path: str = Field(description="The harness folder relative to the server's harness root it lies in.")
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
    """One tool call. ``error`` is a generic message with the trace id when the call failed: the
    backend's own error (stack traces, MCP command lines, hosts) stays in the server's trace."""

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
    reply) | ``refused`` (an input hook refused the comment) | ``error`` (the model or the agent
    failed: the harness's fallback reply is sent, still with HTTP 200, and ``status_reason`` names
    the trace id under which the server logged the cause)."""

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
    cancelled: int = Field(0, description="Requests cancelled since start because their client left.")
    uptime_s: float


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        default=None,
        max_length=4096,
        description="Harness folder under one of the server's harness roots (absolute, or relative to a "
        "root); default: reload the current version's folder.",
    )

    @field_validator("path")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else _check_text(value, "path")


class ReloadResponse(BaseModel):
    changed: bool = Field(description="False when the folder hashes the same as the running version.")
    previous: HarnessInfo
    current: HarnessInfo
