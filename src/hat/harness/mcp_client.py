"""A synchronous pool of MCP servers, behind the ``mcp:server/tool`` tool bindings.

A harness declares its servers under ``mcp_servers`` in ``harness.yaml``
(``{command, args, env, cwd}``); :class:`MCPServerPool` starts each one over stdio the first time a
binding needs it and keeps one session per server open until :meth:`MCPServerPool.close`.

Why a background event-loop thread: the ``mcp`` SDK is async (anyio), while HAT's runtime calls
tools from ordinary threads. A session and its stdio task group belong to the event loop (and to
the task) that opened them, so they cannot be reopened with ``asyncio.run`` per call. The pool
therefore owns one daemon thread running one asyncio loop; every server lives in that loop as a
long-lived *owner task* (it enters the SDK ``Client``, waits to be told to stop, then exits it).
Sync methods hand coroutines to the loop with ``run_coroutine_threadsafe`` and block on the
returned future, so any number of threads can call at once and their requests interleave on the
same sessions. All pool state is touched only from the loop thread, which is what makes the pool
thread-safe without locks around it.

How timeouts work: inside the loop each call runs under ``asyncio.wait_for(timeout_s)``; when it
fires, only that request is cancelled (the SDK tells the server with ``notifications/cancelled``)
and the session stays up for everyone else; the caller gets the builtin ``TimeoutError``. The
calling thread also bounds its own wait (start-up + call timeout + a grace), so a wedged loop
can never hang a caller. Start-up has its own bound, ``start_timeout_s``. :meth:`close` stops all
servers in parallel under ``close_timeout_s`` and then stops the loop, so it cannot hang either.

Failures: a server that cannot start, or whose connection drops, raises
:class:`~hat.errors.ToolBindingError` naming the server, its command line and the tail of its
stderr (kept in memory, the last few KiB, from a pipe the loop reads); the next call starts it
again. A tool that reports an error (``isError``), or a protocol error from a live server (an
unknown tool, say), comes back as an :class:`MCPResult` with ``is_error=True``: tool failures are
observations for the model, not exceptions.

Environment: as in the SDK (and other MCP hosts), a server sees a small safe subset of this
process's environment (``PATH``, ``HOME``, ...) plus the ``env`` it declares. ``mcp`` is imported
only when the first server starts; without it, :class:`~hat.errors.MissingDependencyError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import json
import logging
import os
import shlex
import sys
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from hat.errors import MissingDependencyError, ToolBindingError

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["MCPResult", "MCPServerPool", "MCPServerSpec"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_GRACE_S = 5.0  # extra wait on the calling thread beyond the loop-side timeouts
_STDERR_TAIL_BYTES = 4096
_STDERR_EOF_WAIT_S = 0.5  # how long a failure waits for the last stderr bytes of a dying server
_LIST_PAGE_CAP = 100  # tools/list pages; a server that paginates forever cannot hang list_tools
_CONNECTION_CLOSED = -32000  # JSON-RPC code the SDK uses when the transport is gone


@dataclass(frozen=True)
class MCPResult:
    """The outcome of one MCP tool call.

    ``content`` is the value to show the model: the server's structured content when it sent
    some (a ``{"result": x}`` wrapper that the SDK adds around non-object returns is unwrapped when
    the text content says the value is ``x``), else the joined text content, parsed as JSON when it
    parses. ``text`` is the joined text content (the structured content as JSON if there was no
    text). ``is_error`` is the server's ``isError`` flag, or ``True`` for a protocol error.
    """

    content: Any
    is_error: bool
    text: str


@dataclass(frozen=True)
class MCPServerSpec:
    """One entry of ``mcp_servers``: how to start a server over stdio."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None

    @classmethod
    def from_mapping(cls, name: str, raw: Mapping[str, Any]) -> MCPServerSpec:
        """Validate one ``mcp_servers`` entry; a bad one raises :class:`ToolBindingError`."""
        where = f"mcp_servers.{name} in harness.yaml"
        if not isinstance(raw, Mapping):
            raise ToolBindingError(f"{where} must be a mapping with command/args/env/cwd, got {raw!r}")
        command, args, env, cwd = raw.get("command"), raw.get("args") or [], raw.get("env"), raw.get("cwd")
        if not isinstance(command, str) or not command:
            raise ToolBindingError(f"{where} needs a non-empty string `command` (e.g. python)")
        if not isinstance(args, list | tuple):
            raise ToolBindingError(f"{where}: `args` must be a list of strings, got {args!r}")
        if env is not None and not isinstance(env, Mapping):
            raise ToolBindingError(f"{where}: `env` must be a mapping of names to values, got {env!r}")
        if cwd is not None and not isinstance(cwd, str | os.PathLike):
            raise ToolBindingError(f"{where}: `cwd` must be a path or null, got {cwd!r}")
        env_strs = {str(k): str(v) for k, v in env.items()} if env is not None else None
        if command in ("python", "python3"):  # the interpreter running HAT (its venv), not PATH's
            command = sys.executable
        return cls(name, command, tuple(str(a) for a in args), env_strs, os.fspath(cwd) if cwd else None)

    @property
    def command_line(self) -> str:
        return shlex.join([self.command, *self.args])


