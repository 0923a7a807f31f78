"""The one interface every model backend implements, and the base class that implements most of it.

A :class:`Model` turns chat messages into text. The runtime speaks a text protocol (see
``hat.harness.protocol``) rather than a provider's native tool-calling API, because the harness,
not the provider, owns the output format, and HSA must be able to vary it.

Two calls, one result type:

- ``generate(messages, config, *, cache_key) -> Generation``: the text and its accounting (prompt,
  completion and cached tokens, latency, time to first token, finish reason).
- ``stream(...)`` yields the text in pieces (for TTS consumers) **and then gives the same
  Generation**: backends built on :class:`ModelBackend` return a :class:`Stream`, an iterator of
  ``str`` whose ``generation`` attribute is set once the iteration has ended, much like a
  generator's return value. The result travels with the call, so concurrent streams on one model
  each get their own (a ``last_generation`` attribute on the model, which this replaces, was
  shared by every caller).

Why a ``Stream`` object rather than a last item of another type: every consumer that only wants
text (``"".join(model.stream(...))``, wrappers that pass the iterator through) keeps working
unchanged, and the one that wants the accounting reads one typed attribute.

:class:`Model` stays a Protocol so anything with these two methods (a wrapper, a simulator policy)
is a model. :class:`ModelBackend` is the base class of HAT's backends and the easy way to write
one; it owns what every backend must do identically:

- **Stop strings** (:mod:`hat.models.stops`): a stop string ends the text and is not part of it;
  the base cuts every ``generate`` result and every stream the same way and reports
  ``finish_reason="stop"`` when it cut. A backend should still *stop generating* at a stop string
  where it can (it saves tokens); a stream is also closed as soon as a stop string is complete, so
  a backend that cannot stop natively stops anyway.
- **Defaults**: a backend implements :meth:`ModelBackend._generate` or
  :meth:`ModelBackend._stream` (or both). With only ``_generate``, ``stream`` generates and
  yields the text as word pieces; with only ``_stream``, ``generate`` drains a stream.

Sessions: ``generate`` and ``stream`` accept an optional ``cache_key``. Backends that can (the
transformers backend) keep the KV cache of the longest shared token prefix under that key, so the
rounds of one request - each a prefix-extension of the last - and requests sharing the harness's
static system prompt do not re-encode what was already encoded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from hat.errors import ModelError
from hat.models.stops import cut_stream_at_stop, truncate_at_stop

__all__ = [
    "Finish",
    "Generation",
    "GenerationConfig",
    "Message",
    "Model",
    "ModelBackend",
    "Stream",
    "cut_generation",
    "word_pieces",
]

Message = dict[str, str]

_WORD_PIECE = re.compile(r"\s*\S+|\s+$")


@dataclass(frozen=True)
class GenerationConfig:
    """Decoding settings. Greedy unless ``temperature > 0``; ``seed`` makes sampling repeatable."""

    max_new_tokens: int = 160
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Generation:
    """One model output. ``cached_tokens``: prompt tokens served from a reused KV cache.
    Times are seconds; ``ttft_s`` is time to first token where the backend can tell.
    ``draft_tokens`` / ``accepted_tokens``: with speculative decoding, the tokens the drafter
    proposed and how many of them the model accepted (both 0 without it)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    ttft_s: float | None = None
    finish_reason: str = "stop"
    draft_tokens: int = 0
    accepted_tokens: int = 0


Finish = Callable[[Generation], None]
"""How a backend's ``_stream`` hands over the finished :class:`Generation` (see :class:`ModelBackend`)."""


def word_pieces(text: str) -> list[str]:
    """Split ``text`` into pieces of leading whitespace + one word; ``"".join`` gives it back."""
    return _WORD_PIECE.findall(text)


def cut_generation(generation: Generation, stop: Sequence[str]) -> Generation:
    """``generation`` with its text cut before the first stop string (``finish_reason`` ``"stop"``
    when one was found); unchanged when none was."""
    text, hit = truncate_at_stop(generation.text, stop)
    return replace(generation, text=text, finish_reason="stop") if hit else generation


