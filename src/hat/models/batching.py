"""Step many synchronous callers' model calls together: a :class:`Model` that batches across threads.

The agent runtime is synchronous: ``Agent.respond`` calls ``model.generate`` once per round and
waits. To decode many episodes' rounds together without touching the runtime, ``hat eval`` runs
each episode on its own worker thread, all sharing one :class:`BatchingModel`. A worker's
``generate`` queues its request and blocks; one scheduler thread waits until **every live worker
is blocked in ``generate``** (or has retired), then runs all waiting requests as one call of the
inner backend's ``generate_batch`` and hands each worker its :class:`Generation`.

Why wait for every worker rather than a timer or a size: the batch is then as full as it can be
(a worker busy with tools or judges is worth waiting for: it is about to ask), and it is the same
batch on every run. Which requests are waiting at each step depends only on the cases, not on
thread timing, and requests are ordered by their tag (the case index), so a batched run is
repeatable. Per-conversation KV caches are kept under ``<cache_key>#<tag>``, so each episode's
rounds reuse its own cache (the inner model is asked to hold one session per worker).

**Continuous batching.** When the inner model offers a step engine (``inner.continuous()``, e.g.
a batch-invariant :class:`~hat.models.TransformersModel`), the scheduler does not wait for every
worker: it adds each request as soon as it arrives and a decode slot is free, runs one decode step
at a time, and hands each request back the step it finishes, so an episode's next round joins the
running decode instead of waiting for the longest reply of the round. That is only allowed because
such an engine's results do not depend on which rows decode together; a run is then repeatable
although batches depend on thread timing.

Liveness: a worker that finishes (or raises) calls :meth:`BatchingModel.retire`, which the
scheduler counts, so it never waits for a thread that will not ask again. If the batched call
fails, each request is retried alone through the inner ``generate``, so one bad conversation fails
only its own episode, as it would unbatched. Calls from threads that are not workers (no tag) go
straight to the inner model.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from hat.errors import ModelError
from hat.models.base import Generation, GenerationConfig, Message, Model, ModelBackend, Stream
from hat.models.invariant import engines_for

__all__ = ["BatchingModel", "map_batched", "supports_batching"]


def supports_batching(model: Model) -> bool:
    """Whether ``model`` has ``generate_batch(conversations, config, *, cache_keys=…)``."""
    method = getattr(model, "generate_batch", None)
    if not callable(method):
        return False
    try:
        return "cache_keys" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def _takes_seeds(model: Any) -> bool:
    """Whether ``model.generate_batch`` takes per-row ``seeds`` (so sampled rows can share a batch)."""
    try:
        return "seeds" in inspect.signature(model.generate_batch).parameters
    except (TypeError, ValueError):
        return False


def _batch_key(config: GenerationConfig, per_row_seeds: bool) -> GenerationConfig:
    """Requests whose configs differ only in their sampling seed share a batch where the model takes
    per-row seeds (a greedy config's seed changes nothing)."""
    return replace(config, seed=None) if per_row_seeds or config.temperature <= 0 else config


@dataclass(eq=False)
class _Request:
    tag: int
    messages: list[Message]
    config: GenerationConfig
    cache_key: str | None
    result: Generation | None = None
    error: BaseException | None = None
    done: bool = False


class BatchingModel(ModelBackend):
    """Wraps a model with ``generate_batch``; ``workers`` threads will call :meth:`generate`.

    ``engines``: for a model with continuous batching, how many decode engines run at once, each on
    its own thread (default: enough to give every worker a slot, at most one per usable core).
    Each worker thread tags its calls with :meth:`tagged` (the case index) and calls :meth:`retire`
    when it has no more work. Use as a context manager, or call :meth:`close`."""

    def __init__(self, inner: Any, *, workers: int, engines: int | None = None) -> None:
        if not supports_batching(inner):
            raise TypeError(f"{getattr(inner, 'name', inner)!r} has no generate_batch(..., cache_keys=...)")
        self.inner = inner
        self._seeded = _takes_seeds(inner)  # per-row seeds: sampled requests share a batch
        self.name: str = inner.name
        self.batches: list[int] = []  # the size of every batch run, in order (for reports and tests)
        self._live = workers
        self._pending: list[_Request] = []
        self._closed = False
        self._cond = threading.Condition()
        self._local = threading.local()
        reserve = getattr(inner, "reserve_sessions", None)
        if callable(reserve):
            reserve(2 * workers)  # one per case in flight, plus as many finished ones to share prefixes
        continuous = getattr(inner, "continuous", None)
        first = continuous() if callable(continuous) else None
        self.engines: list[Any] = []
        if continuous is not None and first is not None:
            count = engines or engines_for(workers, first.config)
            self.engines = [first, *(continuous() for _ in range(count - 1))]
            self._threads = [
                threading.Thread(target=self._schedule_continuous, args=(e,), name=f"hat-engine-{i}", daemon=True)
                for i, e in enumerate(self.engines)
            ]
        else:
            self._threads = [threading.Thread(target=self._schedule, name=f"hat-batch-{self.name}", daemon=True)]
        for thread in self._threads:
            thread.start()

    def __enter__(self) -> BatchingModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- worker side ---------------------------------------------------------------------------
    @contextmanager
    def tagged(self, tag: int) -> Iterator[None]:
        """Calls of this thread inside the block belong to conversation ``tag`` (orders the batch)."""
        self._local.tag = tag
        try:
            yield
        finally:
            self._local.tag = None

    def retire(self) -> None:
        """This worker will make no more calls."""
        with self._cond:
            self._live -= 1
            self._cond.notify_all()

    def _generate(self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None) -> Generation:
        tag = getattr(self._local, "tag", None)
        if tag is None:
            return self.inner.generate(messages, config, cache_key=cache_key)  # type: ignore[no-any-return]
        request = _Request(tag, list(messages), config, cache_key)
        with self._cond:
            if self._closed:
                raise ModelError(f"{self.name}: the batching scheduler is closed")
            self._pending.append(request)
            self._cond.notify_all()
            self._cond.wait_for(lambda: request.done)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def stream(
        self,
        messages: Sequence[Message],
        config: GenerationConfig | None = None,
        *,
        cache_key: str | None = None,
    ) -> Stream:
        """Not batched: streams straight from the inner model."""
        pieces = self.inner.stream(messages, config, cache_key=cache_key)
        return pieces if isinstance(pieces, Stream) else Stream(lambda finish: pieces)

    def close(self, *, wait: bool = True) -> None:
        """Stop the scheduler after the batch in flight (waiting for it unless ``wait`` is false);
        requests still waiting fail with :class:`ModelError`."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if wait:
            for thread in self._threads:
                if thread is not threading.current_thread():
                    thread.join()

    # -- scheduler side ------------------------------------------------------------------------
    def _ready(self) -> bool:
        return self._closed or (bool(self._pending) and len(self._pending) >= self._live)

    def _schedule(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(self._ready)
                batch = sorted(self._pending, key=lambda r: r.tag)
                self._pending.clear()
                if self._closed:
                    for request in batch:
                        request.error = ModelError(f"{self.name}: the batching scheduler is closed")
                        request.done = True
                    self._cond.notify_all()
                    return
            self._run(batch)
            with self._cond:
                for request in batch:
                    request.done = True
                self._cond.notify_all()

    def _schedule_continuous(self, engine: Any) -> None:
        active: dict[Any, _Request] = {}
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or bool(self._pending) or bool(active))
                if self._closed:
                    for request in [*self._pending, *active.values()]:
                        request.error = ModelError(f"{self.name}: the batching scheduler is closed")
                        request.done = True
                    self._pending.clear()
                    self._cond.notify_all()
                    return
                arrived = sorted(self._pending, key=lambda r: r.tag)[: engine.free]
                for request in arrived:
                    self._pending.remove(request)
                if arrived:
                    self.batches.append(len(arrived))
            for request in arrived:
                key = None if request.cache_key is None else f"{request.cache_key}#{request.tag}"
                try:
                    active[engine.add(request.messages, request.config, key)] = request
                except Exception:  # not a greedy config: this request runs alone
                    self._run_alone([request], request.config, [key])
                    with self._cond:
                        request.done = True
                        self._cond.notify_all()
            finished = engine.step()
            with self._cond:
                for job, outcome in finished:
                    request = active.pop(job)
                    if isinstance(outcome, BaseException):
                        request.error = outcome
                    else:
                        request.result = outcome
                    request.done = True
                self._cond.notify_all()

    def _run(self, batch: list[_Request]) -> None:
        """Fill every request's result or error; never raises. Requests batch by config (by config
        but the seed, with each row's own seed, where the inner model takes ``seeds``)."""
        seeded = self._seeded
        groups: dict[GenerationConfig, list[_Request]] = {}
        for request in batch:
            groups.setdefault(_batch_key(request.config, seeded), []).append(request)
        for config, requests in groups.items():
            self.batches.append(len(requests))
            keys = [None if r.cache_key is None else f"{r.cache_key}#{r.tag}" for r in requests]
            extra = {"seeds": [r.config.seed for r in requests]} if seeded else {}
            try:
                results = self.inner.generate_batch([r.messages for r in requests], config, cache_keys=keys, **extra)
            except Exception:
                self._run_alone(requests, None, keys)
                continue
            for request, result in zip(requests, results, strict=True):
                request.result = result

    def _run_alone(self, requests: list[_Request], config: GenerationConfig | None, keys: list[str | None]) -> None:
        """Each request through the inner ``generate`` (``config``: all requests', else each its own)."""
        for request, key in zip(requests, keys, strict=True):
            try:
                request.result = self.inner.generate(request.messages, config or request.config, cache_key=key)
            except Exception as exc:
                request.error = exc


T = TypeVar("T")
R = TypeVar("R")


def map_batched(model: Model, items: Sequence[T], fn: Callable[[T, Model], R]) -> list[R]:
    """``[fn(item, shared) for item in items]``, each call on a worker thread of its own, all
    sharing one :class:`BatchingModel` around ``model`` so that their model calls decode together
    (``fn`` runs a synchronous agent loop; tools and judges run on its thread). Results come back
    in item order; the first exception (in item order) is raised after every worker stopped. A
    model without ``generate_batch``, or a single item, runs in this thread, one item after another."""
    if len(items) < 2 or not supports_batching(model):
        return [fn(item, model) for item in items]
    results: list[Any] = [None] * len(items)
    errors: list[tuple[int, BaseException]] = []
    with BatchingModel(model, workers=len(items)) as batcher:

        def work(index: int) -> None:
            try:
                with batcher.tagged(index):
                    results[index] = fn(items[index], batcher)
            except BaseException as exc:  # re-raised in the calling thread
                errors.append((index, exc))
            finally:
                batcher.retire()

        threads = [
            threading.Thread(target=work, args=(i,), name=f"hat-map-{i}", daemon=True) for i in range(len(items))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise min(errors, key=lambda e: e[0])[1]
    return results
