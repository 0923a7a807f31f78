"""``hat bench latency``: deployment replay against a running ``hat serve``, the report's latency table.

What is replayed: simulator traffic (:func:`hat.env.viewers.generate_episodes`, seeded) - each
episode's comments, dialogue history and the room's clock (``turns_left``, ``time_left_s``) - sent
to ``POST /v1/reply/stream``. The rest of the room (products, campaign) is the server's own: the
simulator's generated worlds are not the catalog a deployed server answers from, and what latency
depends on (comment, history, prompt size, rounds) is kept. Every concurrency level replays the same
requests; the first ``warmup`` of each level are sent and not counted.

Per level, over the counted requests (seconds):

- **Wall P50 / P95**: client send → ``done`` event received (the whole reply).
- **TTFT P95**: client send → the first ``delta`` of the text that stood (deltas of a round later
  retracted do not count; this is when a TTS consumer that waits for certainty could start).
- **Decode tokens/s** (client-observed): per request, ``reply_tokens / (t_last − t_first)`` over the
  standing deltas of a reply streamed by the model (``stream.source == "model"``, at least two
  deltas); the table shows the median over requests. ``reply_tokens`` comes from the server's
  ``done`` event: the model's tokenizer when it has one (llama.cpp, transformers), whitespace words
  otherwise (scripted model) - the JSON says which. It counts only the reply text, not reasoning or
  tool-call tokens, so it is a lower bound on the engine's decode rate.
- **< 15 s**: share of counted requests that got a reply within 15 s (failures count as not).
- **Errors**: non-200 answers (429 included), ``error`` events, transport failures, no ``done``.
"""

from __future__ import annotations

import asyncio
import json
import platform
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

__all__ = ["Sample", "bench_app", "bench_latency_command", "bench_payloads", "run_bench", "summarize"]

UNDER_S = 15.0
bench_app = typer.Typer(help="Benchmarks against a running hat serve.", no_args_is_help=True)
err = Console(stderr=True)
out = Console()


@dataclass
class Sample:
    """One replayed request as the client saw it (seconds from send)."""

    ok: bool = False
    code: int = 0
    error: str = ""
    wall_s: float = 0.0
    ttft_s: float | None = None
    first_s: float | None = None
    last_s: float | None = None
    deltas: int = 0
    reply_tokens: int = 0
    tokens_method: str = ""
    source: str = ""
    status: str = ""

    @property
    def decode_tps(self) -> float | None:
        if self.source != "model" or self.deltas < 2 or self.first_s is None or self.last_s is None:
            return None
        span = self.last_s - self.first_s
        return self.reply_tokens / span if span > 0 else None


def bench_payloads(n: int, seed: int, mode: str = "single") -> list[dict[str, Any]]:
    """``n`` request bodies from simulator episodes (see the module docstring)."""
    from hat.env.viewers import generate_episodes

    payloads = []
    for episode in generate_episodes(n, seed, mode=mode):
        room = {k: episode.room[k] for k in ("turns_left", "time_left_s") if k in episode.room}
        comments = list(episode.comments)
        body: dict[str, Any] = {"room_id": f"bench-{seed}", "room": room, "request_id": f"bench-{episode.episode_id}"}
        body.update({"comment": comments[0]} if len(comments) == 1 else {"comments": comments})
        history = [dict(m) for m in episode.history if m.get("role") in ("user", "assistant")]
        if history:
            body["history"] = history
        payloads.append(body)
    return payloads


# -- one request ----------------------------------------------------------------------------------
def _sse_event(lines: list[str]) -> tuple[str, dict[str, Any]]:
    fields = dict(line.split(": ", 1) for line in lines if ": " in line)
    return fields.get("event", "message"), json.loads(fields.get("data", "{}"))


def _finish(sample: Sample, deltas: list[tuple[float, int | None, str]], done: dict[str, Any], retracted: set) -> None:
    standing = [t for t, rnd, _ in deltas if rnd is None or rnd not in retracted]
    stream = done.get("stream") or {}
    sample.ok, sample.status = True, str(done.get("status", ""))
    sample.deltas = len(standing)
    sample.ttft_s = standing[0] if standing else None
    sample.first_s, sample.last_s = (standing[0], standing[-1]) if standing else (None, None)
    sample.reply_tokens = int(stream.get("reply_tokens", 0))
    sample.tokens_method = str(stream.get("reply_tokens_method", ""))
    sample.source = str(stream.get("source", ""))