class Stream(Iterator[str]):
    """The text of one generation in pieces, then the :class:`Generation` itself.

    Iterate for the pieces (already cut at the first stop string, which may span pieces). Once
    the iteration has ended (exhausted, or stopped early with :meth:`close`), ``generation`` holds
    the backend's result: text cut at the stop string, token counts, cached tokens, timings; after
    an early close, what the backend produced until it stopped. It is ``None`` before that, and
    when the stream was closed before it started. A backend error is raised by the iteration.
    :meth:`result` drains what is left and returns it. Usable as a context manager (closes on exit).

    ``produce(finish)`` starts the backend's raw pieces; the backend calls ``finish`` once with
    the uncut Generation when production ends, also when closed early.
    """

    def __init__(self, produce: Callable[[Finish], Iterable[str]], stop: Sequence[str] = ()) -> None:
        self.generation: Generation | None = None
        self._stop = tuple(stop)
        self._pieces = cut_stream_at_stop(produce(self._finish), self._stop)

    def _finish(self, generation: Generation) -> None:
        self.generation = cut_generation(generation, self._stop)

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> str:
        return next(self._pieces)

    def close(self) -> None:
        """Stop the backend (at its next token) and release it."""
        self._pieces.close()

    def result(self) -> Generation:
        """Consume the pieces left and return the :class:`Generation`."""
        for _ in self:
            pass
        if self.generation is None:
            raise ModelError("the backend ended a stream without reporting its generation")
        return self.generation

    def __enter__(self) -> Stream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@runtime_checkable
class Model(Protocol):
    """A chat model. ``name`` is the spec string it was made from.

    ``stream`` yields text pieces as they are generated; a :class:`ModelBackend` returns a
    :class:`Stream`, which also gives the final :class:`Generation`. Other implementations may
    return any iterator of ``str`` (a consumer then has no accounting for the stream)."""

    name: str

    def generate(
        self,
        messages: Sequence[Message],
        config: GenerationConfig | None = None,
        *,
        cache_key: str | None = None,
    ) -> Generation: ...

    def stream(
        self,
        messages: Sequence[Message],
        config: GenerationConfig | None = None,
        *,
        cache_key: str | None = None,
    ) -> Iterator[str]: ...


class ModelBackend:
    """Base class of the model backends: the public ``generate``/``stream``, stop strings, defaults.

    A subclass sets ``name`` and implements at least one of two hooks; both get the resolved
    ``config`` and return or yield **uncut** text (the base cuts stop strings):

    - ``_generate(messages, config, cache_key) -> Generation``.
    - ``_stream(messages, config, cache_key, finish) -> Iterable[str]``: the raw pieces; call
      ``finish(generation)`` once when production ends - from a ``finally``, so that a stream
      closed early (by its consumer, or by the base at a stop string) still reports what was
      generated. Work done before the iterable is returned happens at ``stream()`` time; a
      generator function starts on the first ``next``.

    The other hook defaults to the one implemented (see the module docstring). Thread safety is
    the subclass's: the base keeps no state.
    """

    name: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls._generate is ModelBackend._generate and cls._stream is ModelBackend._stream:
            raise TypeError(f"{cls.__name__} must implement _generate or _stream (see hat.models.base.ModelBackend)")

    def generate(
        self,
        messages: Sequence[Message],
        config: GenerationConfig | None = None,
        *,
        cache_key: str | None = None,
    ) -> Generation:
        config = config or GenerationConfig()
        return cut_generation(self._generate(messages, config, cache_key), config.stop)

    def stream(
        self,
        messages: Sequence[Message],
        config: GenerationConfig | None = None,
        *,
        cache_key: str | None = None,
    ) -> Stream:
        config = config or GenerationConfig()
        return Stream(lambda finish: self._stream(messages, config, cache_key, finish), config.stop)

    def _generate(self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None) -> Generation:
        """Default: drain a stream (stopped at the first stop string)."""
        return Stream(lambda finish: self._stream(messages, config, cache_key, finish), config.stop).result()

    def _stream(
        self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None, finish: Finish
    ) -> Iterable[str]:
        """Default: generate now (so errors raise at ``stream()``), then yield the text as word pieces."""
        generation = self._generate(messages, config, cache_key)
        finish(generation)
        return word_pieces(generation.text)
