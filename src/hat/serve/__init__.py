"""Serving a HAT agent over HTTP: ``hat serve`` and ``hat bench latency``.

- :func:`create_app` (``hat.serve.app``): the FastAPI app - replies, streamed replies for TTS,
  hot reload, health, Prometheus metrics, bounded concurrency and deadlines;
- :class:`HarnessHolder` (``hat.serve.state``): versioned harness + agent pairs, leased per request;
- ``hat.serve.streaming``: how a synchronous agent's reply is streamed (speculative deltas,
  retractions, the invariant a consumer relies on);
- ``hat.serve.bench``: the deployment-replay latency benchmark (client side).

FastAPI and uvicorn come with the ``serve`` extra; importing this package without them raises
:class:`~hat.errors.MissingDependencyError` with the install hint.
"""

from __future__ import annotations

from hat.errors import MissingDependencyError

try:
    from hat.serve.app import create_app
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    if exc.name not in ("fastapi", "starlette", "pydantic"):
        raise
    raise MissingDependencyError(exc.name or "fastapi", "serve", "Serving a HAT agent") from exc
from hat.serve.state import HarnessHolder, HarnessVersion, ReloadRejected

__all__ = ["HarnessHolder", "HarnessVersion", "ReloadRejected", "create_app"]
