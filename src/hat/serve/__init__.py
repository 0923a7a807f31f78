"""Serving a HAT agent over HTTP: ``hat serve`` and ``hat bench latency``.

- :func:`create_app` (``hat.serve.app``): the FastAPI app - replies, streamed replies for TTS,
  hot reload, health, Prometheus metrics, bounded concurrency and deadlines;
- :class:`HarnessHolder` (``hat.serve.state``): versioned harness + agent pairs, leased per request;
- ``hat.serve.streaming``: how a synchronous agent's reply is streamed (speculative deltas,
  retractions, the invariant a consumer relies on);
- ``hat.serve.bench``: the deployment-replay latency benchmark (client side, httpx only);
- ``hat.serve.cli``: the ``hat serve`` command.

Names are resolved lazily (PEP 562) so that ``hat --help`` and ``hat bench`` do not import FastAPI;
without the ``serve`` extra, touching :func:`create_app` raises
:class:`~hat.errors.MissingDependencyError` with the install hint.
"""

from __future__ import annotations

from typing import Any

from hat.errors import MissingDependencyError

__all__ = ["HarnessHolder", "HarnessVersion", "ReloadRejected", "create_app"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'hat.serve' has no attribute {name!r}")
    try:
        from hat.serve import app, state
    except ImportError as exc:
        if exc.name not in ("fastapi", "starlette", "pydantic", "uvicorn"):
            raise
        raise MissingDependencyError(exc.name or "fastapi", "serve", "Serving a HAT agent") from exc
    return app.create_app if name == "create_app" else getattr(state, name)
