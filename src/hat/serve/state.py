"""The versioned harness holder behind hot reload.

A :class:`HarnessVersion` pairs one loaded :class:`~hat.harness.state.Harness` with the
:class:`~hat.harness.runtime.Agent` built for it (and knows the version's answer when that agent
raises: :meth:`HarnessVersion.failed`). :class:`HarnessHolder` keeps the current pair
and swaps it atomically on :meth:`HarnessHolder.reload`.

Why leases instead of a plain attribute read: a request must finish on the version it started
with (its prompt, tools and hooks must agree with each other), and the old agent owns resources
(a tool thread pool, MCP server processes) that must be closed once nobody uses it - but not
before. So a request takes a *lease* on the current pair when it starts running
(:meth:`HarnessHolder.lease`), a reload only swaps which pair new leases get, and a replaced
pair is closed when its last lease is returned. A reload never waits for in-flight requests.

Why validate before loading: ``validate_harness`` collects every problem with file and line, so
a rejected reload (:class:`ReloadRejected`) tells the operator everything to fix at once, and the
running version keeps serving untouched. Anything else that fails while building the new agent
(a tool binding that will not import, a broken ``hooks.py``) is rejected the same way: a reload
can fail, the server cannot.

Why allowed roots: loading a harness runs its code (Python tool bindings, ``hooks.py``, MCP server
commands), so a reload may only name a folder under one of the holder's ``roots`` (default: the
served harness's parent folder). Paths are resolved with symlinks followed before the check, and
every way a path can be unusable - missing, outside the roots, not a harness folder - raises the
same :class:`ReloadNotAllowed` with the same message, so the reload endpoint cannot be used to
probe the server's file system. Problems of an allowed harness name files relative to it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hat.errors import HarnessError, HarnessValidationError, HatError, Problem
from hat.harness.loader import load_harness, resolve_harness_path, validate_harness
from hat.harness.runtime import Agent, Request, Response
from hat.harness.state import Harness
from hat.harness.trace import Trace

__all__ = ["HarnessHolder", "HarnessVersion", "ReloadNotAllowed", "ReloadRejected"]

AgentFactory = Callable[[Harness], Agent]
log = logging.getLogger("hat.serve")


class ReloadRejected(HarnessError):
    """A reload was refused; ``problems`` says why (file and line where known)."""

    def __init__(self, path: str, problems: list[Problem]) -> None:
        self.path = path
        self.problems = list(problems)
        lines = "; ".join(str(p) for p in self.problems)
        super().__init__(f"harness {path!r} was not loaded, the running version keeps serving: {lines}")


class ReloadNotAllowed(ReloadRejected):
    """The reload path is not a harness folder under an allowed root. Deliberately one message for
    a missing path, a path outside the roots and a folder that is not a harness."""

    MESSAGE = (
        "no loadable harness at that path under the server's harness roots; give a harness folder "
        "under a --harness-root (absolute, or relative to a root)"
    )

    def __init__(self) -> None:
        self.path, self.problems = "", []
        HarnessError.__init__(self, self.MESSAGE)


@dataclass(frozen=True)
class HarnessVersion:
    """One loaded harness version and the agent that serves it. ``path``: the real folder (server
    side only); ``shown``: the same relative to its harness root, what API clients see."""

    harness: Harness
    agent: Agent
    path: str
    hash: str
    generation: int
    loaded_at: float
    shown: str = ""

    def ref(self) -> dict[str, Any]:
        return {
            "name": self.harness.name,
            "version": self.harness.version,
            "hash": self.hash,
            "generation": self.generation,
        }

    def failed(self, request: Request, exc: Exception) -> Response:
        """The harness's fallback reply with ``status="error"`` for a request the agent raised on -
        what the runtime answers when the model fails. The cause goes to the trace the sinks
        receive (server side), not into the reply."""
        harness, agent = self.harness, self.agent
        payload = {harness.output.reply_field: harness.output.fallback_reply}
        trace = Trace(
            request_id=request.request_id,
            harness_name=harness.name,
            harness_hash=self.hash,
            model=getattr(agent.model, "name", type(agent.model).__name__),
            comments=request.turns,
            system_prompt="",
            block_hashes={},
            tools_visible=(),
            skills_available=tuple(s.name for s in harness.skills),
            reply=harness.output.fallback_reply,
            reply_payload=payload,
            status="error",
            context={
                "request": dict(request.context),
                "status_reason": f"the agent failed: {type(exc).__name__}: {exc}",
            },
            started_at=time.time(),
        )
        for sink in agent.sinks:
            try:
                sink.emit(trace)
            except Exception:  # a broken sink must not lose the reply
                log.exception("sink %s failed for request %s", type(sink).__name__, request.request_id)
        return Response(harness.output.fallback_reply, payload, trace)

    def info(self, in_flight: int = 0) -> dict[str, Any]:
        iso = datetime.fromtimestamp(self.loaded_at, tz=timezone.utc).isoformat()
        return {
            **self.ref(),
            "path": self.shown,
            "loaded_at": self.loaded_at,
            "loaded_at_iso": iso,
            "in_flight": in_flight,
        }


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def _relative(problem: Problem, folder: Path) -> Problem:
    """``problem`` with the folder's absolute path taken out of its file name and message."""
    file = Path(problem.file)
    if file.is_absolute():
        file = file.relative_to(folder) if file.is_relative_to(folder) else Path(file.name)
    message = problem.message.replace(f"{folder}{os.sep}", "").replace(str(folder), folder.name)
    return replace(problem, file=str(file), message=message)


