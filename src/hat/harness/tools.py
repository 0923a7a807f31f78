"""The tool registry: resolves bindings and runs calls with timeouts, turning every failure into
an observation.

Bindings: ``python:package.module:function`` (called in a worker thread; the function may take a
keyword-only ``context`` argument to see the room and per-request state) and ``mcp:server/tool``
(through :class:`~hat.harness.mcp_client.MCPServerPool`, the official ``mcp`` SDK).

Why exceptions never escape :meth:`ToolRegistry.call`: in a live room a broken backend must not
silence the host. An unknown tool, invalid arguments, an exception, a timeout - each becomes a
:class:`ToolResult` with a status and a message the model can act on (as smolagents does).
A hung Python tool keeps its worker thread busy (threads cannot be killed), so the pool is
bounded and a call waiting for a free worker also times out.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from hat.errors import ToolBindingError
from hat.harness.state import Harness, ToolSpec

__all__ = ["ToolContext", "ToolRegistry", "ToolResult", "canonical_arguments", "check_binding"]


@dataclass
class ToolContext:
    """Passed to Python tools that accept ``context``: the room state, per-request scratch, and
    ``resources`` the caller supplies per request (the simulator puts its world's ``catalog`` and
    a ``faults`` injector there; production code may put a DB client)."""

    request_id: str = ""
    room: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)

    @property
    def catalog(self) -> Any:
        return self.resources.get("catalog")

    @property
    def faults(self) -> Any:
        return self.resources.get("faults")


@dataclass(frozen=True)
class ToolResult:
    """``status``: ok | error | timeout | unknown_tool | invalid_args | blocked."""

    status: str
    result: Any = None
    error: str = ""
    latency_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def observation(self) -> Any:
        return self.result if self.ok else {"error": self.error}


def _import_python(binding: str) -> Callable[..., Any]:
    target = binding[len("python:") :]
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ToolBindingError(f"binding {binding!r} must look like python:package.module:function")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ToolBindingError(f"binding {binding!r} cannot be imported: {exc}") from exc
    if not callable(fn):
        raise ToolBindingError(f"binding {binding!r} is not callable")
    return fn  # type: ignore[no-any-return]


def check_binding(binding: str, mcp_servers: Mapping[str, Any]) -> str | None:
    """The problem with a binding, or None. Does not start MCP servers."""
    if binding.startswith("python:"):
        try:
            _import_python(binding)
        except ToolBindingError as exc:
            return str(exc)
        return None
    if binding.startswith("mcp:"):
        server, _, tool = binding[len("mcp:") :].partition("/")
        if not server or not tool:
            return f"binding {binding!r} must look like mcp:server/tool"
        if server not in mcp_servers:
            known = ", ".join(mcp_servers) or "none declared"
            return f"binding {binding!r} names MCP server {server!r}, not declared under mcp_servers ({known})"
        return None
    return f"binding {binding!r} has an unknown kind; use python:module:function or mcp:server/tool"


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


class ToolRegistry:
    """The tools of one harness version, ready to call."""

    def __init__(self, harness: Harness, *, mcp_pool: Any = None, max_workers: int = 16) -> None:
        self.harness = harness
        self.specs: dict[str, ToolSpec] = {t.name: t for t in harness.tools}
        self._python: dict[str, Callable[..., Any]] = {}
        for spec in harness.tools:
            if spec.binding.startswith("python:"):
                self._python[spec.name] = _import_python(spec.binding)
        # inspect.signature is slow; whether a binding takes ``context`` is fixed per harness version
        self._takes_context = {name: _accepts_context(fn) for name, fn in self._python.items()}
        self._mcp_pool = mcp_pool
        self._owns_pool = False
        self._validators = {n: Draft202012Validator(dict(s.parameters)) for n, s in self.specs.items()}
        self._executor = cf.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="hat-tool")

    @property
    def names(self) -> list[str]:
        return list(self.specs)

    def _pool(self) -> Any:
        if self._mcp_pool is None:
            from hat.harness.mcp_client import MCPServerPool

            self._mcp_pool = MCPServerPool(self.harness.mcp_servers)
            self._owns_pool = True
        return self._mcp_pool

    def _check_args(self, name: str, arguments: dict[str, Any]) -> str:
        errors = sorted(self._validators[name].iter_errors(arguments), key=lambda e: list(e.path))
        if not errors:
            return ""
        where = "/".join(str(p) for p in errors[0].path)
        return f"invalid arguments for {name}{' at ' + where if where else ''}: {errors[0].message}"

    def _invoke(self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext, timeout: float) -> Any:
        arguments = canonical_arguments(spec, arguments)
        if spec.binding.startswith("mcp:"):
            server, _, tool = spec.binding[len("mcp:") :].partition("/")
            res = self._pool().call_tool(server, tool, arguments, timeout_s=timeout)
            if res.is_error:
                raise RuntimeError(res.text or "the MCP tool reported an error")
            return res.content
        fn = self._python[spec.name]
        kwargs = {**arguments, "context": context} if self._takes_context[spec.name] else dict(arguments)
        future = self._executor.submit(fn, **kwargs)
        return future.result(timeout=timeout)

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
        try:
            result = self._invoke(spec, arguments, context or ToolContext(), timeout)
        except (cf.TimeoutError, TimeoutError):
            return ToolResult("timeout", error=f"{name} did not answer within {timeout:g}s", latency_ms=elapsed())
        except Exception as exc:  # a tool's own failure is an observation, not a crash
            return ToolResult("error", error=f"{name} failed: {type(exc).__name__}: {exc}", latency_ms=elapsed())
        return ToolResult("ok", result=result, latency_ms=elapsed())

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._owns_pool and self._mcp_pool is not None:
            self._mcp_pool.close()