async def replay_one(client: httpx.AsyncClient, body: dict[str, Any]) -> Sample:
    """Send one streamed request and time what arrives."""
    sample = Sample()
    deltas: list[tuple[float, int | None, str]] = []
    retracted: set[int | None] = set()
    start = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/reply/stream", json=body) as response:
            sample.code = response.status_code
            if response.status_code != 200:
                sample.error = f"HTTP {response.status_code}"
                await response.aread()
                return sample
            block: list[str] = []
            async for line in response.aiter_lines():
                if line:
                    block.append(line)
                    continue
                event, data = _sse_event(block)
                block = []
                now = time.perf_counter() - start
                if event == "delta":
                    deltas.append((now, data.get("round"), str(data.get("text", ""))))
                elif event == "retract":
                    retracted.add(data.get("round"))
                elif event == "error":
                    sample.error = str((data.get("error") or {}).get("code", "error"))
                elif event == "done":
                    _finish(sample, deltas, data, retracted)
    except httpx.HTTPError as exc:
        sample.error = type(exc).__name__
    sample.wall_s = time.perf_counter() - start
    if not sample.ok and not sample.error:
        sample.error = "no done event"
    return sample


# -- one level and the summary ------------------------------------------------------------------------
async def _replay_all(client: httpx.AsyncClient, batch: list[dict[str, Any]], concurrency: int) -> list[Sample]:
    results: list[Sample | None] = [None] * len(batch)
    indices = iter(range(len(batch)))

    async def worker() -> None:
        for i in indices:
            results[i] = await replay_one(client, batch[i])

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return [s for s in results if s is not None]


async def run_level(
    url: str, payloads: list[dict[str, Any]], concurrency: int, warmup: int, timeout_s: float
) -> list[Sample]:
    """Replay ``payloads`` with ``concurrency`` requests in flight; the first ``warmup`` are dropped."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout_s) as client:
        await _replay_all(client, payloads[:warmup], concurrency)
        return await _replay_all(client, payloads[warmup:], concurrency)


def _percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None without values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(samples: list[Sample], concurrency: int, elapsed_s: float) -> dict[str, Any]:
    ok = [s for s in samples if s.ok]
    walls = [s.wall_s for s in ok]
    ttfts = [s.ttft_s for s in ok if s.ttft_s is not None]
    rates = [r for s in ok if (r := s.decode_tps) is not None]
    kinds: dict[str, int] = {}
    for s in samples:
        if not s.ok:
            kinds[s.error] = kinds.get(s.error, 0) + 1
    r3 = lambda v: None if v is None else round(v, 3)  # noqa: E731
    return {
        "concurrency": concurrency,
        "n": len(samples),
        "wall_p50_s": r3(_percentile(walls, 50)),
        "wall_p95_s": r3(_percentile(walls, 95)),
        "ttft_p95_s": r3(_percentile(ttfts, 95)),
        "decode_tokens_per_s": r3(_percentile(rates, 50)),
        "under_15s": round(sum(1 for w in walls if w < UNDER_S) / len(samples), 4) if samples else None,
        "errors": len(samples) - len(ok),
        "error_kinds": kinds,
        "throughput_rps": round(len(samples) / elapsed_s, 3) if elapsed_s > 0 else None,
        "tokens_method": sorted({s.tokens_method for s in ok if s.tokens_method}),
        "statuses": {st: sum(1 for s in ok if s.status == st) for st in sorted({s.status for s in ok})},
        "wall_s": [round(w, 4) for w in sorted(walls)],
    }


async def _server_info(url: str) -> dict[str, Any]:
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            health = (await client.get("/health")).json()
        return {"model": health.get("model"), "harness": health.get("harness", {})}
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": f"GET /health failed: {type(exc).__name__}"}


async def run_bench(
    url: str, levels: list[int], n: int, warmup: int, seed: int, *, mode: str = "single", timeout_s: float = 120.0
) -> dict[str, Any]:
    """Every level in turn; returns the JSON-ready report (see the module docstring)."""
    payloads = bench_payloads(n + warmup, seed, mode)
    results = []
    for concurrency in levels:
        t0 = time.perf_counter()
        samples = await run_level(url, payloads, concurrency, warmup, timeout_s)
        results.append(summarize(samples, concurrency, time.perf_counter() - t0))
    return {
        "url": url,
        "n": n,
        "warmup": warmup,
        "seed": seed,
        "mode": mode,
        "server": await _server_info(url),
        "client": f"{platform.machine()} python {platform.python_version()}",
        "levels": results,
    }


# -- output ------------------------------------------------------------------------------------------
def _fmt(value: Any, pattern: str = "{:.2f}") -> str:
    return "—" if value is None else pattern.format(value)


def latency_table(report: dict[str, Any]) -> Table:
    """The report's deployment-replay layout: one row per concurrency level."""
    table = Table(title=f"Deployment replay · {report['server'].get('model', '?')} · n = {report['n']} per level")
    for column in ("Concurrency", "Wall P50 (s)", "Wall P95 (s)", "TTFT P95 (s)", "Decode tok/s", "< 15 s", "Errors"):
        table.add_column(column, justify="right")
    for row in report["levels"]:
        table.add_row(
            str(row["concurrency"]),
            _fmt(row["wall_p50_s"]),
            _fmt(row["wall_p95_s"]),
            _fmt(row["ttft_p95_s"]),
            _fmt(row["decode_tokens_per_s"], "{:.1f}"),
            _fmt(None if row["under_15s"] is None else 100 * row["under_15s"], "{:.1f}%"),
            str(row["errors"]),
        )
    return table


