"""The tool registry: resolves bindings and runs calls with timeouts, turning every failure into
an observation.

Bindings: ``python:package.module:function`` (called in a worker thread; the function may take a
keyword-only ``context`` argument to see the request's context and per-request state) and ``mcp:server/tool``
(through :class:`~hat.harness.mcp_client.MCPServerPool`, the official ``mcp`` SDK).

Why exceptions never escape :meth:`ToolRegistry.call`: in a live room a broken backend must not
silence the host. An unknown tool, invalid arguments, an exception, a timeout - each becomes a
:class:`ToolResult` with a status and a message the model can act on (as smolagents does).

Why each tool has its own small pool (a *bulkhead*): threads cannot be killed, so a hung backend
keeps its worker busy until it returns. With one shared pool, one hung backend soon holds every
worker and starves every other tool. Here a tool holds at most ``max_concurrency`` workers
(``metadata.max_concurrency`` in its YAML, else the registry's default); calls beyond that wait
in the tool's own queue, and a call still waiting when its timeout expires also times out.

Why a timed-out call is *abandoned*, not retried here: its future is cancelled if it never started
(``outcome="not_started"``); if it is running it is left to finish, its result is discarded and its
writes to ``context.state`` are dropped (each call works on a copy that is committed only when the
call returns in time), so ``outcome="unknown"``. Whether it may be run again is the runtime's
decision, and only an ``idempotent`` tool ever is.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from hat.errors import ToolBindingError
from hat.harness.state import Harness, ToolSpec
from hat.harness.static_check import check_python_target, is_denied_module, local_module_path
from hat.harness.types import Outcome, ToolStatus

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "canonical_arguments",
    "check_binding",
    "import_harness_module",
    "strict_schema",
]

DEFAULT_MAX_CONCURRENCY = 8
"""Workers per tool unless its ``metadata.max_concurrency`` or the registry says otherwise."""


@dataclass
class ToolContext:
    """Passed to Python tools that accept ``context``: the request's ``context`` mapping (a tool may
    update it, e.g. what is on display; the trace records the result), per-request scratch
    ``state``, and ``resources`` the caller supplies per request (a database client; a simulator
    world)."""

    request_id: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult:
    """``status``: ok | error | timeout | unknown_tool | invalid_args | blocked.

    ``outcome`` is set for a call abandoned at its timeout: ``not_started`` (cancelled while it
    waited for a worker; it never ran) or ``unknown`` (it was running and may still take effect)."""

    status: ToolStatus
    result: Any = None
    error: str = ""
    latency_ms: float = 0.0
    outcome: Outcome = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def observation(self) -> Any:
        return self.result if self.ok else {"error": self.error}


_LOCAL_LOCK = threading.RLock()


def _local_module_key(top: str, path: Path) -> str:
    """The ``sys.modules`` name of a harness folder's module: private to its file's location and
    content, so two folders' ``tools_impl.py`` never meet, and an edited file (a reloaded harness)
    is loaded afresh instead of answered from the cache. A package is keyed by its ``__init__.py``."""
    digest = hashlib.sha256(str(path.resolve()).encode("utf-8") + b"\0" + path.read_bytes()).hexdigest()[:16]
    return f"hat_harness_{digest}_{top}"


def _load_local_module(key: str, path: Path) -> ModuleType:
    """Run the module at ``path`` as ``key`` (registered first, as an import does, so dataclasses and
    its own submodules find it); a failure in its code is an ImportError naming the file."""
    package = [str(path.parent)] if path.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(key, path, submodule_search_locations=package)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(key, None)
        if isinstance(exc, Exception):
            raise ImportError(f"{path} failed to load: {type(exc).__name__}: {exc}") from exc
        raise
    return module


def import_harness_module(name: str, root: str | os.PathLike[str] | None = None) -> ModuleType:
    """Import module ``name`` for the harness in folder ``root``; this runs the module's code.

    A top-level name that is a file or package in the folder
    (:func:`~hat.harness.static_check.local_module_path`, the same rule validation uses) is loaded
    from there by file location, no ``PYTHONPATH`` needed, under a name private to the folder
    (:func:`_local_module_key`); ``sys.modules`` never holds it under its plain name. Any other
    name is an ordinary import."""
    path = local_module_path(name, root)
    if path is None:
        return importlib.import_module(name)
    top, _, rest = name.partition(".")
    with _LOCAL_LOCK:  # two registries built at once load the file once
        key = _local_module_key(top, path)
        module = sys.modules.get(key) or _load_local_module(key, path)
        return importlib.import_module(f"{key}.{rest}") if rest else module


def _import_python(binding: str, root: str | os.PathLike[str] | None = None) -> Callable[..., Any]:
    """Import a ``python:module:function`` binding; this runs the module's code, so it happens only
    when a harness is put to work (validation reads bindings statically, :func:`check_binding`).
    ``root``: the harness folder, whose own modules win (:func:`import_harness_module`).
    The standard library is refused here too, including a stdlib function re-exported elsewhere."""
    target = binding[len("python:") :]
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ToolBindingError(f"binding {binding!r} must look like python:package.module:function")
    if is_denied_module(module_name) or attr.startswith("_"):
        raise ToolBindingError(f"binding {binding!r} may not point into the standard library or at a private name")
    try:
        fn = getattr(import_harness_module(module_name, root), attr)
    except (ImportError, AttributeError) as exc:
        raise ToolBindingError(f"binding {binding!r} cannot be imported: {exc}") from exc
    if not callable(fn):
        raise ToolBindingError(f"binding {binding!r} is not callable")
    if is_denied_module(str(getattr(fn, "__module__", None) or "builtins")):
        raise ToolBindingError(f"binding {binding!r} is a standard-library function ({fn.__module__}); bind your own")
    return fn  # type: ignore[no-any-return]


def check_binding(
    binding: str, mcp_servers: Mapping[str, Any], *, root: str | None = None, trusted: Sequence[str] = ()
) -> str | None:
    """The problem with a binding, or None. Imports nothing and starts no MCP server: a python
    binding is located and read statically under the policy of :mod:`hat.harness.static_check`
    (``root`` is the harness folder, ``trusted`` its ``trusted_modules``)."""
    if binding.startswith("python:"):
        what = f"binding {binding!r}"
        return check_python_target(binding[len("python:") :], what=what, root=root, trusted=trusted)
    if binding.startswith("mcp:"):
        server, _, tool = binding[len("mcp:") :].partition("/")
        if not server or not tool:
            return f"binding {binding!r} must look like mcp:server/tool"
        if server not in mcp_servers:
            known = ", ".join(mcp_servers) or "none declared"
            return f"binding {binding!r} names MCP server {server!r}, not declared under mcp_servers ({known})"
        return None
    return f"binding {binding!r} has an unknown kind; use python:module:function or mcp:server/tool"


def strict_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The parameter schema as calls are checked against it: an object schema that lists its
    properties and says nothing about others gets ``additionalProperties: false`` (OpenAI's
    strict function calling does the same), so an argument the tool does not declare is an
    ``invalid_args`` observation for the model instead of reaching the implementation."""
    schema = dict(parameters)
    if schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    return schema