def _load(folder: Path, shown: str) -> Harness:
    """Validate and load ``folder``; every failure becomes :class:`ReloadRejected` (files relative)."""
    problems = validate_harness(folder)
    if problems:
        raise ReloadRejected(shown, [_relative(p, folder) for p in problems])
    try:
        return load_harness(folder)
    except HarnessValidationError as exc:  # the folder changed between validate and load
        raise ReloadRejected(shown, [_relative(p, folder) for p in exc.problems]) from exc
    except HatError as exc:
        raise ReloadRejected(shown, [_relative(Problem(str(folder), str(exc)), folder)]) from exc


class HarnessHolder:
    """The current :class:`HarnessVersion`, leased per request and swapped by :meth:`reload`.

    ``build_agent(harness)`` makes the agent for a version (the app passes one that shares the
    model and the context provider). ``roots``: the folders a reload may load from (default: the
    parent of ``ref``'s folder); ``ref`` itself is the operator's choice and is not checked.
    Thread-safe; :meth:`reload` calls are serialised.
    """

    def __init__(self, ref: str | Path, build_agent: AgentFactory, roots: Sequence[str | Path] = ()) -> None:
        self._build_agent = build_agent
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self._leases: dict[int, int] = {}
        self._retired: dict[int, HarnessVersion] = {}
        self._generation = 0
        try:
            folder = _real(resolve_harness_path(ref))
        except HarnessError as exc:
            raise ReloadRejected(str(ref), [Problem(str(ref), str(exc))]) from exc
        self.roots = tuple(_real(r) for r in roots) or (folder.parent,)
        self._current = self._next_generation(self._make(folder))

    def resolve(self, path: str) -> Path:
        """The harness folder ``path`` names under one of the roots, or :class:`ReloadNotAllowed`."""
        given = Path(path)
        candidates = [given] if given.is_absolute() else [root / given for root in self.roots]
        for candidate in candidates:
            try:
                folder = _real(candidate)
                inside = any(folder.is_relative_to(root) for root in self.roots)
                if inside and (folder / "harness.yaml").is_file():
                    return folder
            except (OSError, ValueError):  # unreadable, a NUL byte, ...: the same answer as missing
                continue
        raise ReloadNotAllowed()

    def shown_path(self, path: str | Path) -> str:
        """``path`` as clients see it: relative to the root it lies in (server paths stay private)."""
        folder = Path(path)
        for root in self.roots:
            if folder.is_relative_to(root) and folder != root:
                return str(folder.relative_to(root))
        return folder.name

    @property
    def current(self) -> HarnessVersion:
        return self._current

    def in_flight(self, version: HarnessVersion | None = None) -> int:
        """Leases held on ``version`` (default: the current one)."""
        version = version or self._current
        with self._lock:
            return self._leases.get(version.generation, 0)

    @property
    def retired_in_flight(self) -> int:
        """Leases still held on replaced versions (requests that started before a reload)."""
        with self._lock:
            return sum(self._leases.get(g, 0) for g in self._retired)

    def _make(self, folder: Path) -> HarnessVersion:
        shown = self.shown_path(folder)
        harness = _load(folder, shown)
        try:
            agent = self._build_agent(harness)
        except Exception as exc:  # a bad binding or hooks.py must not take the server down
            problem = Problem(str(folder), f"cannot build an agent: {type(exc).__name__}: {exc}")
            raise ReloadRejected(shown, [_relative(problem, folder)]) from exc
        return HarnessVersion(harness, agent, str(folder), agent.harness_hash, 0, time.time(), shown)

    def _next_generation(self, version: HarnessVersion) -> HarnessVersion:
        self._generation += 1  # under self._lock (or in __init__)
        return replace(version, generation=self._generation)

    @contextmanager
    def lease(self) -> Iterator[HarnessVersion]:
        """Hold the current version for the duration of one request."""
        with self._lock:
            version = self._current
            self._leases[version.generation] = self._leases.get(version.generation, 0) + 1
        try:
            yield version
        finally:
            self._release(version)

    def _release(self, version: HarnessVersion) -> None:
        with self._lock:
            left = self._leases[version.generation] - 1
            self._leases[version.generation] = left
            closing = left == 0 and self._retired.pop(version.generation, None) is not None
            if left == 0:
                del self._leases[version.generation]
        if closing:
            version.agent.close()

    def reload(self, path: str | None = None) -> tuple[HarnessVersion, HarnessVersion, bool]:
        """Load ``path`` (default: the current folder again) and make it current.

        Returns ``(previous, current, changed)``; ``changed`` is false when the new folder hashes
        the same as the running version, which then stays (with its warm caches). Raises
        :class:`ReloadNotAllowed` for a path outside the roots, :class:`ReloadRejected` for a
        harness that does not load, and leaves the running version in place on any failure.
        """
        with self._reload_lock:
            previous = self._current
            folder = self.resolve(path) if path else Path(previous.path)
            candidate = self._make(folder)
            if candidate.hash == previous.hash and candidate.path == previous.path:
                candidate.agent.close()
                return previous, previous, False
            with self._lock:
                candidate = self._next_generation(candidate)
                self._current = candidate
                busy = self._leases.get(previous.generation, 0) > 0
                if busy:
                    self._retired[previous.generation] = previous
            if not busy:
                previous.agent.close()
            return previous, candidate, True

    def close(self) -> None:
        """Close every agent (current and retired); for server shutdown."""
        with self._lock:
            versions = [self._current, *self._retired.values()]
            self._retired.clear()
        for version in versions:
            version.agent.close()
