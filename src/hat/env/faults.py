"""Fault injection for the simulated tool backends: timeouts, errors, empty results, slow answers.

Why draws are keyed by ``(spec.seed, episode_id, function_id, call_index)`` and not by a shared
random stream: an episode must replay byte for byte whatever else ran before it (other episodes,
other threads, a model that calls tools in another order). So every draw seeds its own
:class:`random.Random` from a string; Python seeds ``Random`` from a ``str`` through SHA-512, so the
draw is the same in every process (unlike the salted built-in ``hash()``). ``call_index`` counts the
calls of one function within one episode, so a retry is a new call with a new draw and can succeed;
a different call order of *other* functions does not change what a function draws.

How the kinds reach the model (through :class:`~hat.harness.tools.ToolRegistry`, which turns
exceptions into observations):

- ``timeout``: raises the built-in :class:`TimeoutError` at once (the registry reports status
  ``timeout``; the simulator does not actually wait for the harness's tool timeout);
- ``error``: raises :class:`RuntimeError` with a backend-like message (status ``error``);
- ``empty``: the tool answers ``ok`` with an empty result of the right shape (see
  :func:`empty_result`) - the failure a model must notice by reading the observation;
- ``slow``: sleeps 20-80 ms, then answers normally.

Every injected fault is appended to :attr:`FaultInjector.log` so the simulator can put it into the
trace (``trace.context["faults"]``) and judges can tell a model's mistake from a backend's.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from hat.env.episode import FaultSpec

__all__ = ["FAULT_KINDS", "FaultInjector", "empty_result"]

FAULT_KINDS = ("timeout", "error", "empty", "slow")
SLOW_MS = (20, 80)

_ERRORS = (
    "upstream 503 Service Unavailable",
    "connection reset by peer",
    "inventory service returned HTTP 500",
    "database replica lagging; read rejected",
    "rate limit exceeded (429)",
)
_EMPTY_NOTE = "the backend returned no data for this request"


def empty_result(function_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An empty answer shaped like the function's real one: a search answers ``results: []``, a
    lookup answers ``{}`` plus a note. The note is in the observation so that a model *can* notice
    the answer is empty and retry, as a careful host would."""
    if function_id == "search_faq":
        return {"query": arguments.get("query"), "results": [], "note": _EMPTY_NOTE}
    return {"note": _EMPTY_NOTE}


class FaultInjector:
    """Decides, per tool call of one episode, whether and which fault to inject.

    :meth:`draw` is pure (same inputs, same answer). :meth:`before_call` is what a tool backend
    calls: it counts the call, draws, records the fault in :attr:`log` and acts on it (raise, sleep,
    or return ``"empty"`` for the caller to answer emptily). Thread-safe.
    """

    def __init__(self, spec: FaultSpec, episode_id: str) -> None:
        unknown = [k for k in spec.kinds if k not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kind(s) {unknown}; use some of {', '.join(FAULT_KINDS)}")
        if not 0.0 <= spec.rate <= 1.0:
            raise ValueError(f"fault rate {spec.rate} is not a probability; use a value in [0, 1]")
        self.spec = spec
        self.episode_id = episode_id
        self.log: list[dict[str, Any]] = []
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def _rng(self, function_id: str, call_index: int, salt: str = "draw") -> random.Random:
        return random.Random(f"hat-faults:{salt}:{self.spec.seed}:{self.episode_id}:{function_id}:{call_index}")

    def draw(self, function_id: str, call_index: int) -> str | None:
        """The fault kind for this call, or ``None`` for a normal answer."""
        if self.spec.rate <= 0 or not self.spec.kinds:
            return None
        rng = self._rng(function_id, call_index)
        if rng.random() >= self.spec.rate:
            return None
        return rng.choice(self.spec.kinds)

    def next_index(self, function_id: str) -> int:
        """Count one more call of ``function_id``; returns its 0-based index within the episode."""
        with self._lock:
            index = self._calls.get(function_id, 0)
            self._calls[function_id] = index + 1
            return index

    def before_call(self, function_id: str) -> str | None:
        """Run the fault for the next call of ``function_id``: raises for ``timeout`` / ``error``,
        sleeps for ``slow`` (then returns ``None``: answer normally), returns ``"empty"`` for an
        empty answer, ``None`` when no fault is drawn."""
        index = self.next_index(function_id)
        kind = self.draw(function_id, index)
        if kind is None:
            return None
        rng = self._rng(function_id, index, "detail")
        entry: dict[str, Any] = {"function_id": function_id, "call_index": index, "kind": kind}
        if kind == "slow":
            entry["delay_ms"] = rng.randint(*SLOW_MS)
        elif kind == "error":
            entry["message"] = rng.choice(_ERRORS)
        with self._lock:
            self.log.append(entry)
        return _act(entry)


def _act(entry: dict[str, Any]) -> str | None:
    kind = entry["kind"]
    if kind == "timeout":
        raise TimeoutError(f"{entry['function_id']}: simulated timeout (backend did not answer)")
    if kind == "error":
        raise RuntimeError(f"{entry['function_id']} backend error: {entry['message']}")
    if kind == "slow":
        time.sleep(entry["delay_ms"] / 1000)
        return None
    return "empty"
