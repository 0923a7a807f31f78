"""Admission control, the ASGI guards in front of the routes, and the error shape of the HTTP API.

Kept apart from the routes because each piece has one job that tests can reason about alone:
:class:`Admission` decides who runs, who waits and who gets a 429; :class:`ApiError` is the one
JSON shape of every error, ``{"error": {"code", "message", "details"}}``. The guards are pure ASGI
middleware, outermost first:

- :class:`CatchAll` turns any exception that escaped the app into a JSON 500 *and returns
  normally*. Why not an ``exception_handler(Exception)``: Starlette sends that handler's response
  and then re-raises, and uvicorn answers a re-raised exception after a sent response by closing
  the connection - so the client's *next* request on that keep-alive connection failed too.
- :class:`HostCheck` refuses a ``Host`` header that is not one of the server's names (DNS
  rebinding: a web page that points its own domain at 127.0.0.1 can then reach a loopback server
  from the browser). The matching is Starlette's ``TrustedHostMiddleware``; only the refusal is
  ours, so that it has the API's JSON shape.
- :class:`BodyLimit` turns away oversized bodies before any parsing, and bodies that arrive too
  slowly (408): uvicorn's ``timeout_keep_alive`` covers idle connections only, so without a read
  deadline a client sending one byte a minute holds a connection and an app task forever.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

__all__ = [
    "LOOPBACK_HOSTS",
    "Admission",
    "ApiError",
    "BodyLimit",
    "CatchAll",
    "HostCheck",
    "allowed_hosts",
    "install_error_handlers",
]

log = logging.getLogger("hat.serve")

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")  # as a Host header names them
_LOOPBACK_BINDS = ("127.0.0.1", "localhost", "::1")
_WILDCARD_BINDS = ("0.0.0.0", "::", "")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "body_timeout",
    413: "too_large",
    422: "invalid_request",
    429: "overloaded",
    499: "cancelled",
    500: "internal_error",
    504: "timeout",
}


class ApiError(Exception):
    """An error answer in the API's one JSON shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: Sequence[dict[str, Any]] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.details = status, message, list(details)
        self.code = code or _CODES.get(status, "error")
        self.headers = headers

    def response(self) -> JSONResponse:
        body = {"error": {"code": self.code, "message": self.message, "details": self.details}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def install_error_handlers(
    app: FastAPI, count: Callable[[str, int], None], reject: Callable[[str], None] = lambda reason: None
) -> None:
    """Answer ApiError, validation errors (400 bad JSON, 422 otherwise) and Starlette's HTTP
    errors (404, 405, ...) in the one JSON shape; ``count(path, status)`` and ``reject(reason)``
    record them. Anything else is :class:`CatchAll`'s."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        bad_json = any(e.get("type") == "json_invalid" for e in errors)
        details = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "message": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in errors[:20]
        ]
        summary = "; ".join(f"{'.'.join(d['loc'])}: {d['message']}" for d in details[:5])
        status = 400 if bad_json else 422
        reject("invalid")
        count(request.url.path, status)
        message = f"the body is not valid JSON: {summary}" if bad_json else f"invalid request: {summary}"
        return ApiError(status, message[:2000], code="invalid_json" if bad_json else None, details=details).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        count(request.url.path, exc.status_code)
        return ApiError(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None)).response()


# -- admission control ---------------------------------------------------------------------------
class Admission:
    """``limit`` running slots and ``max_queue`` waiting places, FIFO. Used from the event loop only.

    A slot passes directly from a finishing request to the oldest waiter, so a newcomer can never
    overtake the queue. A waiter whose deadline passes leaves the queue; if it was handed a slot
    in the same instant, it hands the slot on.
    """

    def __init__(self, limit: int, max_queue: int) -> None:
        self.limit, self.max_queue = limit, max_queue
        self.admitted = 0
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._avg_s = 1.0

    @property
    def queued(self) -> int:
        return self.admitted - self.running

    def full(self) -> bool:
        return self.admitted >= self.limit + self.max_queue

    def retry_after(self) -> int:
        """Seconds until a place is likely free: queue length x recent mean time / slots."""
        return max(1, math.ceil(self._avg_s * (self.queued + 1) / self.limit))

    async def enter(self, timeout_s: float) -> float:
        """Wait for a running slot; returns the wait in seconds; ``TimeoutError`` at the deadline."""
        start = time.perf_counter()
        self.admitted += 1
        if self.running < self.limit and not self._waiters:
            self.running += 1
            return 0.0
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, max(timeout_s, 0.0))
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._hand_off()  # granted at the deadline: pass the slot on
            self.admitted -= 1
            raise
        return time.perf_counter() - start

    def leave(self, busy_s: float) -> None:
        """A running request finished (its worker thread returned)."""
        self._avg_s = 0.9 * self._avg_s + 0.1 * busy_s
        self.admitted -= 1
        self._hand_off()

    def _hand_off(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.running -= 1


# -- the ASGI guards ---------------------------------------------------------------------------------
class CatchAll:
    """Pure ASGI middleware: an exception that escapes the app becomes a JSON 500 with an error id
    (the traceback goes to the ``hat.serve`` log under that id), and the connection stays usable.

    If the response had already started, a complete one is left as it is; an incomplete one
    (a stream that broke midway) cannot be repaired, so the exception goes on to uvicorn, which
    closes the connection - the only honest end for a truncated response.
    """

    def __init__(self, app: Any, on_error: Callable[[str], None] = lambda path: None) -> None:
        self.app, self.on_error = app, on_error

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "complete": False}

        async def tracked(message: Any) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["complete"] = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            error_id = uuid.uuid4().hex[:12]
            log.error("unhandled error %s on %s %s", error_id, scope["method"], scope["path"], exc_info=exc)
            if state["started"] and not state["complete"]:
                raise
            if state["started"]:
                return
            self.on_error(scope["path"])
            error = ApiError(500, f"internal error {error_id}; the server log has the details")
            await error.response()(scope, receive, send)


def _host_name(host: str) -> str:
    """A bind address or name as a Host header carries it (IPv6 literals in brackets)."""
    host = host.strip().lower()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def allowed_hosts(bind: str, extra: Sequence[str]) -> list[str]:
    """The Host names the server accepts when bound to ``bind``; ``ValueError`` when that cannot
    be known (a wildcard bind and no ``extra``)."""
    names = [_host_name(h) for h in extra]
    if bind in _LOOPBACK_BINDS or bind.startswith("127."):
        base = [*LOOPBACK_HOSTS, _host_name(bind)]
    elif bind in _WILDCARD_BINDS:
        if not names:
            raise ValueError(
                f"binding {bind or 'every interface'} accepts connections on every address, so the server cannot "
                "tell which Host names are its own: name them with --allowed-host (repeatable; '*' accepts any)"
            )
        base = list(LOOPBACK_HOSTS)
    else:
        base = [_host_name(bind)]
    return list(dict.fromkeys([*base, *names]))


class HostCheck:
    """Pure ASGI middleware: 400 (JSON) unless the ``Host`` header names one of ``allowed_hosts``.

    Patterns as in Starlette's ``TrustedHostMiddleware`` (which does the matching): exact names,
    ``*.example.com``, or ``*`` for any; IPv6 literals in brackets (``[::1]``).
    """

    def __init__(self, app: Any, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.allowed_hosts = list(allowed_hosts)
        self._match = TrustedHostMiddleware(self._accept, allowed_hosts=self.allowed_hosts, www_redirect=False)

    @staticmethod
    async def _accept(scope: Any, receive: Any, send: Any) -> None:
        scope["hat.host_ok"] = True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def discard(message: Any) -> None:  # the library's plain-text refusal is replaced below
            pass

        await self._match(scope, receive, discard)
        if scope.pop("hat.host_ok", False):
            await self.app(scope, receive, send)
            return
        error = ApiError(400, "the Host header does not name this server", code="invalid_host")
        await error.response()(scope, receive, send)


# -- request size limit ----------------------------------------------------------------------------
class BodyLimit:
    """Pure ASGI middleware: 413 for request bodies over ``max_bytes``, checked on the declared
    ``Content-Length`` and on the bytes actually received (chunked uploads), before parsing; 408
    (and the connection closed, as the rest of the body is unread) when the whole body has not
    arrived within ``read_timeout_s``. ``on_reject(reason)`` counts refusals."""

    def __init__(
        self,
        app: Any,
        max_bytes: int,
        on_reject: Callable[[str], None] = lambda reason: None,
        read_timeout_s: float = 10.0,
    ) -> None:
        self.app, self.max_bytes, self.on_reject = app, max_bytes, on_reject
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            await self._reject(scope, receive, send)
            return
        try:
            async with asyncio.timeout(self.read_timeout_s):
                body = await self._read(receive)
        except TimeoutError:
            self.on_reject("body_timeout")
            message = f"the request body did not arrive within {self.read_timeout_s:g}s"
            await ApiError(408, message, headers={"Connection": "close"}).response()(scope, receive, send)
            return
        if body is None:  # the client left
            return
        if len(body) > self.max_bytes:
            await self._reject(scope, receive, send)
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive: Any) -> bytearray | None:
        """The body, or ``None`` when the client disconnected; stops early past ``max_bytes``."""
        body = bytearray()
        more = True
        while more and len(body) <= self.max_bytes:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
        return body

    async def _reject(self, scope: Any, receive: Any, send: Any) -> None:
        self.on_reject("too_large")
        error = ApiError(413, f"the request body is larger than {self.max_bytes} bytes; send a smaller request")
        await error.response()(scope, receive, send)
