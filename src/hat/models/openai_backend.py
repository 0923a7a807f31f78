"""A model behind any OpenAI-compatible ``/v1/chat/completions`` endpoint.

vLLM, SGLang, llama.cpp's server and hosted APIs all speak this dialect, so one small httpx
client covers the large-model and many-GPU cases. Design choices:

- The runtime's text protocol (``<tool_call>`` / ``<reply>`` blocks) is the contract, not the
  provider's native tool calling, so ``tool`` messages are sent as ``user`` messages and the
  request never carries ``tools``; any server that can chat can serve a harness.
- ``base_url`` may be given with or without the ``/v1`` suffix (``http://host:8000`` and
  ``http://host:8000/v1`` mean the same); a URL already ending in a version segment is kept.
- Token counts come from the server's ``usage``; ``cached_tokens`` from
  ``usage.prompt_tokens_details.cached_tokens`` where the server reports prefix-cache hits.
  ``cache_key`` is accepted for interface parity and not sent: these servers cache prefixes
  on their own.
- Streams ask for ``stream_options.include_usage``, so the server's last event carries the token
  counts and the :class:`~hat.models.base.Stream` reports them like ``generate`` does (zeros from a
  server that sends no usage). Stop strings are sent to the server, which stops there; the base
  class cuts them again in case it does not.
- Every transport or protocol failure becomes a :class:`ModelError` that says what to check.
  Non-streaming ``generate`` cannot see the first token, so its ``ttft_s`` is ``None``; a stream's
  is the time to its first text.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from hat.errors import ModelError
from hat.models.base import Finish, Generation, GenerationConfig, Message, ModelBackend

__all__ = ["OpenAICompatibleModel", "chat_completions_url"]

_VERSION_SUFFIX = re.compile(r"/v\d+[a-z0-9]*$")


def chat_completions_url(base_url: str) -> str:
    """The chat-completions URL for a server root, a ``/v1`` root, or the endpoint itself."""
    base = base_url.strip().rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if not _VERSION_SUFFIX.search(base):
        base += "/v1"
    return base + "/chat/completions"


class OpenAICompatibleModel(ModelBackend):
    """Chat completions over HTTP. ``api_key`` defaults to ``$OPENAI_API_KEY`` (may be unset)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        name: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.url = chat_completions_url(base_url)
        self.timeout_s = timeout_s
        self.name = name or f"openai:{base_url}#{model}"
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers, transport=transport)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def _generate(self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None) -> Generation:
        start = time.perf_counter()
        body = self._post(self._payload(messages, config, stream=False))
        return _parse_completion(body, time.perf_counter() - start)

    def _stream(
        self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None, finish: Finish
    ) -> Iterator[str]:
        start = time.perf_counter()
        first: float | None = None
        parts: list[str] = []
        usage: dict[str, Any] = {}
        reason = "stop"
        try:
            for event in self._events(self._payload(messages, config, stream=True)):
                usage = event.get("usage") or usage
                choice = _first_choice(event)
                reason = str(choice.get("finish_reason") or reason)
                text = str((choice.get("delta") or {}).get("content") or "")
                if text:
                    first = first or time.perf_counter()
                    parts.append(text)
                    yield text
        finally:  # also when closed early: report what arrived
            ttft = None if first is None else first - start
            finish(_generation("".join(parts), usage, time.perf_counter() - start, reason, ttft))

    def _payload(self, messages: Sequence[Message], config: GenerationConfig, *, stream: bool) -> dict:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [_to_wire(m) for m in messages],
            "max_tokens": config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
            "stream": stream,
        }
        if stream:
            payload["stream_options"] = {"include_usage": True}
        if config.seed is not None:
            payload["seed"] = config.seed
        if config.stop:
            payload["stop"] = list(config.stop)
        return payload

    def _post(self, payload: dict) -> dict:
        try:
            response = self._client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        _raise_for_status(response, self.url)
        try:
            body = response.json()
        except ValueError as exc:
            raise ModelError(f"{self.url} did not return JSON: {response.text[:200]!r}") from exc
        if not isinstance(body, dict):
            raise ModelError(f"{self.url} returned JSON that is not an object: {body!r:.200}")
        return body

    def _events(self, payload: dict) -> Iterator[dict[str, Any]]:
        try:
            with self._client.stream("POST", self.url, json=payload) as response:
                if response.status_code >= 400:
                    response.read()
                _raise_for_status(response, self.url)
                for line in response.iter_lines():
                    event = _sse_event(line, self.url)
                    if event is None:
                        return
                    yield event
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc

    def _transport_error(self, exc: httpx.HTTPError) -> ModelError:
        if isinstance(exc, httpx.TimeoutException):
            return ModelError(
                f"{self.url} did not answer within {self.timeout_s:g} s ({type(exc).__name__}); "
                "check the server is not overloaded, or raise timeout_s"
            )
        return ModelError(
            f"cannot reach {self.url} ({type(exc).__name__}: {exc}); check the server is running "
            "and that the base URL in the spec openai:<base_url>#<model> is right"
        )


def _to_wire(message: Message) -> dict[str, str]:
    role = message.get("role", "user")
    return {"role": "user" if role == "tool" else role, "content": message.get("content", "")}


def _raise_for_status(response: httpx.Response, url: str) -> None:
    if response.status_code < 400:
        return
    hint = {
        401: "check OPENAI_API_KEY (or the api_key argument)",
        403: "check the API key's permissions",
        404: "check the base URL and that the server serves this model name",
        429: "the server is rate limiting; slow down or retry later",
    }.get(response.status_code, "check the server's log")
    raise ModelError(f"{url} answered HTTP {response.status_code}: {response.text[:300]!r}; {hint}")


def _parse_completion(body: dict, latency_s: float) -> Generation:
    try:
        choice = body["choices"][0]
        raw = choice["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelError(f"unexpected chat-completions response (no choices[0].message): {body!r:.300}") from exc
    return _generation(raw, body.get("usage") or {}, latency_s, str(choice.get("finish_reason") or "stop"), None)


def _generation(
    text: str, usage: dict[str, Any], latency_s: float, finish_reason: str, ttft_s: float | None
) -> Generation:
    """A Generation with the server's token counts (zeros where its ``usage`` has none)."""
    details = usage.get("prompt_tokens_details") or {}
    return Generation(
        text=text,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
        latency_s=latency_s,
        ttft_s=ttft_s,
        finish_reason=finish_reason,
    )


def _first_choice(event: dict[str, Any]) -> dict[str, Any]:
    choices = event.get("choices") or [{}]
    return choices[0] if isinstance(choices, list) and isinstance(choices[0], dict) else {}


def _sse_event(line: str, url: str) -> dict[str, Any] | None:
    """The JSON event of one SSE line: ``{}`` for lines without one, ``None`` at ``[DONE]``."""
    if not line.startswith("data:"):
        return {}
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ModelError(f"{url} sent a malformed stream event: {data[:200]!r}") from exc
    if not isinstance(event, dict):
        return {}
    if event.get("error"):
        raise ModelError(f"{url} reported an error mid-stream: {event['error']!r:.300}")
    return event