# --------------------------------------------------------------------------------------------
# Turning SDK results into MCPResult


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _block_text(block: Any) -> str:
    if getattr(block, "type", None) == "text":
        return str(block.text)
    resource_text = getattr(getattr(block, "resource", None), "text", None)
    if isinstance(resource_text, str):
        return resource_text
    return f"[{getattr(block, 'type', 'unknown')} content omitted]"


def _content_value(structured: Any, text: str) -> Any:
    if structured is None:
        return _parse_json(text)
    wrapped = isinstance(structured, dict) and structured.keys() == {"result"}
    if wrapped and _parse_json(text) == structured["result"]:
        return structured["result"]
    return structured


def _to_result(raw: Any) -> MCPResult:
    text = "\n".join(_block_text(block) for block in raw.content)
    if not text and raw.structured_content is not None:
        text = json.dumps(raw.structured_content, ensure_ascii=False)
    return MCPResult(_content_value(raw.structured_content, text), bool(raw.is_error), text)


def _tool_dict(tool: Any) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description or "", "inputSchema": tool.input_schema}


# --------------------------------------------------------------------------------------------
# Error messages


def _leaves(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside ``exc`` (anyio task groups nest them)."""
    subs = getattr(exc, "exceptions", None)
    if isinstance(subs, list | tuple) and subs:
        return [leaf for sub in subs for leaf in _leaves(sub)]
    return [exc]


def _is_connection_closed(exc: BaseException) -> bool:
    return getattr(exc, "code", None) == _CONNECTION_CLOSED and getattr(exc, "message", "") == "Connection closed"


def _reason(exc: BaseException) -> str:
    leaf = _leaves(exc)[0]
    if isinstance(leaf, FileNotFoundError):
        return "the command was not found (is it installed and on PATH?)"
    if isinstance(leaf, PermissionError):
        return "the command is not executable"
    if _is_connection_closed(leaf):
        return "the process exited or closed stdout before the MCP handshake finished"
    return f"{type(leaf).__name__}: {leaf}"


def _server_message(spec: MCPServerSpec, what: str, stderr_tail: str, advice: str) -> str:
    tail = "\n  stderr (last lines):\n    " + "\n    ".join(stderr_tail.splitlines()[-15:]) if stderr_tail else ""
    return f"MCP server {spec.name!r} ({spec.command_line}) {what}.{tail}\n  {advice}"


_START_ADVICE = (
    "Check that the command runs on its own and speaks MCP over stdio, and its entry under "
    "mcp_servers in harness.yaml (command, args, env, cwd)."
)
_DIED_ADVICE = "The pool starts it again on the next call; its stderr (if shown) or its own logs say why it stopped."


# --------------------------------------------------------------------------------------------
# Loop side: one connection per server


class _StderrTail(asyncio.Protocol):
    """Keeps the last few KiB a server writes to stderr (read from a pipe by the loop).

    End of file on that pipe is also the pool's cue that an idle server has exited, so the next
    call restarts it instead of failing on a dead session (``on_eof``).
    """

    def __init__(self, on_eof: Callable[[], None]) -> None:
        self._on_eof = on_eof
        self._buf = bytearray()
        self._eof = asyncio.Event()
        self._transport: asyncio.BaseTransport | None = None

    async def open(self) -> TextIO:
        """Start reading; returns the write end to hand to the server process as its stderr."""
        read_fd, write_fd = os.pipe()
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.connect_read_pipe(lambda: self, os.fdopen(read_fd, "rb"))
        return os.fdopen(write_fd, "w")

    def data_received(self, data: bytes) -> None:
        self._buf += data
        del self._buf[:-_STDERR_TAIL_BYTES]

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof.set()
        self._on_eof()

    async def text(self, wait_eof_s: float = 0.0) -> str:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._eof.wait(), wait_eof_s)
        return self._buf.decode(errors="replace").strip()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class _Connection:
    """One server process and its session, owned by a task of the pool's loop."""

    def __init__(self, spec: MCPServerSpec) -> None:
        self.spec = spec
        self.dead = False
        self._stderr = _StderrTail(on_eof=self.stop)
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # never "unretrieved"
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp-server-{spec.name}")

    async def client(self, start_timeout_s: float) -> Client:
        """The connected client, once the server has started (raises if it could not)."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), start_timeout_s)
        except asyncio.TimeoutError:
            self.stop()
            self.task.cancel()  # the SDK's shielded, bounded shutdown still stops the process
            tail = await self._stderr.text()
            what = f"did not finish the MCP handshake within {start_timeout_s:g}s"
            raise ToolBindingError(_server_message(self.spec, what, tail, _START_ADVICE)) from None

    def stop(self) -> None:
        self.dead = True
        self._stop.set()

    async def died(self, during: str) -> ToolBindingError:
        """Mark the connection dead and describe it, after its connection dropped."""
        self.stop()
        tail = await self._stderr.text(_STDERR_EOF_WAIT_S)
        return ToolBindingError(
            _server_message(self.spec, f"closed the connection during {during}", tail, _DIED_ADVICE)
        )

    async def _run(self) -> None:
        try:
            await self._serve()
        except Exception as exc:
            await self._fail(exc)
        finally:
            self.dead = True
            if not self._ready.done():
                self._ready.set_exception(ToolBindingError(f"MCP server {self.spec.name!r} was stopped"))
            self._stop.set()
            self._stderr.close()

    async def _serve(self) -> None:
        errlog = await self._stderr.open()
        async with contextlib.AsyncExitStack() as stack:
            try:
                client = await stack.enter_async_context(_new_client(self.spec, errlog))
            finally:
                errlog.close()  # the child has its own copy; ours would keep the pipe from EOF
            self._ready.set_result(client)
            await self._stop.wait()

    async def _fail(self, exc: Exception) -> None:
        if isinstance(exc, MissingDependencyError):
            self._ready.set_exception(exc)
            return
        if self._ready.done():  # failed while shutting down: the session had already served
            logger.debug("MCP server %r did not shut down cleanly: %r", self.spec.name, exc)
            return
        tail = await self._stderr.text(_STDERR_EOF_WAIT_S)
        message = _server_message(self.spec, f"failed to start: {_reason(exc)}", tail, _START_ADVICE)
        self._ready.set_exception(ToolBindingError(message))


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("mcp", "mcp", "MCP tool bindings") from exc


def _new_client(spec: MCPServerSpec, errlog: TextIO) -> Client:
    _require_mcp()
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=spec.command, args=list(spec.args), env=dict(spec.env) if spec.env else None, cwd=spec.cwd
    )
    return Client(stdio_client(params, errlog=errlog))


class _AsyncPool:
    """The pool's state and its async operations; used only from the loop thread."""

    def __init__(self, specs: Mapping[str, MCPServerSpec], start_timeout_s: float) -> None:
        self._specs = specs
        self._start_timeout_s = start_timeout_s
        self._live: dict[str, _Connection] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def _connection(self, server: str) -> tuple[_Connection, Client]:
        conn = self._live.get(server)
        if conn is None or conn.dead:
            conn = self._live[server] = _Connection(self._specs[server])
            self._tasks.add(conn.task)
            conn.task.add_done_callback(self._tasks.discard)
        return conn, await conn.client(self._start_timeout_s)

    async def list_tools(self, server: str, timeout_s: float) -> list[dict[str, Any]]:
        from mcp.shared.exceptions import MCPError

        conn, client = await self._connection(server)
        try:
            return await self._guarded(conn, "tools/list", timeout_s, self._all_tools(client))
        except MCPError as exc:
            what = f"refused tools/list (MCP error {exc.code}: {exc.message})"
            raise ToolBindingError(_server_message(conn.spec, what, "", _START_ADVICE)) from exc

    async def _all_tools(self, client: Client) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGE_CAP):
            page = await client.list_tools(cursor=cursor)
            tools.extend(_tool_dict(tool) for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def call_tool(self, server: str, tool: str, arguments: dict[str, Any], timeout_s: float) -> MCPResult:
        from mcp.shared.exceptions import MCPError

        conn, client = await self._connection(server)
        try:
            raw = await self._guarded(conn, f"tools/call {tool}", timeout_s, client.call_tool(tool, arguments))
        except MCPError as exc:  # a live server refused the request (unknown tool, bad params)
            return MCPResult(exc.message, True, f"MCP error {exc.code}: {exc.message}")
        return _to_result(raw)

    async def _guarded(self, conn: _Connection, what: str, timeout_s: float, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run one request under its timeout; a dropped connection becomes ToolBindingError."""
        try:
            return await asyncio.wait_for(coro, timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"MCP server {conn.spec.name!r}: {what} did not answer within {timeout_s:g}s") from None
        except Exception as exc:
            if _is_connection_closed(exc) or isinstance(exc, OSError):
                raise await conn.died(what) from exc
            raise

    async def aclose(self, timeout_s: float) -> None:
        for conn in self._live.values():
            conn.stop()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in pending:
            logger.warning("MCP server task %s did not stop within %gs; cancelling it", task.get_name(), timeout_s)
            task.cancel()


# --------------------------------------------------------------------------------------------
# Sync side


class _LoopThread:
    """An asyncio loop on a daemon thread, plus a bounded way to run coroutines on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._pending: set[cf.Future[Any]] = set()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self.loop.run_forever, name="hat-mcp-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("MCPServerPool's sync methods cannot be called from its own event loop")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        with self._lock:
            self._pending.add(future)
        try:
            if not cf.wait([future], timeout_s).done:
                future.cancel()
                raise TimeoutError(f"the MCP event loop did not answer within {timeout_s:g}s")
            return future.result()
        except cf.CancelledError:
            raise RuntimeError("the MCPServerPool was closed while this call was waiting") from None
        finally:
            with self._lock:
                self._pending.discard(future)

    def stop(self, join_s: float = 2.0) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(join_s)
        with self._lock:
            for future in self._pending:
                future.cancel()
        if not self.thread.is_alive():
            self.loop.close()


class MCPServerPool:
    """MCP servers declared by a harness, started on first use and called synchronously.

    ``servers`` is the ``mcp_servers`` mapping of ``harness.yaml``: ``name -> {command, args, env,
    cwd}``. Safe to share between threads. Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        servers: Mapping[str, Mapping[str, Any]],
        *,
        start_timeout_s: float = 30.0,
        close_timeout_s: float = 5.0,
    ) -> None:
        self._specs = {name: MCPServerSpec.from_mapping(name, raw) for name, raw in servers.items()}
        self._start_timeout_s = start_timeout_s
        self._close_timeout_s = close_timeout_s
        self._lock = threading.Lock()
        self._thread: _LoopThread | None = None
        self._core: _AsyncPool | None = None
        self._closed = False

    @property
    def servers(self) -> list[str]:
        """The declared server names."""
        return list(self._specs)

    def list_tools(self, server: str, *, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """The server's tools as ``{"name", "description", "inputSchema"}`` dicts."""
        core, thread = self._ready(server)
        return thread.run(core.list_tools(server, timeout_s), self._bound(timeout_s))

    def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any] | None = None, timeout_s: float = 30.0
    ) -> MCPResult:
        """Call ``tool`` on ``server``; ``TimeoutError`` after ``timeout_s``, see the module docstring."""
        core, thread = self._ready(server)
        return thread.run(core.call_tool(server, tool, dict(arguments or {}), timeout_s), self._bound(timeout_s))

    def close(self) -> None:
        """Stop every server and the loop thread; bounded by ``close_timeout_s`` (plus ~2 s)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread, core = self._thread, self._core
        if thread is None or core is None:
            return
        try:
            thread.run(core.aclose(self._close_timeout_s), self._close_timeout_s + _GRACE_S)
        except Exception as exc:  # closing must not raise on a half-broken pool
            logger.warning("closing the MCP servers failed: %r", exc)
        finally:
            thread.stop()

    def __enter__(self) -> MCPServerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _bound(self, timeout_s: float) -> float:
        return self._start_timeout_s + timeout_s + _GRACE_S

    def _ready(self, server: str) -> tuple[_AsyncPool, _LoopThread]:
        if server not in self._specs:
            known = ", ".join(self._specs) or "none declared"
            raise ToolBindingError(
                f"unknown MCP server {server!r} (mcp_servers in harness.yaml: {known}); "
                "declare it there or fix the mcp:server/tool binding"
            )
        with self._lock:
            if self._closed:
                raise RuntimeError("this MCPServerPool is closed; create a new one")
            if self._thread is None:
                _require_mcp()
                self._thread = _LoopThread()
                self._core = _AsyncPool(self._specs, self._start_timeout_s)
            assert self._core is not None
            return self._core, self._thread
