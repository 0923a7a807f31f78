"""The versioned harness holder behind hot reload.

A :class:`HarnessVersion` pairs one loaded :class:`~hat.harness.state.Harness` with the
:class:`~hat.harness.runtime.Agent` built for it. :class:`HarnessHolder` keeps the current pair
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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hat.errors import HarnessError, HarnessValidationError, HatError, Problem
from hat.harness.loader import load_harness, resolve_harness_path, validate_harness
from hat.harness.runtime import Agent
from hat.harness.state import Harness

__all__ = ["HarnessHolder", "HarnessVersion", "ReloadRejected"]

AgentFactory = Callable[[Harness], Agent]


class ReloadRejected(HarnessError):
    """A reload was refused; ``problems`` says why (file and line where known)."""

    def __init__(self, path: str, problems: list[Problem]) -> None:
        self.path = path
        self.problems = list(problems)
        lines = "; ".join(str(p) for p in self.problems)
        super().__init__(f"harness {path!r} was not loaded, the running version keeps serving: {lines}")


@dataclass(frozen=True)
class HarnessVersion:
    """One loaded harness version and the agent that serves it."""

    harness: Harness
    agent: Agent
    path: str
    hash: str
    generation: int
    loaded_at: float

    def ref(self) -> dict[str, Any]:
        return {
            "name": self.harness.name,
            "version": self.harness.version,
            "hash": self.hash,
            "generation": self.generation,
        }

    def info(self, in_flight: int = 0) -> dict[str, Any]:
        iso = datetime.fromtimestamp(self.loaded_at, tz=timezone.utc).isoformat()
        return {
            **self.ref(),
            "path": self.path,
            "loaded_at": self.loaded_at,
            "loaded_at_iso": iso,
            "in_flight": in_flight,
        }


def _load(path: str) -> tuple[str, Harness]:
    """Resolve, validate and load ``path``; every failure becomes :class:`ReloadRejected`."""
    try:
        folder = resolve_harness_path(path)
    except HarnessError as exc:
        raise ReloadRejected(path, [Problem(path, str(exc))]) from exc
    problems = validate_harness(folder)
    if problems:
        raise ReloadRejected(str(folder), problems)
    try:
        return str(folder), load_harness(folder)
    except HarnessValidationError as exc:  # the folder changed between validate and load
        raise ReloadRejected(str(folder), exc.problems) from exc
    except HatError as exc:
        raise ReloadRejected(str(folder), [Problem(str(folder), str(exc))]) from exc


class HarnessHolder:
    """The current :class:`HarnessVersion`, leased per request and swapped by :meth:`reload`.

    ``build_agent(harness)`` makes the agent for a version (the app passes one that shares the
    model and the context provider). Thread-safe; :meth:`reload` calls are serialised.
    """

    def __init__(self, ref: str | Path, build_agent: AgentFactory) -> None:
        self._build_agent = build_agent
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self._leases: dict[int, int] = {}
        self._retired: dict[int, HarnessVersion] = {}
        self._generation = 0
        self._current = self._next_generation(self._make(str(ref)))

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

    def _make(self, path: str) -> HarnessVersion:
        folder, harness = _load(path)
        try:
            agent = self._build_agent(harness)
        except Exception as exc:  # a bad binding or hooks.py must not take the server down
            raise ReloadRejected(
                folder, [Problem(folder, f"cannot build an agent: {type(exc).__name__}: {exc}")]
            ) from exc
        return HarnessVersion(harness, agent, folder, agent.harness_hash, 0, time.time())

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
        :class:`ReloadRejected` and leaves the running version in place on any failure.
        """
        with self._reload_lock:
            previous = self._current
            candidate = self._make(path or previous.path)
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
