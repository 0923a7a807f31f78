"""Streaming the reply to a TTS consumer while the synchronous agent runs.

The runtime is synchronous and does not know which round will be the last: a round that starts
``<reply>`` may still be rejected by a stop-check hook, rewritten, or lose to a tool call in the
same output. So the server streams *speculatively* and says when it was wrong:

- :class:`ServingModel` wraps the app's model once and is what every served agent calls. For a
  streaming request it calls the backend's ``stream`` instead of ``generate`` and feeds the text
  to :func:`partial_reply`, which extracts the part of the reply field that is already certain
  (inside ``<reply>…``, outside ``<think>``, the JSON string decoded so far, surrounding
  whitespace held back). Each new piece is a ``delta`` event tagged with its round.
- When the agent starts another round, the previous round was not the final one: if it streamed
  anything, a ``retract`` event voids its deltas.
- When the agent finishes, the text that stands is compared with the reply actually sent
  (:meth:`RequestChannel.final_events`). If they differ (a hook rewrote the reply, the fallback
  reply was sent), the standing round is retracted and the final reply is sent as deltas with
  ``"round": null``.

Invariant a consumer can rely on: **the concatenated text of the deltas whose round was not
retracted equals the ``reply`` of the ``done`` event.** A TTS consumer that must never speak a
wrong word buffers a round until its ``round`` event's successor or ``done`` arrives; one that
prefers latency speaks deltas at once and stops on ``retract``.

Other request modes use the same wrapper: a plain ``/v1/reply`` goes straight to ``generate``
(exact token counts and KV-cache behaviour of the backend), and a request whose deadline passed
(504) or whose client went away has ``cancel`` set, so its worker raises at the next model call
or stream piece instead of running the remaining rounds. A model call already inside the
backend cannot be interrupted; that is why a timed-out worker may run on for one call.

Comment text is never spoken early: while the reply streamed so far is contained in one of the
request's comments (folded and read as the parser reads them:
:func:`~hat.harness.protocol.comment_views`), its deltas wait. A reply copied from a comment,
which the runtime refuses, so never reaches the stream; an own reply that happens to start like
the comment is released as soon as it diverges (or, if it never does, sent by ``final_events``
once accepted).

Token counts of a streamed round: a backend's ``stream`` returns a :class:`~hat.models.base.Stream`
whose ``generation`` (set once the stream has ended) carries the backend's own counts, so they
are used as they are; a model whose ``stream`` returns a plain iterator gets its tokens counted
with the model's tokenizer when it has one, else as whitespace words (the scripted model's unit).
"""

from __future__ import annotations

import contextvars
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hat.errors import ModelError
from hat.harness.protocol import comment_views, fold_text
from hat.models.base import Generation, GenerationConfig, Message, Model, Stream, word_pieces

__all__ = ["RequestChannel", "ServingModel", "count_tokens", "partial_reply", "sse"]

Emit = Callable[[str, dict[str, Any]], None]

_ACTIVE: contextvars.ContextVar[RequestChannel | None] = contextvars.ContextVar("hat_serve_request", default=None)
_THINK_DONE = re.compile(r"<think>.*?</think>", re.S)
_FENCE = re.compile(r"^```(?:json)?\s*")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One server-sent event; JSON never contains a raw newline, so one ``data:`` line suffices."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