def canonical_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Map the harness's (possibly renamed) parameter names back to the binding's own names.

    HSA renames parameters in the model-visible schema and records ``metadata.param_map``
    (canonical → current); the implementation keeps its canonical keyword names."""
    param_map = spec.metadata.get("param_map") or {}
    inverse = {current: canonical for canonical, current in param_map.items()}
    return {inverse.get(k, k): v for k, v in arguments.items()}


def _accepts_context(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "context" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class _Abandoned(Exception):
    """The caller stopped waiting for a call; ``started`` says whether it had begun running."""

    def __init__(self, started: bool) -> None:
        super().__init__("abandoned")
        self.started = started


class ToolRegistry:
    """The tools of one harness version, ready to call.

    ``max_concurrency``: workers per tool (its bulkhead) unless the tool's ``metadata`` sets
    ``max_concurrency``. ``extra``: Python functions to serve as tools besides the harness's
    (``@tool``-decorated or plain typed ones, :mod:`hat.harness.pytools`), called directly, never
    imported by name; :attr:`harness` then includes their specs, and is the harness to give the
    agent: ``Agent(registry.harness, model, tools=registry)``. MCP servers with a relative ``cwd``
    start in the harness folder."""

    def __init__(
        self,
        harness: Harness,
        *,
        mcp_pool: Any = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        extra: Sequence[Callable[..., Any]] = (),
    ) -> None:
        from hat.harness import pytools  # local: pytools imports this module

        harness, given = pytools.extend(harness, extra) if extra else (harness, {})
        self.harness = harness
        self.specs: dict[str, ToolSpec] = {t.name: t for t in harness.tools}
        self._python: dict[str, Callable[..., Any]] = {}
        for spec in harness.tools:
            if spec.name in given:
                self._python[spec.name] = given[spec.name]
            elif spec.binding.startswith("python:"):
                self._python[spec.name] = pytools.runner(_import_python(spec.binding, harness.root))
        # inspect.signature is slow; whether a binding takes ``context`` is fixed per harness version
        self._takes_context = {name: _accepts_context(fn) for name, fn in self._python.items()}
        self._mcp_pool = mcp_pool
        self._owns_pool = False
        self._validators = {
            n: pytools.validator_for(s, strict_schema(s.parameters), self._python.get(n)) for n, s in self.specs.items()
        }
        self._mcp_servers = _rooted(harness.mcp_servers, harness.root)
        self.concurrency = {n: _concurrency(s, max_concurrency) for n, s in self.specs.items()}
        self._bulkheads: dict[str, cf.ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def names(self) -> list[str]:
        return list(self.specs)

    def is_idempotent(self, name: str) -> bool:
        spec = self.specs.get(name)
        return bool(spec is not None and spec.idempotent)

    def _pool(self) -> Any:
        if self._mcp_pool is None:
            from hat.harness.mcp_client import MCPServerPool

            self._mcp_pool = MCPServerPool(self._mcp_servers)
            self._owns_pool = True
        return self._mcp_pool

    def _bulkhead(self, name: str) -> cf.ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("the tool registry is closed")
            pool = self._bulkheads.get(name)
            if pool is None:
                pool = cf.ThreadPoolExecutor(max_workers=self.concurrency[name], thread_name_prefix=f"hat-tool-{name}")
                self._bulkheads[name] = pool
            return pool

    def _check_args(self, name: str, arguments: dict[str, Any]) -> str:
        errors = sorted(self._validators[name].iter_errors(arguments), key=lambda e: list(e.path))
        if not errors:
            return ""
        where = "/".join(str(p) for p in errors[0].path)
        return f"invalid arguments for {name}{' at ' + where if where else ''}: {errors[0].message}"

    def _target(self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext, timeout: float) -> Any:
        """What a worker runs for one call (a zero-argument callable)."""
        arguments = canonical_arguments(spec, arguments)
        if spec.binding.startswith("mcp:"):
            server, _, tool = spec.binding[len("mcp:") :].partition("/")

            def call_mcp() -> Any:
                res = self._pool().call_tool(server, tool, arguments, timeout_s=timeout)
                if res.is_error:
                    raise RuntimeError(res.text or "the MCP tool reported an error")
                return res.content

            return call_mcp
        fn = self._python[spec.name]
        kwargs = {**arguments, "context": context} if self._takes_context[spec.name] else dict(arguments)
        return lambda: fn(**kwargs)

    def _invoke(self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext, timeout: float) -> Any:
        """Run one call in the tool's bulkhead; on timeout abandon it (raises :class:`_Abandoned`)."""
        future = self._bulkhead(spec.name).submit(self._target(spec, arguments, context, timeout))
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            if future.done():  # the tool itself raised TimeoutError: it has finished, as a failure
                raise
            raise _Abandoned(started=not future.cancel()) from None

    def call(self, name: str, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolResult:
        """Run one tool call. Never raises for tool-side problems."""
        start = time.perf_counter()
        elapsed = lambda: (time.perf_counter() - start) * 1000  # noqa: E731
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(self.specs) or "none"
            return ToolResult("unknown_tool", error=f"there is no tool named {name!r}; available tools: {known}")
        problem = self._check_args(name, arguments)
        if problem:
            return ToolResult("invalid_args", error=problem, latency_ms=elapsed())
        timeout = spec.timeout_s or self.harness.limits.tool_timeout_s
        context = context or ToolContext()
        scratch = replace(context, state=_copy_state(context.state))
        try:
            result = self._invoke(spec, arguments, scratch, timeout)
        except _Abandoned as exc:
            return _abandoned(name, timeout, exc.started, elapsed())
        except TimeoutError as exc:
            _commit(context, scratch)
            return ToolResult("timeout", error=f"{name} timed out: {exc}", latency_ms=elapsed())
        except Exception as exc:  # a tool's own failure is an observation, not a crash
            _commit(context, scratch)
            return ToolResult("error", error=f"{name} failed: {type(exc).__name__}: {exc}", latency_ms=elapsed())
        _commit(context, scratch)
        return ToolResult("ok", result=result, latency_ms=elapsed())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools, self._bulkheads = list(self._bulkheads.values()), {}
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        if self._owns_pool and self._mcp_pool is not None:
            self._mcp_pool.close()


def _rooted(servers: Mapping[str, Any], root: str | None) -> dict[str, Any]:
    """``mcp_servers`` with each relative ``cwd`` made relative to the harness folder (``root``), so
    a server script shipped in the folder starts wherever the harness is run from."""
    out = {}
    for name, raw in servers.items():
        cwd = raw.get("cwd") if isinstance(raw, Mapping) else None
        if root and isinstance(cwd, str) and not os.path.isabs(cwd):
            raw = {**raw, "cwd": os.path.join(root, cwd)}
        out[name] = raw
    return out


def _concurrency(spec: ToolSpec, default: int) -> int:
    value = spec.metadata.get("max_concurrency", default)
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return max(1, default)


def _copy_state(state: dict[str, Any]) -> dict[str, Any]:
    """A private copy of the request's scratch state for one call (deep where possible, so an
    abandoned call cannot append to a shared list either)."""
    try:
        return copy.deepcopy(state)
    except Exception:  # something uncopyable in the scratch space: fall back to a shallow copy
        return dict(state)


def _commit(context: ToolContext, scratch: ToolContext) -> None:
    """A call that returned in time: its writes to the scratch state take effect."""
    if scratch.state != context.state:
        context.state.clear()
        context.state.update(scratch.state)


def _abandoned(name: str, timeout: float, started: bool, latency_ms: float) -> ToolResult:
    if started:
        error = (
            f"{name} did not answer within {timeout:g}s; its outcome is unknown (it may still take effect), "
            "so do not assume it succeeded or failed"
        )
        return ToolResult("timeout", error=error, latency_ms=latency_ms, outcome="unknown")
    error = f"{name} did not answer within {timeout:g}s (it was still queued and never ran)"
    return ToolResult("timeout", error=error, latency_ms=latency_ms, outcome="not_started")
