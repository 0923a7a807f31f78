"""The FastAPI app behind ``hat serve``: replies, streamed replies, hot reload, health, metrics.

Routes (the OpenAPI document at ``/openapi.json`` is generated from these and tested)::

    POST /v1/reply            one reply as JSON (ReplyResponse)
    POST /v1/reply/stream     the same request; server-sent events: start, round, delta, retract,
                              done (a ReplyResponse) or error - see hat.serve.streaming
    GET  /health              liveness plus the serving version and the queue
    GET  /v1/harness          the current harness version (name, version, hash, loaded_at)
    POST /v1/harness/reload   load a harness folder (validated first); admin bearer token
    GET  /metrics             Prometheus text (prometheus_client), 503 without it

Design decisions:

- **Bounded concurrency.** At most ``max_concurrency`` requests run (one worker thread each, from
  a pool of exactly that size, so nothing queues invisibly inside the pool) and at most
  ``max_queue`` more wait for a slot in arrival order. Beyond that: 429 with ``Retry-After``
  (seconds, estimated from recent request times and the queue length).
- **Deadlines.** ``request_timeout_s`` covers queue wait and agent time. When it passes the client
  gets 504 at once; the worker thread cannot be killed, so it runs on until its current model
  call returns, then stops at the next one (the request's ``cancel`` flag), and its slot stays
  taken until then - a timed-out request still occupies capacity, so the concurrency bound
  stays true.
- **Versions.** Each request leases the current (harness, agent) pair when it starts running
  (``HarnessHolder.lease``), so a reload never changes a request midway; see ``hat.serve.state``.
- **Clients that leave are cancelled.** While a request waits for a slot or runs, the handler
  also waits for the client's disconnect; when that comes first the request leaves the queue, or
  its worker stops at its next model call (as for a deadline), and ``cancelled`` counts it
  (``/health`` and ``hat_cancelled_total``). Streams are cancelled by the streaming response.
- **Hostile input never crashes the server.** Bodies over ``max_body_bytes`` get 413 before they
  are parsed, bodies slower than ``body_timeout_s`` 408; bad JSON 400; schema and limit
  violations 422 naming the field; every error is the same JSON shape,
  ``{"error": {"code", "message", "details"}}``.
- **No handler error becomes a broken connection.** An exception inside the agent (a prompt
  template that fails to render, a model backend that raises) is answered like a failed model:
  the harness's fallback reply with ``status="error"``, HTTP 200, the cause in the server log and
  the trace under the request id. Anything else that escapes becomes a JSON 500 from
  :class:`~hat.serve.limits.CatchAll`, which - unlike Starlette's handler for ``Exception`` -
  does not re-raise, so uvicorn keeps the keep-alive connection open.
- **Trust boundary.** The harness is code: a reload needs the admin token (always set; a random
  one when none is given), may only load folders under ``harness_roots`` and gets the same answer
  for every unusable path (``hat.serve.state``). The ``Host`` header must name the server
  (``allowed_hosts``, loopback names by default), which stops DNS rebinding. API clients never
  see server paths or a tool backend's error text - those stay in the log and the trace.
- **The room.** Every request's context is filled by the harness's own ``context_provider``
  (``harness.yaml``; the ``context_provider`` argument overrides it). The deployment's default
  room comes from that provider once at start;
  a request's typed ``room`` (:class:`~hat.serve.schemas.RoomState`) overrides it key by key and
  ``room_id`` is always the request's.
"""

import asyncio
import concurrent.futures as cf
import copy
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from fastapi import Body, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from hat.harness.loader import load_context_provider
from hat.harness.runtime import Agent, ContextProvider
from hat.harness.runtime import Request as AgentRequest
from hat.harness.runtime import Response as AgentResponse
from hat.harness.sinks import Sink
from hat.harness.state import Harness
from hat.harness.trace import Trace
from hat.models.base import Model
from hat.serve.limits import (
    LOOPBACK_HOSTS,
    Admission,
    ApiError,
    BodyLimit,
    CatchAll,
    HostCheck,
    install_error_handlers,
)
from hat.serve.metrics import Metrics
from hat.serve.schemas import (
    ErrorResponse,
    HarnessInfo,
    HealthResponse,
    ReloadRequest,
    ReloadResponse,
    ReplyRequestBase,
    ReplyResponse,
    RequestLimits,
    RoomState,
    reply_request_model,
)
from hat.serve.state import HarnessHolder, HarnessVersion, ReloadNotAllowed, ReloadRejected
from hat.serve.streaming import RequestChannel, ServingModel, count_tokens, sse