# -- incremental reply extraction ----------------------------------------------------------------
def _json_string_prefix(text: str, start: int) -> str:
    """Decode the JSON string body starting at ``text[start]`` as far as it is complete."""
    out: list[str] = []
    i = start
    while i < len(text):
        ch = text[i]
        if ch == '"':
            break
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(text):
            break
        esc = text[i + 1]
        if esc != "u":
            out.append({"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.get(esc, esc))
            i += 2
            continue
        decoded, used = _unicode_escape(text, i)
        if used == 0:
            break
        out.append(decoded)
        i += used
    return "".join(out)


def _unicode_escape(text: str, i: int) -> tuple[str, int]:
    """``\\uXXXX`` (or a surrogate pair of them) at ``text[i]``; ``(..., 0)`` while incomplete."""
    if not _HEX4.fullmatch(text[i + 2 : i + 6]):
        return "", 0
    code = int(text[i + 2 : i + 6], 16)
    if 0xD800 <= code < 0xDC00:
        low = text[i + 6 : i + 12]
        if len(low) < 6:
            return "", 0
        if low.startswith("\\u") and _HEX4.fullmatch(low[2:]):
            pair = (code - 0xD800) * 0x400 + (int(low[2:], 16) - 0xDC00) + 0x10000
            return chr(pair), 12
        return "\ufffd", 6
    return chr(code), 6


def partial_reply(text: str, reply_field: str = "reply") -> str:
    """The reply text already certain in a partial model output (``""`` when there is none yet).

    Mirrors :func:`hat.harness.protocol.parse_output`: reasoning spans are ignored, a tool call
    before the reply means no reply, the reply is either a JSON object's ``reply_field`` string or
    plain text, and it is stripped. Text that may still change (trailing whitespace, a ``<`` that
    may open a tag, an incomplete escape) is held back.
    """
    body = _THINK_DONE.sub("", text)
    if "<think>" in body:
        body = body[: body.index("<think>")]
    start = body.find("<reply>")
    if start < 0 or "<tool_call>" in body:
        return ""
    inner = body[start + len("<reply>") :].split("</reply>", 1)[0].lstrip()
    inner = _FENCE.sub("", inner)
    if inner.startswith("{"):
        key = re.search(r'"' + re.escape(reply_field) + r'"\s*:\s*"', inner)
        value = _json_string_prefix(inner, key.end()) if key else ""
        return value.split("<", 1)[0].strip()
    if inner.startswith("`"):
        return ""
    return inner.split("<", 1)[0].strip()


def count_tokens(model: Any, text: str) -> tuple[int, str]:
    """Tokens of ``text`` with the model's tokenizer if it exposes one, else whitespace words."""
    counter = getattr(model, "count_tokens", None)
    if callable(counter):
        return int(counter(text)), "tokenizer"
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None:
        try:
            return len(tokenizer(text, add_special_tokens=False)["input_ids"]), "tokenizer"
        except Exception:  # an unusual tokenizer: fall back to words
            pass
    return len(text.split()), "words"


# -- the per-request channel -----------------------------------------------------------------------
@dataclass
class RequestChannel:
    """What the worker thread shares with the HTTP handler for one request.

    ``emit(event, data)`` is thread-safe (the app passes one that hands events to the event
    loop); ``None`` for a non-streaming request. ``started`` is the handler's ``perf_counter``.
    ``cancel`` stops the worker at its next model call or stream piece (deadline passed, client
    gone); ``stage`` is ``queued`` until a worker takes the request, then ``running``.
    """

    reply_field: str = "reply"
    emit: Emit | None = None
    started: float = field(default_factory=time.perf_counter)
    cancel: threading.Event = field(default_factory=threading.Event)
    stage: Literal["queued", "running"] = "queued"
    round: int = -1
    standing: str = ""
    deltas: int = 0
    retracted: list[int] = field(default_factory=list)
    first_delta_at: dict[int | None, float] = field(default_factory=dict)
    quoted: tuple[str, ...] = ()

    @classmethod
    def for_comments(cls, comments: Sequence[str], **kw: Any) -> RequestChannel:
        """A channel that holds back reply text the request's comments already contain."""
        return cls(quoted=tuple(dict.fromkeys(v for c in comments for v in comment_views(c))), **kw)

    def quotes_a_comment(self, text: str) -> bool:
        """True while ``text`` could still be a copy of comment text: its streamed deltas wait."""
        folded = fold_text(text)
        return bool(folded) and any(folded in q for q in self.quoted)

    def activate(self) -> contextvars.Token[RequestChannel | None]:
        return _ACTIVE.set(self)

    @staticmethod
    def deactivate(token: contextvars.Token[RequestChannel | None]) -> None:
        _ACTIVE.reset(token)

    def _send(self, event: str, data: dict[str, Any]) -> None:
        if self.emit is not None:
            self.emit(event, data)

    def begin_round(self) -> None:
        if self.standing:
            self.retract(self.round, "the round was not the final one (tool call, rejected or invalid output)")
        self.round += 1
        self._send("round", {"round": self.round})

    def retract(self, round_: int | None, reason: str) -> None:
        if round_ is not None:
            self.retracted.append(round_)
        self.standing = ""
        self._send("retract", {"round": round_, "reason": reason})

    def delta(self, text: str, round_: int | None) -> None:
        if not text:
            return
        self.first_delta_at.setdefault(round_, time.perf_counter())
        self.standing += text
        self.deltas += 1
        self._send("delta", {"round": round_, "text": text})

    def final_events(self, reply: str) -> tuple[str, float | None]:
        """Make the standing text equal ``reply``; returns the stream source and TTFT (seconds)."""
        if self.standing == reply:
            first = self.first_delta_at.get(self.round)
            return "model", None if first is None else first - self.started
        if self.standing:
            self.retract(self.round, "the final reply differs from the streamed text (rewritten or fallback)")
        for piece in word_pieces(reply):
            self.delta(piece, None)
        first = self.first_delta_at.get(None)
        return "final", None if first is None else first - self.started


# -- the model wrapper -------------------------------------------------------------------------------
class ServingModel:
    """The app's model as every served agent sees it; see the module docstring."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name

    def generate(
        self,
        messages: Sequence[Message],
        config: GenerationConfig | None = None,
        *,
        cache_key: str | None = None,
    ) -> Generation:
        channel = _ACTIVE.get()
        if channel is not None and channel.cancel.is_set():
            raise ModelError("request cancelled (deadline passed or the client went away)")
        if channel is None or channel.emit is None:
            return self.inner.generate(messages, config, cache_key=cache_key)
        return self._streamed(channel, messages, config or GenerationConfig(), cache_key)

    def stream(
        self,
        messages: Sequence[Message],
        config: GenerationConfig | None = None,
        *,
        cache_key: str | None = None,
    ) -> Iterator[str]:
        return self.inner.stream(messages, config, cache_key=cache_key)

    def _streamed(
        self, channel: RequestChannel, messages: Sequence[Message], config: GenerationConfig, key: str | None
    ) -> Generation:
        channel.begin_round()
        start = time.perf_counter()
        first: float | None = None
        parts: list[str] = []
        emitted = ""
        pieces = self.inner.stream(messages, config, cache_key=key)
        try:
            for piece in pieces:
                if channel.cancel.is_set():
                    raise ModelError("request cancelled (deadline passed or the client went away)")
                first = first or time.perf_counter()
                parts.append(piece)
                now = partial_reply("".join(parts), channel.reply_field)
                if channel.quotes_a_comment(now):
                    continue  # maybe a copied comment (refused by the runtime): speak nothing yet
                if len(now) > len(emitted) and now.startswith(emitted):
                    channel.delta(now[len(emitted) :], channel.round)
                    emitted = now
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()
        if isinstance(pieces, Stream) and pieces.generation is not None:
            return pieces.generation
        return self._generation("".join(parts), messages, start, first)

    def _generation(self, text: str, messages: Sequence[Message], start: float, first: float | None) -> Generation:
        completion, _ = count_tokens(self.inner, text)
        prompt, _ = count_tokens(self.inner, "\n".join(m.get("content", "") for m in messages))
        return Generation(
            text=text,
            prompt_tokens=prompt,
            completion_tokens=completion,
            latency_s=time.perf_counter() - start,
            ttft_s=None if first is None else first - start,
        )
