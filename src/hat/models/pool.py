"""Several copies of one local model serving requests side by side: :class:`ModelPool`.

A llama.cpp context decodes one sequence at a time, so one :class:`~hat.models.llamacpp_backend.LlamaCppModel`
serves concurrent requests one generation after another: at C = 4 each request waits for three
others. A pool of N instances (``llamacpp:smollm2-hat?instances=2&threads=1``) runs N generations at
once, each on its own context and threads; the weights are memory-mapped from one file, so the
page cache holds them once.

Design decisions:

- **Checkout per generation, not per request.** A member is taken for one ``generate``/``stream``
  call and given back when it ends (also when a stream is closed early or the backend raises), so
  a request's rounds may land on different members and no request holds a member while its tools
  run.
- **Prefix affinity.** Every member keeps the KV cache of what it last decoded. When several are
  free, the pool gives the call to the one that can reuse the longest prefix of the new prompt
  (``reusable_prefix(messages)``, which llama.cpp members implement), so the next round of a
  request goes back to the member that holds its earlier rounds; ties go to the member idle the
  longest. Members without ``reusable_prefix`` are picked by idle time alone.
- **Waiting.** When every member is busy, callers wait in arrival order on a condition variable;
  the server's admission control (``hat serve --max-concurrency``, which defaults to the pool's
  size) keeps that wait short.
- **Accounting.** Each call's :class:`~hat.models.base.Generation` is the member's own (cached
  tokens, drafts); ``served`` counts calls per member.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hat.errors import ModelSpecError
from hat.models.base import Finish, GenerationConfig, Message, ModelBackend

__all__ = ["ModelPool"]

_FORWARDED = frozenset({"path", "speculative", "count_tokens", "tokenizer", "device", "model"})


class ModelPool(ModelBackend):
    """``members`` (at least one :class:`ModelBackend`, usually identical) behind one model interface."""

    def __init__(self, members: Sequence[ModelBackend], *, name: str | None = None) -> None:
        if not members:
            raise ModelSpecError("a model pool needs at least one instance")
        self.members = list(members)
        self.name = name or self.members[0].name
        self._cond = threading.Condition()
        self._free = [True] * len(self.members)
        self._idle_since = [0.0] * len(self.members)
        self._waiting: list[object] = []  # tickets, first come first served
        self.served = [0] * len(self.members)

    @classmethod
    def build(cls, make: Callable[[], ModelBackend], instances: int, *, name: str | None = None) -> ModelPool:
        """``instances`` members from ``make()``; those already built are closed if one fails."""
        members: list[ModelBackend] = []
        try:
            for _ in range(instances):
                members.append(make())
        except BaseException:
            _close_all(members)
            raise
        return cls(members, name=name)

    @property
    def instances(self) -> int:
        return len(self.members)

    def __getattr__(self, attr: str) -> Any:
        # what callers read off one model (the weights' file for the bandwidth bound, the device for
        # serving defaults, the tokenizer's count) comes from the first member; nothing else is
        # forwarded, so no caller can reach a member around the checkout
        if attr in _FORWARDED:
            return getattr(self.members[0], attr)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    def close(self) -> None:
        _close_all(self.members)

    # -- checkout ---------------------------------------------------------------------------------
    def _pick(self, messages: Sequence[Message]) -> int:
        """The free member to use (call with the condition held and at least one member free)."""
        free = [i for i, f in enumerate(self._free) if f]
        if len(free) == 1:
            return free[0]

        def score(i: int) -> tuple[int, float]:
            reusable = getattr(self.members[i], "reusable_prefix", None)
            try:
                shared = int(reusable(messages)) if callable(reusable) else 0
            except Exception:  # routing is a hint; the generation itself reports a bad prompt
                shared = 0
            return shared, -self._idle_since[i]

        return max(free, key=score)

    def _acquire(self, messages: Sequence[Message]) -> int:
        ticket = object()
        with self._cond:
            self._waiting.append(ticket)
            try:
                while not (any(self._free) and self._waiting[0] is ticket):
                    self._cond.wait()
            finally:
                self._waiting.remove(ticket)
            index = self._pick(messages)
            self._free[index] = False
            self.served[index] += 1
            self._cond.notify_all()  # the next in line may find another member free
            return index

    def _release(self, index: int) -> None:
        with self._cond:
            self._free[index] = True
            self._idle_since[index] = time.monotonic()
            self._cond.notify_all()

    # -- generation ---------------------------------------------------------------------------------
    def _stream(
        self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None, finish: Finish
    ) -> Iterable[str]:
        index = self._acquire(messages)
        try:
            # the member's raw (uncut) pieces; closing this generator closes the member's stream,
            # whose own ``finally`` reports the generation through ``finish``
            yield from self.members[index]._stream(messages, config, cache_key, finish)
        finally:
            self._release(index)


def _close_all(members: Iterable[ModelBackend]) -> None:
    """Close each member that can be closed (a backend without ``close`` holds nothing to free)."""
    for member in members:
        close = getattr(member, "close", None)
        if callable(close):
            close()