def plot_cdf(report: dict[str, Any], path: Path) -> str | None:
    """Write the wall-time CDF per level; returns a note instead when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'hat-agent[serve]'); no CDF plot written"
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for row in report["levels"]:
        walls = row["wall_s"]
        if walls:
            ax.step(
                walls, [(i + 1) / row["n"] for i in range(len(walls))], where="post", label=f"c={row['concurrency']}"
            )
    ax.axvline(UNDER_S, color="grey", linestyle="--", linewidth=1, label="15 s")
    # log x: scripted-model runs (milliseconds) and LLM runs (seconds) both stay readable next to 15 s
    ax.set(xscale="log", xlabel="wall time per request (s, log scale)", ylabel="share of requests", ylim=(0, 1.02))
    ax.set_title(f"Latency CDF · {report['server'].get('model', '?')}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


def write_outputs(report: dict[str, Any], folder: Path) -> list[str]:
    """``latency.json`` (with the command line) and ``latency_cdf.png``; returns notes."""
    folder.mkdir(parents=True, exist_ok=True)
    report = {**report, "command": shlex.join(["hat", *sys.argv[1:]])}
    (folder / "latency.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    note = plot_cdf(report, folder / "latency_cdf.png")
    return [note] if note else []


@bench_app.command("latency")
def bench_latency_command(
    url: str = typer.Option("http://127.0.0.1:8000", help="Base URL of a running hat serve."),
    concurrency: str = typer.Option("1,2,4,8", help="Comma-separated concurrency levels."),
    n: int = typer.Option(40, "--n", min=1, help="Counted requests per level."),
    warmup: int = typer.Option(4, min=0, help="Warm-up requests per level (sent, not counted)."),
    seed: int = typer.Option(0, help="Seed of the replayed simulator traffic."),
    mode: str = typer.Option("single", help="single | multi (several comments per request)."),
    timeout: float = typer.Option(120.0, min=1.0, help="Client timeout per request (s)."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report on stdout."),
    out_dir: Path | None = typer.Option(None, "--out", help="Write latency.json and latency_cdf.png here."),  # noqa: B008
) -> None:
    """Replay simulator traffic against /v1/reply/stream: Wall P50/P95, TTFT P95, decode tok/s, < 15 s."""
    try:
        levels = [int(x) for x in concurrency.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1 or mode not in ("single", "multi"):
        err.print("error: --concurrency takes positive integers like 1,2,4,8 and --mode single|multi")
        raise typer.Exit(2)
    report = asyncio.run(run_bench(url.rstrip("/"), levels, n, warmup, seed, mode=mode, timeout_s=timeout))
    if "error" in report["server"]:
        err.print(f"warning: {report['server']['error']} (is hat serve running at {url}?)")
    notes = write_outputs(report, out_dir) if out_dir is not None else []
    if as_json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        out.print(latency_table(report))
    for note in notes:
        err.print(f"note: {note}")
    if all(row["errors"] == row["n"] for row in report["levels"]):
        raise typer.Exit(1)
