"""Admission control, request-size limit and the error shape of the HTTP API.

Kept apart from the routes because each piece has one job that tests can reason about alone:
:class:`Admission` decides who runs, who waits and who gets a 429; :class:`BodyLimit` turns away
oversized bodies before any parsing; :class:`ApiError` is the one JSON shape of every error,
``{"error": {"code", "message", "details"}}``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from fastapi.responses import JSONResponse

__all__ = ["Admission", "ApiError", "BodyLimit"]

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    422: "invalid_request",
    429: "overloaded",
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


# -- request size limit ----------------------------------------------------------------------------
class BodyLimit:
    """Pure ASGI middleware: 413 for request bodies over ``max_bytes``, checked on the declared
    ``Content-Length`` and on the bytes actually received (chunked uploads), before parsing."""

    def __init__(self, app: Any, max_bytes: int, on_reject: Callable[[], None] = lambda: None) -> None:
        self.app, self.max_bytes, self.on_reject = app, max_bytes, on_reject

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            await self._reject(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
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

    async def _reject(self, scope: Any, receive: Any, send: Any) -> None:
        self.on_reject()
        error = ApiError(413, f"the request body is larger than {self.max_bytes} bytes; send a smaller request")
        await error.response()(scope, receive, send)
