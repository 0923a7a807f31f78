"""``hat bench latency``: the report's deployment tables (6 and 7) on this machine.

A thin shell: the replay, the in-process server and the engine figures are
:mod:`hat.serve.bench`; the tables, Markdown and plots :mod:`hat.serve.bench_report`. Typical use
on an idle machine (see ``reports/serving.md``)::

    hat bench latency --model llamacpp:smollm2 --model smollm2-hat --speculative 0,8 \\
        --concurrency 1,2,4,8 --n 30 --warmup 4 --out reports/serving/latency

Registered in :mod:`hat.cli.main` as ``app.add_typer(bench_app, name="bench")``.
"""

from __future__ import annotations

import asyncio
import json
import platform
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from hat.errors import HatError

__all__ = ["bench_app", "bench_latency_command"]

bench_app = typer.Typer(help="Benchmarks of hat serve.", no_args_is_help=True)
err = Console(stderr=True)
out = Console()
DEFAULT_URL = "http://127.0.0.1:8000"


def _usage(message: str) -> typer.Exit:
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(2)


def _ints(text: str, option: str, minimum: int) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < minimum:
        raise _usage(f"{option} takes integers >= {minimum} separated by commas (got {text!r})")
    return values


def _check(url: str | None, model: list[str], drafts: list[int], mode: str) -> None:
    if mode not in ("single", "multi"):
        raise _usage(f"--mode is single or multi (got {mode!r})")
    if url and model:
        raise _usage("give --url (a running server) or --model (served in-process), not both")
    if not model and drafts != [0]:
        raise _usage("--speculative needs --model: the bench cannot switch a running server's engine")


def _bandwidth(value: str) -> tuple[float | None, str]:
    from hat.serve.bench import measure_bandwidth_gbps

    if value == "measure":
        return round(measure_bandwidth_gbps(), 2), "measured: best of 5 numpy copies of 512 MB, read + write"
    if value == "none":
        return None, "not given"
    try:
        return float(value), "given with --bandwidth"
    except ValueError:
        raise _usage(f"--bandwidth takes GB/s, 'measure' or 'none' (got {value!r})") from None


def _load(spec: str, speculative: int) -> Any:
    from hat.cli.common import loading_model
    from hat.models import load_model

    try:
        with loading_model(spec):
            return load_model(spec, **({"speculative": speculative} if speculative else {}))
    except TypeError as exc:
        raise _usage(f"model {spec!r} does not take speculative={speculative} ({exc})") from exc
    except HatError as exc:
        raise _usage(str(exc)) from exc


def _model_runs(specs: list[str], drafts: list[int], run: dict[str, Any]) -> list[dict[str, Any]]:
    from hat.serve.bench import bench_model

    runs = []
    for spec in specs:
        for speculative in drafts:
            model = _load(spec, speculative)
            try:
                runs.append(bench_model(model, spec, speculative, **run))
            finally:
                close = getattr(model, "close", None)
                if callable(close):
                    close()
    return runs


def _report(runs: list[dict[str, Any]], gbps: float | None, source: str, run: dict[str, Any]) -> dict[str, Any]:
    from hat.serve.bench import bandwidth_bound, speculative_rows

    return {
        "n": run["n"],
        "warmup": run["warmup"],
        "seed": run["seed"],
        "mode": run["mode"],
        "client": f"{platform.machine()} python {platform.python_version()}",
        "runs": runs,
        "bandwidth": {"gbps": gbps, "source": source, "runs": [bandwidth_bound(r, gbps) for r in runs]},
        "speculative": speculative_rows(runs),
        # the first run's, for readers of the one-run format
        "server": runs[0]["server"],
        "levels": runs[0]["levels"],
    }


@bench_app.command("latency")
def bench_latency_command(
    url: str | None = typer.Option(
        None, help=f"Base URL of a running hat serve (default {DEFAULT_URL} without --model)."
    ),
    model: list[str] = typer.Option(
        [], "--model", help="Serve this model spec in-process instead (repeatable): adds engine figures and Table 7."
    ),
    speculative: str = typer.Option(
        "0", help="With --model: draft sizes to run, comma-separated; 0 = off (0,8: Table 7)."
    ),
    concurrency: str = typer.Option("1,2,4,8", help="Comma-separated concurrency levels."),
    n: int = typer.Option(40, "--n", min=1, help="Counted requests per level."),
    warmup: int = typer.Option(4, min=0, help="Warm-up requests per level (sent, not counted)."),
    seed: int = typer.Option(0, help="Seed of the replayed simulator traffic."),
    mode: str = typer.Option("single", help="single | multi (several comments per request)."),
    timeout: float = typer.Option(120.0, min=1.0, help="Client timeout per request (s)."),
    harness: str = typer.Option("livestream", help="With --model: the harness served."),
    max_concurrency: int | None = typer.Option(
        None, min=1, help="With --model: requests running at once (default: hat serve's for the model)."
    ),
    max_queue: int = typer.Option(16, min=0, help="With --model: requests waiting; beyond that 429."),
    bandwidth: str = typer.Option(
        "measure", help="Memory bandwidth in GB/s for the decode bound, 'measure' (numpy copy, ~1 s) or 'none'."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report on stdout."),
    out_dir: Path | None = typer.Option(
        None, "--out", help="Write latency.json, latency.md and the latency CDFs (one PNG per level) here."
    ),
) -> None:
    """Replay simulator traffic against /v1/reply/stream: Wall P50/P95, TTFT P95, decode tok/s, < 15 s, errors."""
    from hat.serve.bench import ServerSettings, run_bench
    from hat.serve.bench_report import latency_table, speculative_table, write_outputs

    levels = _ints(concurrency, "--concurrency", 1)
    drafts = _ints(speculative, "--speculative", 0)
    _check(url, model, drafts, mode)
    gbps, source = _bandwidth(bandwidth)
    run: dict[str, Any] = {"levels": levels, "n": n, "warmup": warmup, "seed": seed, "mode": mode}
    if model:
        server = ServerSettings(harness, max_concurrency, max_queue)
        runs = _model_runs(model, drafts, {**run, "client_timeout_s": timeout, "server": server})
    else:
        target = (url or DEFAULT_URL).rstrip("/")
        runs = [asyncio.run(run_bench(target, levels, n, warmup, seed, mode=mode, timeout_s=timeout))]
        if "error" in runs[0]["server"]:
            err.print(f"warning: {runs[0]['server']['error']} (is hat serve running at {target}?)")
    report = _report(runs, gbps, source, run)
    notes = write_outputs(report, out_dir) if out_dir is not None else []
    if as_json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        out.print(latency_table(report))
        if report["speculative"]:
            out.print(speculative_table(report))
    for note in notes:
        err.print(f"note: {note}")
    if all(row["errors"] == row["n"] for r in runs for row in r["levels"]):
        raise typer.Exit(1)