__all__ = ["ServerSettings", "create_app"]

log = logging.getLogger("hat.serve")
T = TypeVar("T")

_ENDPOINTS = {"/v1/reply": "reply", "/v1/reply/stream": "stream", "/v1/harness/reload": "reload"}


# -- the server's state ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerSettings:
    """How one app serves: concurrency and queue (429 beyond), the per-request deadline (504), the
    admin token of the reload route, the folders a reload may load from, and the room every request
    starts from (from the harness's context provider)."""

    max_concurrency: int
    max_queue: int
    request_timeout_s: float
    admin_token: str
    harness_roots: tuple[str | Path, ...] = ()
    room_defaults: dict[str, Any] = field(default_factory=dict)


class _Server:
    """Everything the routes share; one per app."""

    def __init__(self, holder: HarnessHolder, model: ServingModel, settings: ServerSettings) -> None:
        self.holder, self.model = holder, model
        self.timeout_s = settings.request_timeout_s
        self.admin_token = settings.admin_token
        self.room_defaults = settings.room_defaults
        self.admission = Admission(settings.max_concurrency, settings.max_queue)
        self.executor = cf.ThreadPoolExecutor(settings.max_concurrency, thread_name_prefix="hat-serve")
        self.metrics = Metrics(lambda: self.admission.running, lambda: self.admission.queued)
        self.cancelled = 0
        self.started = time.time()
        self.metrics.harness(holder.current.harness.name, holder.current.harness.version, holder.current.hash)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.holder.close()

    # -- one request ------------------------------------------------------------------------------
    def agent_request(self, body: ReplyRequestBase) -> AgentRequest:
        room = {**copy.deepcopy(self.room_defaults), **body.room_overrides(), "room_id": body.room_id}
        history = tuple(h.model_dump() for h in getattr(body, "history", ()))
        turns = body.texts()
        context = dict(body.context)
        if self.room_defaults or body.room_overrides():  # a live-room harness (its provider gives a room)
            context["room"] = room
        return AgentRequest(
            turns=turns,
            context=context,
            history=history,
            request_id=body.request_id or uuid.uuid4().hex[:16],
            mode="single" if len(turns) == 1 else "multi",
        )

    async def admit(self, endpoint: str, started: float) -> float:
        """Take a running slot or raise 429/504; returns the queue wait in seconds."""
        if self.admission.full():
            self.metrics.reject("overloaded")
            self.metrics.http(endpoint, 429)
            raise ApiError(
                429,
                f"the server is at capacity ({self.admission.limit} running, {self.admission.max_queue} queued); "
                "retry after the time in Retry-After",
                headers={"Retry-After": str(self.admission.retry_after())},
            )
        try:
            return await self.admission.enter(self.timeout_s - (time.perf_counter() - started))
        except TimeoutError:
            raise self.timeout(endpoint, "while queued") from None

    def timeout(self, endpoint: str, where: str) -> ApiError:
        self.metrics.reject("timeout")
        self.metrics.http(endpoint, 504)
        return ApiError(
            504, f"no reply within {self.timeout_s:g}s ({where}); the request was cancelled at its next model call"
        )

    async def guarded(self, http: Request, endpoint: str, channel: RequestChannel, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` unless the client disconnects first; then cancel it - out of the queue, or
        its worker at the next model call - count it, and answer 499 (nobody is left to read it)."""
        task = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(_client_gone(http))
        try:
            await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the server is shutting down
            task.cancel()
            channel.cancel.set()
            raise
        finally:
            gone.cancel()
        if task.done():
            return task.result()
        stage = channel.stage
        task.cancel()
        channel.cancel.set()
        await asyncio.gather(task, return_exceptions=True)
        self.count_cancelled(endpoint, stage)
        raise ApiError(499, "the client closed the connection; the request was cancelled")

    def count_cancelled(self, endpoint: str, stage: str) -> None:
        self.cancelled += 1
        self.metrics.cancel(endpoint, stage)
        self.metrics.http(endpoint, 499)

    def start(self, request: AgentRequest, channel: RequestChannel) -> asyncio.Future[Any]:
        """Run the request on a worker; the slot is released when the worker returns."""
        channel.stage = "running"
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, self._work, request, channel)
        started = time.perf_counter()

        def done(fut: asyncio.Future[Any]) -> None:
            self.admission.leave(time.perf_counter() - started)
            if not fut.cancelled():
                fut.exception()  # mark as retrieved: a timed-out request's error is not news

        future.add_done_callback(done)
        return future

    def _work(self, request: AgentRequest, channel: RequestChannel) -> tuple[HarnessVersion, AgentResponse, Any]:
        token = channel.activate()
        try:
            with self.holder.lease() as version:
                channel.reply_field = version.harness.output.reply_field
                if channel.emit is not None:
                    channel.emit("start", {"trace_id": request.request_id, "harness": version.ref()})
                try:
                    response = version.agent.respond(request)
                except Exception as exc:  # a template that fails to render, a backend that raises, ...
                    log.error("request %s failed in the agent", request.request_id, exc_info=exc)
                    response = version.failed(request, exc)
                final = channel.final_events(response.reply) if channel.emit is not None else None
                return version, response, final
        finally:
            channel.deactivate(token)

    def reply_body(
        self,
        room_id: str,
        version: HarnessVersion,
        response: AgentResponse,
        queue_s: float,
        total_s: float,
        ttft_s: float | None = None,
    ) -> dict[str, Any]:
        trace = response.trace
        return {
            "reply": response.reply,
            "payload": response.payload,
            "status": trace.status,
            "status_reason": _status_reason(trace),
            "room_id": room_id,
            "trace_id": trace.request_id,
            "harness": version.ref(),
            "model": trace.model,
            "rounds": len(trace.rounds),
            "actions": [r.action for r in trace.rounds],
            "tool_calls": [
                {
                    "name": c.name,
                    "status": c.status,
                    "error": f"the call failed ({c.status}); see trace {trace.request_id}" if c.error else "",
                    "latency_ms": round(c.latency_ms, 3),
                }
                for c in trace.tool_calls
            ],
            "skills_loaded": list(trace.skills_loaded),
            "hook_blocks": sum(1 for e in trace.hook_events if e.verdict in ("block", "retry")),
            "prompt_tokens": trace.prompt_tokens,
            "completion_tokens": trace.completion_tokens,
            "timings": {
                "total_ms": round(total_s * 1000, 3),
                "queue_ms": round(queue_s * 1000, 3),
                "agent_ms": round(trace.latency_ms, 3),
                "model_ms": round(trace.model_ms, 3),
                "ttft_ms": None if ttft_s is None else round(ttft_s * 1000, 3),
            },
            "stream": None,
        }

    async def reply(self, body: ReplyRequestBase, http: Request) -> JSONResponse:
        started = time.perf_counter()
        channel = RequestChannel(started=started)
        return await self.guarded(http, "reply", channel, self._reply(body, channel))

    async def _reply(self, body: ReplyRequestBase, channel: RequestChannel) -> JSONResponse:
        request = self.agent_request(body)
        queue_s = await self.admit("reply", channel.started)
        future = self.start(request, channel)
        try:
            version, response, _ = await asyncio.wait_for(
                asyncio.shield(future), self.timeout_s - (time.perf_counter() - channel.started)
            )
        except TimeoutError:
            channel.cancel.set()
            raise self.timeout("reply", "while running") from None
        total_s = time.perf_counter() - channel.started
        self.metrics.reply("reply", response.trace, total_s, queue_s)
        self.metrics.http("reply", 200)
        return JSONResponse(self.reply_body(body.room_id, version, response, queue_s, total_s))

    async def stream(self, body: ReplyRequestBase, http: Request) -> StreamingResponse:
        started = time.perf_counter()
        request = self.agent_request(body)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def emit(event: str, data: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(events.put_nowait, (event, data))

        channel = RequestChannel.for_comments(request.turns, emit=emit, started=started)
        queue_s = await self.guarded(http, "stream", channel, self.admit("stream", started))
        future = self.start(request, channel)
        future.add_done_callback(lambda _: events.put_nowait(("_end", None)))
        self.metrics.http("stream", 200)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        source = self._events(body.room_id, events, future, channel, queue_s)
        return StreamingResponse(source, media_type="text/event-stream", headers=headers)

    async def _events(
        self,
        room_id: str,
        events: asyncio.Queue[tuple[str, Any]],
        future: asyncio.Future[Any],
        channel: RequestChannel,
        queue_s: float,
    ) -> AsyncIterator[bytes]:
        ended = False
        try:
            while True:
                remaining = self.timeout_s - (time.perf_counter() - channel.started)
                try:
                    event, data = await asyncio.wait_for(events.get(), max(remaining, 0.0))
                except TimeoutError:
                    ended = True
                    yield sse("error", {"error": self._timeout_body()})
                    return
                if event == "_end":
                    ended = True
                    break
                yield sse(event, data)
            yield self._done_event(room_id, future, channel, queue_s)
        finally:
            if not ended:  # the client left while the agent was still running
                self.count_cancelled("stream", "running")
            channel.cancel.set()  # a no-op after a normal end; stops the worker when the client left

    def _timeout_body(self) -> dict[str, Any]:
        self.metrics.reject("timeout")  # the HTTP answer was already 200; the error travels as an event
        message = (
            f"no reply within {self.timeout_s:g}s (while streaming); the request was cancelled at its next model call"
        )
        return {"code": "timeout", "message": message, "details": []}

    def _done_event(self, room_id: str, future: asyncio.Future[Any], channel: RequestChannel, queue_s: float) -> bytes:
        """The ``done`` event, or an ``error`` event: a stream that started must end well-formed."""
        try:
            return self._done(room_id, future.result(), channel, queue_s)
        except Exception as exc:
            error_id = uuid.uuid4().hex[:12]
            log.error("stream %s failed", error_id, exc_info=exc)
            message = f"internal error {error_id}; the server log has the details"
            return sse("error", {"error": {"code": "internal_error", "message": message, "details": []}})

    def _done(self, room_id: str, result: Any, channel: RequestChannel, queue_s: float) -> bytes:
        version, response, (source, ttft_s) = result
        total_s = time.perf_counter() - channel.started
        body = self.reply_body(room_id, version, response, queue_s, total_s, ttft_s)
        tokens, method = count_tokens(self.model.inner, response.reply)
        body["stream"] = {
            "source": source,
            "deltas": channel.deltas,
            "retracted_rounds": channel.retracted,
            "reply_tokens": tokens,
            "reply_tokens_method": method,
        }
        self.metrics.reply("stream", response.trace, total_s, queue_s, ttft_s)
        return sse("done", body)

    # -- admin ------------------------------------------------------------------------------------
    def check_admin(self, credentials: HTTPAuthorizationCredentials | None) -> None:
        if credentials is None:
            self.metrics.http("reload", 401)
            raise ApiError(401, "this endpoint needs 'Authorization: Bearer <admin token>'", headers=_BEARER)
        if not secrets.compare_digest(credentials.credentials.encode(), self.admin_token.encode()):
            self.metrics.http("reload", 403)
            raise ApiError(403, "the admin token is not valid")

    def info(self, version: HarnessVersion | None = None) -> dict[str, Any]:
        version = version or self.holder.current
        return version.info(self.holder.in_flight(version))

    async def reload(self, path: str | None) -> dict[str, Any]:
        try:
            previous, current, changed = await run_in_threadpool(self.holder.reload, path)
        except ReloadNotAllowed:
            log.warning("reload refused: %r is not a harness folder under the roots %s", path, self.holder.roots)
            self.metrics.reload("refused")
            self.metrics.http("reload", 422)
            raise ApiError(422, ReloadNotAllowed.MESSAGE, code="harness_unavailable") from None
        except ReloadRejected as exc:
            self.metrics.reload("rejected")
            self.metrics.http("reload", 422)
            details = [{"file": p.file, "line": p.line, "message": p.message} for p in exc.problems]
            raise ApiError(422, str(exc), code="invalid_harness", details=details) from None
        self.metrics.reload("ok" if changed else "unchanged")
        self.metrics.harness(current.harness.name, current.harness.version, current.hash)
        self.metrics.http("reload", 200)
        return {"changed": changed, "previous": self.info(previous), "current": self.info(current)}

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "model": self.model.name,
            "harness": self.info(),
            "running": self.admission.running,
            "queued": self.admission.queued,
            "max_concurrency": self.admission.limit,
            "max_queue": self.admission.max_queue,
            "cancelled": self.cancelled,
            "uptime_s": round(time.time() - self.started, 3),
        }


async def _client_gone(http: Request) -> None:
    """Returns when the client disconnects (the body has been read; only a disconnect comes)."""
    while (await http.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # not a disconnect (no server sends more body now): do not spin


def _status_reason(trace: Trace) -> str:
    """Why the status; for ``error`` only a pointer to the trace (the cause may name hosts or paths)."""
    if trace.status == "error":
        return f"internal error; the server log and trace {trace.request_id} have the cause"
    return str(trace.context.get("status_reason", ""))


_BEARER = {"WWW-Authenticate": "Bearer"}
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 408, 413, 422, 429, 500, 504)
}
_STREAM_DOC = """Server-sent events, in order: `start` {trace_id, harness}; per model round `round`
{round}; `delta` {round, text} pieces of the reply text as the model writes them; `retract`
{round, reason} when a round's deltas are void (the round was not final, or the final reply
differs); then `done` (a ReplyResponse with `stream` filled) or `error` (an ErrorResponse body).
The deltas not retracted concatenate to `done.reply`. `done.timings.ttft_ms` is the time from
the request's arrival to the first delta of the text that stood. 429/504 before the stream starts
are plain HTTP answers; a deadline passed while streaming is an `error` event."""


def _default_room(provider: ContextProvider | None) -> dict[str, Any]:
    if provider is None:
        return {}
    try:
        return dict(provider(AgentRequest.of("hello")).context.get("room") or {})
    except Exception:  # a provider that needs more than a comment: no defaults
        return {}


def _install_reply_routes(app: FastAPI, server: _Server, request_model: type[ReplyRequestBase]) -> None:
    @app.post("/v1/reply", response_model=ReplyResponse, responses=_ERRORS, tags=["reply"])
    async def reply(body: request_model, request: Request) -> JSONResponse:  # type: ignore[valid-type]
        """Answer one or several viewer comments; the reply and how it came about."""
        return await server.reply(body, request)

    stream_doc: dict[int | str, dict[str, Any]] = {
        200: {"description": _STREAM_DOC, "content": {"text/event-stream": {"schema": {"type": "string"}}}}
    }

    @app.post("/v1/reply/stream", responses={**_ERRORS, **stream_doc}, response_class=StreamingResponse, tags=["reply"])
    async def reply_stream(body: request_model, request: Request) -> StreamingResponse:  # type: ignore[valid-type]
        """The same request as /v1/reply, answered as server-sent events while the model writes."""
        return await server.stream(body, request)


def _install_ops_routes(app: FastAPI, server: _Server) -> None:
    bearer = HTTPBearer(
        auto_error=False,
        description="Admin token (hat serve prints it and writes it to --admin-token-file; or --admin-token).",
    )

    def admin(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
        server.check_admin(credentials)

    @app.get("/health", response_model=HealthResponse, tags=["ops"])
    async def health() -> dict[str, Any]:
        """Liveness, the serving harness version and the queue."""
        return server.health()

    @app.get("/v1/harness", response_model=HarnessInfo, tags=["harness"])
    async def harness() -> dict[str, Any]:
        """The harness version new requests run on."""
        return server.info()

    reload_errors: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorResponse},
        403: {"model": ErrorResponse},
        422: {"model": ErrorResponse},
    }

    @app.post("/v1/harness/reload", response_model=ReloadResponse, responses=reload_errors, tags=["harness"])
    async def reload(body: ReloadRequest | None = Body(default=None), _: None = Depends(admin)) -> dict[str, Any]:  # noqa: B008
        """Load a harness folder under the server's harness roots (default: the current one again).
        It is validated first: a broken harness is rejected with every problem (file and line) and
        the running version keeps serving. A path that is missing, outside the roots or not a
        harness gets one answer (422 ``harness_unavailable``). Requests already running finish on
        the version they started with."""
        return await server.reload(body.path if body else None)

    metrics_doc: dict[int | str, dict[str, Any]] = {
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        503: {"model": ErrorResponse},
    }

    @app.get("/metrics", response_class=Response, responses=metrics_doc, tags=["ops"])
    async def metrics() -> Response:
        """Prometheus metrics (needs prometheus_client, in the 'serve' extra)."""
        if not server.metrics.enabled:
            raise ApiError(503, "metrics need prometheus_client: pip install 'hat-agent[serve]'")
        content, media_type = server.metrics.render()
        return Response(content, media_type=media_type)


def _build_server(
    harness_ref: str | Path,
    model: Model,
    context_provider: ContextProvider | None,
    sinks: Sequence[Sink],
    settings: ServerSettings,
) -> _Server:
    """One :class:`ServingModel` shared by every harness version's agent, and the holder."""
    serving = ServingModel(model)

    def provider(harness: Harness) -> ContextProvider | None:
        return context_provider if context_provider is not None else load_context_provider(harness)

    def build(harness: Harness) -> Agent:
        return Agent(harness, serving, sinks=sinks, context_provider=provider(harness))

    holder = HarnessHolder(harness_ref, build, roots=settings.harness_roots)
    room_defaults = _default_room(provider(holder.current.harness))
    return _Server(holder, serving, replace(settings, room_defaults=room_defaults))


def create_app(
    harness_ref: str | Path,
    model: Model,
    *,
    max_concurrency: int = 4,
    max_queue: int = 16,
    request_timeout_s: float = 30.0,
    max_body_bytes: int = 64 * 1024,
    body_timeout_s: float = 10.0,
    admin_token: str | None = None,
    harness_roots: Sequence[str | Path] = (),
    allowed_hosts: Sequence[str] | None = None,
    context_provider: ContextProvider | None = None,
    limits: RequestLimits | None = None,
    room_model: type[BaseModel] = RoomState,
    sinks: Sequence[Sink] = (),
) -> FastAPI:
    """The serving app for one harness folder (or built-in name) and one model.

    Raises :class:`~hat.serve.state.ReloadRejected` when the harness cannot be loaded. ``limits``
    sets the comment count/length and history limits (422 beyond them) and ``room_model`` the
    request's room schema; ``sinks`` receive every trace. Trust settings: ``admin_token`` guards
    the reload route (``None``: a random one, read it from ``app.state.server.admin_token``);
    ``harness_roots`` are the folders a reload may load from (default: the served harness's
    parent); ``allowed_hosts`` the ``Host`` names accepted (default: the loopback names; ``["*"]``
    accepts any). ``app.state.server`` exposes the holder, admission and metrics (for tests and
    embedding).
    """
    if max_concurrency < 1 or max_queue < 0 or request_timeout_s <= 0 or max_body_bytes < 1 or body_timeout_s <= 0:
        raise ValueError(
            "max_concurrency >= 1, max_queue >= 0, request_timeout_s > 0, max_body_bytes >= 1 and body_timeout_s > 0"
        )
    settings = ServerSettings(
        max_concurrency=max_concurrency,
        max_queue=max_queue,
        request_timeout_s=request_timeout_s,
        admin_token=admin_token or secrets.token_urlsafe(32),
        harness_roots=tuple(harness_roots),
    )
    server = _build_server(harness_ref, model, context_provider, sinks, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        server.close()

    app = FastAPI(
        title="HAT agent server",
        version="1",
        description="Replies from a HAT agent; hot-reloadable harness; Prometheus metrics.",
        lifespan=lifespan,
    )
    app.state.server = server

    def count(path: str, status: int) -> None:
        server.metrics.http(_ENDPOINTS.get(path, "other"), status)

    install_error_handlers(app, count, server.metrics.reject)
    _install_reply_routes(app, server, reply_request_model(limits or RequestLimits(), room_model))
    _install_ops_routes(app, server)
    # add_middleware wraps: the last added runs first (CatchAll, then HostCheck, then BodyLimit)
    app.add_middleware(
        BodyLimit, max_bytes=max_body_bytes, on_reject=server.metrics.reject, read_timeout_s=body_timeout_s
    )
    app.add_middleware(HostCheck, allowed_hosts=list(allowed_hosts or LOOPBACK_HOSTS))
    app.add_middleware(CatchAll, on_error=lambda path: count(path, 500))
    return app
