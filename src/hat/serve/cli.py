"""``hat serve``: run the agent server with uvicorn.

One process, one worker: the model lives in this process (a local model's weights are loaded
once), so concurrency comes from the app's worker threads (``--max-concurrency``) and the queue
(``--max-queue``), not from uvicorn workers. For more throughput run several servers behind a
load balancer, or point ``--model openai:...`` at an engine with parallel slots.

The reload endpoint is open when no admin token is set; that is fine on 127.0.0.1 (the default
host) and refused elsewhere unless ``--admin-token`` (or ``HAT_ADMIN_TOKEN``) is given or
``--insecure-open-admin`` says the operator means it. Treat the admin token as a code-execution
privilege: a reloaded harness may bind Python tools and ship a ``hooks.py``, which run in this
process.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from hat.errors import HatError, MissingDependencyError

__all__ = ["serve_command"]

err = Console(stderr=True)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _fail(message: str) -> typer.Exit:
    err.print(f"error: {message}", markup=False, soft_wrap=True, highlight=False)
    return typer.Exit(2)


def _load(model: str) -> object:
    import hat.models.llamacpp_backend  # noqa: F401 - registers llamacpp:...
    from hat.models import load_model

    with err.status(f"loading model {model} …"):
        return load_model(model)


def serve_command(
    harness: str = typer.Option("livestream", help="Harness folder or built-in name."),
    model: str = typer.Option(
        "smollm2-hat", help="Model spec: smollm2-hat | llamacpp:smollm2-hat | smollm2 | hf:… | openai:… | scripted:…"
    ),
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port."),
    max_concurrency: int = typer.Option(4, min=1, help="Requests running at once (worker threads)."),
    max_queue: int = typer.Option(16, min=0, help="Requests waiting for a worker; beyond that 429."),
    timeout: float = typer.Option(30.0, min=0.1, help="Per-request deadline in seconds (queue + agent); 504 after."),
    max_body_bytes: int = typer.Option(65536, min=1024, help="Largest request body; 413 beyond."),
    admin_token: str | None = typer.Option(
        None, envvar="HAT_ADMIN_TOKEN", help="Bearer token for POST /v1/harness/reload (env HAT_ADMIN_TOKEN)."
    ),
    insecure_open_admin: bool = typer.Option(False, help="Allow a non-loopback host without an admin token."),
    trace_out: Path | None = typer.Option(None, help="Append every trace to this JSONL file."),  # noqa: B008
    log_level: str = typer.Option("info", help="uvicorn log level."),
) -> None:
    """Serve the agent over HTTP: /v1/reply, /v1/reply/stream, /v1/harness/reload, /health, /metrics."""
    if host not in LOOPBACK and not admin_token and not insecure_open_admin:
        raise _fail(f"binding {host} without --admin-token would let anyone reload the harness; set a token")
    try:
        import uvicorn

        from hat.harness.sinks import JSONLSink
        from hat.serve.app import create_app
    except ImportError as exc:
        raise _fail(str(MissingDependencyError(exc.name or "fastapi", "serve", "hat serve"))) from exc
    try:
        app = create_app(
            harness,
            _load(model),  # type: ignore[arg-type]
            max_concurrency=max_concurrency,
            max_queue=max_queue,
            request_timeout_s=timeout,
            max_body_bytes=max_body_bytes,
            admin_token=admin_token,
            sinks=[JSONLSink(trace_out)] if trace_out else [],
        )
    except HatError as exc:
        raise _fail(str(exc)) from exc
    current = app.state.server.holder.current
    err.print(f"serving {current.harness.name} {current.harness.version} ({current.hash[:12]}) on http://{host}:{port}")
    uvicorn.run(app, host=host, port=port, log_level=log_level, workers=1, timeout_keep_alive=5)
