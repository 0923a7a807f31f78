"""The one interface every model backend implements.

A :class:`Model` turns chat messages into text. The runtime speaks a text protocol (see
``hat.harness.protocol``) rather than a provider's native tool-calling API, because the harness,
not the provider, owns the output format, and HSA must be able to vary it.

Sessions: :meth:`Model.generate` accepts an optional ``cache_key``. Backends that can (the
transformers backend) keep the KV cache of the longest shared token prefix under that key, so the
rounds of one request - each a prefix-extension of the last - and requests sharing the harness's
static system prompt do not re-encode what was already encoded.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Generation", "GenerationConfig", "Message", "Model"]

Message = dict[str, str]


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
    Times are seconds; ``ttft_s`` is time to first token where the backend can tell."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    ttft_s: float | None = None
    finish_reason: str = "stop"


@runtime_checkable
class Model(Protocol):
    """A chat model. ``name`` is the spec string it was made from."""

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
    ) -> Iterator[str]:
        """Yield text pieces as they are generated (for TTS consumers). Backends without native
        streaming may yield the whole text once."""
        ...
