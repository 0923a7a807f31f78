"""``hat serve``: run the agent server with uvicorn.

One process, one worker: the model lives in this process (a local model's weights are loaded
once), so concurrency comes from the app's worker threads (``--max-concurrency``) and the queue
(``--max-queue``), not from uvicorn workers. For more throughput run several servers behind a
load balancer, or point ``--model openai:...`` at an engine with parallel slots.

Trust model (why the options below exist): a harness is code - a reloaded harness may bind
Python tools, ship a ``hooks.py`` and start MCP server commands, all in this process - so the
admin routes are a code-execution privilege and are never open. The admin token is
``--admin-token`` (or ``HAT_ADMIN_TOKEN``); without one a fresh token is generated at every start,
written to ``--admin-token-file`` (mode 0600, folder 0700) and printed once. A reload may only
load folders under a ``--harness-root`` (default: the served harness's parent folder). The
``Host`` header must name this server - the loopback names for a loopback bind, the bound address
for another one, plus every ``--allowed-host`` - so a web page cannot reach a loopback server
through DNS rebinding; a wildcard bind (``0.0.0.0``) needs ``--allowed-host`` (``'*'`` accepts any).

Defaults follow the model (:func:`serve_defaults`), and the startup line states them: a model whose
weights live in this process generates one request at a time (the backend holds one lock), and on a
CPU one reply takes 10-100 s (README, measured on 2 cores), so it gets ``--max-concurrency 1`` and a
120 s deadline - 4 workers and 30 s would only turn queued requests into 504s. A remote engine
(``openai:``) or a test double keeps 4 workers and 30 s.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import typer
from rich.console import Console

from hat.errors import HatError, MissingDependencyError

__all__ = ["default_token_file", "serve_command", "serve_defaults", "write_private"]

LOCAL_MODELS = ("smollm2", "smollm2-hat", "hf", "llamacpp")
LOCAL_CPU_DEADLINE_S = 120.0

err = Console(stderr=True)


def _fail(message: str) -> typer.Exit:
    err.print(f"error: {message}", markup=False, soft_wrap=True, highlight=False)
    return typer.Exit(2)


def _load(model: str) -> object:
    import hat.models.llamacpp_backend  # noqa: F401 - registers llamacpp:...
    from hat.models import load_model

    with err.status(f"loading model {model} …"):
        return load_model(model)


def serve_defaults(spec: str, model: object = None) -> tuple[int, float, str]:
    """``(max_concurrency, deadline_s, why)`` for a model spec (and the loaded model, whose
    ``device`` tells a GPU from a CPU): see the module docstring."""
    if spec.strip().partition(":")[0] not in LOCAL_MODELS:
        return 4, 30.0, "a remote or scripted model"
    weights = getattr(model, "model", None)  # TransformersModel keeps the torch module here
    device = str(getattr(model, "device", None) or getattr(weights, "device", "cpu"))
    instances = int(getattr(model, "instances", 1) or 1)  # a ModelPool: that many generations at once
    if device.startswith("cuda"):
        return instances, 30.0, "a local GPU model, which generates one request at a time per instance"
    if instances > 1:
        return instances, LOCAL_CPU_DEADLINE_S, f"a pool of {instances} local CPU models, one request each at a time"
    return 1, LOCAL_CPU_DEADLINE_S, "a local CPU model, which answers one request at a time in 10-100 s"


def default_token_file(port: int) -> Path:
    """``$XDG_STATE_HOME/hat/serve-<port>.admin-token`` (``~/.local/state`` when unset)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "hat" / f"serve-{port}.admin-token"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by this user only (0600; a new folder 0700). An existing
    file is truncated and re-moded; a symlink at ``path`` is refused rather than followed."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def serve_command(
    harness: str = typer.Option("livestream", help="Harness folder or built-in name."),
    model: str = typer.Option(
        "smollm2-hat", help="Model spec: smollm2-hat | llamacpp:smollm2-hat | smollm2 | hf:… | openai:… | scripted:…"
    ),
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port."),
    max_concurrency: int | None = typer.Option(
        None, min=1, help="Requests running at once (worker threads). Default: 1 for a local model, else 4."
    ),
    max_queue: int = typer.Option(16, min=0, help="Requests waiting for a worker; beyond that 429."),
    timeout: float | None = typer.Option(
        None,
        min=0.1,
        help="Per-request deadline in seconds (queue + agent); 504 after. Default: 120 for a local CPU model, else 30.",
    ),
    max_body_bytes: int = typer.Option(65536, min=1024, help="Largest request body; 413 beyond."),
    body_timeout: float = typer.Option(10.0, min=0.1, help="Seconds a request body may take to arrive; 408 after."),
    admin_token: str | None = typer.Option(
        None,
        envvar="HAT_ADMIN_TOKEN",
        help="Bearer token for POST /v1/harness/reload (env HAT_ADMIN_TOKEN); generated when not given.",
    ),
    admin_token_file: Path | None = typer.Option(  # noqa: B008
        None, help="Where a generated token is written (0600). Default: $XDG_STATE_HOME/hat/serve-PORT.admin-token."
    ),
    harness_root: list[Path] = typer.Option(  # noqa: B008
        [], help="Folder a reload may load harnesses from (repeatable). Default: the served harness's parent."
    ),
    allowed_host: list[str] = typer.Option(  # noqa: B008
        [], help="Host header value to accept besides the bound address (repeatable; '*' = any)."
    ),
    trace_out: Path | None = typer.Option(None, help="Append every trace to this JSONL file."),  # noqa: B008
    log_level: str = typer.Option("info", help="uvicorn log level."),
) -> None:
    """Serve the agent over HTTP: /v1/reply, /v1/reply/stream, /v1/harness/reload, /health, /metrics."""
    try:
        import uvicorn

        from hat.harness.sinks import JSONLSink
        from hat.serve.app import create_app
        from hat.serve.limits import allowed_hosts
    except ImportError as exc:
        raise _fail(str(MissingDependencyError(exc.name or "fastapi", "serve", "hat serve"))) from exc
    try:
        hosts = allowed_hosts(host, allowed_host)
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    token = admin_token or secrets.token_urlsafe(32)
    try:
        loaded = _load(model)
        concurrency, deadline, why = serve_defaults(model, loaded)
        defaulted = max_concurrency is None or timeout is None
        concurrency = max_concurrency if max_concurrency is not None else concurrency
        deadline = timeout if timeout is not None else deadline
        app = create_app(
            harness,
            loaded,  # type: ignore[arg-type]
            max_concurrency=concurrency,
            max_queue=max_queue,
            request_timeout_s=deadline,
            max_body_bytes=max_body_bytes,
            body_timeout_s=body_timeout,
            admin_token=token,
            harness_roots=harness_root,
            allowed_hosts=hosts,
            sinks=[JSONLSink(trace_out)] if trace_out else [],
        )
    except HatError as exc:
        raise _fail(str(exc)) from exc
    _announce_token(token, None if admin_token else (admin_token_file or default_token_file(port)))
    server = app.state.server
    current = server.holder.current
    roots = ", ".join(str(r) for r in server.holder.roots)
    source = f"defaults for {why}; change with --max-concurrency / --timeout" if defaulted else "as given"
    err.print(
        f"serving {current.harness.name} {current.harness.version} ({current.hash[:12]}) on http://{host}:{port} · "
        f"max concurrency {concurrency}, deadline {deadline:g} s ({source})",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    err.print(f"reload roots: {roots}; accepted Host names: {', '.join(hosts)}", markup=False, highlight=False)
    uvicorn.run(app, host=host, port=port, log_level=log_level, workers=1, timeout_keep_alive=5)


def _announce_token(token: str, file: Path | None) -> None:
    """Print where the admin token is: a generated one once, with the file it was saved to."""
    if file is None:
        err.print("admin token: the one given with --admin-token / HAT_ADMIN_TOKEN", highlight=False)
        return
    try:
        write_private(file, token + "\n")
    except OSError as exc:
        raise _fail(f"cannot write the admin token to {file}: {exc}; give --admin-token-file") from exc
    err.print(f"admin token: {token}  (saved to {file}, mode 0600)", markup=False, highlight=False, soft_wrap=True)
