"""``hat bench latency``: deployment replay against ``hat serve``, the report's Tables 6 and 7 on this machine.

What is replayed: simulator traffic (:func:`hat.env.viewers.generate_episodes`, seeded) - each
episode's comments, dialogue history and the room's clock (``turns_left``, ``time_left_s``) - sent
to ``POST /v1/reply/stream``. The rest of the room (products, campaign) is the server's own: the
simulator's generated worlds are not the catalog a deployed server answers from, and what latency
depends on (comment, history, prompt size, rounds) is kept. Every concurrency level replays the same
requests; the first ``warmup`` of each level are sent and not counted.

Two ways to run it:

- **Against a running server** (``--url``): what a client sees, nothing more (Table 6's columns).
- **In-process** (``--model SPEC``, repeatable, times ``--speculative 0,N``): for each model and
  setting the bench loads the model, serves it with the app ``hat serve`` runs
  (:func:`hat.serve.app.create_app`, uvicorn on a loopback port in a thread of this process, the
  ``hat serve`` defaults for concurrency and deadline) and wraps it in an :class:`EngineRecorder`,
  which adds what only the engine knows: its decode rate, the draft tokens it proposed and accepted
  (Table 7), the share of prompt tokens served from the KV cache. Client and server share one
  process; llama.cpp and torch release the GIL while they compute, so the client costs the server
  only its own HTTP parsing.

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
- **Engine** (in-process only): per generation (every round: reasoning, tool calls, replies) with
  at least two tokens and a TTFT, ``(completion_tokens − 1) / (latency − ttft)``; the median over the
  level's generations. ``acceptance`` = accepted / proposed draft tokens, summed over the level.

**Memory-bandwidth bound.** Decoding a dense model reads every weight once per token, so tokens/s
≤ B / W: W is the weight bytes (the GGUF file for llama.cpp, the parameters in memory for
transformers: :func:`weight_bytes`) and B the memory bandwidth, given (``--bandwidth`` GB/s) or
measured by :func:`measure_bandwidth_gbps` (a numpy copy of a 512 MB array, counted as 512 MB read +
512 MB written, best of 5: the probe of ``reports/serving/speed_probe.py``). The bound leaves out
KV-cache and activation traffic, so it is optimistic for long contexts; the share reported is the
engine decode rate at the lowest concurrency over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import platform
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from hat.models.base import Finish, Generation, GenerationConfig, Message, Model, ModelBackend

__all__ = [
    "EngineRecorder",
    "Sample",
    "ServerSettings",
    "bandwidth_bound",
    "bench_model",
    "bench_payloads",
    "engine_summary",
    "measure_bandwidth_gbps",
    "run_bench",
    "speculative_rows",
    "summarize",
    "weight_bytes",
]

UNDER_S = 15.0


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
    reply: str = ""

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
    sample.reply = str(done.get("reply", ""))
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
    url: str,
    payloads: list[dict[str, Any]],
    concurrency: int,
    warmup: int,
    timeout_s: float,
    on_counted: Callable[[], object] | None = None,
) -> list[Sample]:
    """Replay ``payloads`` with ``concurrency`` requests in flight; the first ``warmup`` are dropped.
    ``on_counted()`` is called between the warm-up and the counted requests."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout_s) as client:
        await _replay_all(client, payloads[:warmup], concurrency)
        if on_counted is not None:
            on_counted()
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


def _r3(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def summarize(samples: list[Sample], concurrency: int, elapsed_s: float) -> dict[str, Any]:
    ok = [s for s in samples if s.ok]
    walls = [s.wall_s for s in ok]
    ttfts = [s.ttft_s for s in ok if s.ttft_s is not None]
    rates = [r for s in ok if (r := s.decode_tps) is not None]
    kinds: dict[str, int] = {}
    for s in samples:
        if not s.ok:
            kinds[s.error] = kinds.get(s.error, 0) + 1
    return {
        "concurrency": concurrency,
        "n": len(samples),
        "wall_p50_s": _r3(_percentile(walls, 50)),
        "wall_p95_s": _r3(_percentile(walls, 95)),
        "ttft_p95_s": _r3(_percentile(ttfts, 95)),
        "decode_tokens_per_s": _r3(_percentile(rates, 50)),
        "under_15s": round(sum(1 for w in walls if w < UNDER_S) / len(samples), 4) if samples else None,
        "errors": len(samples) - len(ok),
        "error_kinds": kinds,
        "throughput_rps": round(len(samples) / elapsed_s, 3) if elapsed_s > 0 else None,
        "tokens_method": sorted({s.tokens_method for s in ok if s.tokens_method}),
        "statuses": {st: sum(1 for s in ok if s.status == st) for st in sorted({s.status for s in ok})},
        "wall_s": [round(w, 4) for w in sorted(walls)],
        "replies": [s.reply if s.ok else None for s in samples],  # in payload order: compares runs
    }


# -- what the engine saw ----------------------------------------------------------------------------------
class EngineRecorder(ModelBackend):
    """The served model, wrapped: every :class:`Generation` it returns is kept (thread-safe) until
    :meth:`drain`. Other attributes (``count_tokens``, ``tokenizer``, ``model``, ...) are the inner
    model's, so the server treats the wrapper as the model itself."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name
        self._kept: list[Generation] = []
        self._lock = threading.Lock()

    def __getattr__(self, attr: str) -> Any:
        if attr == "inner":  # not set yet (copy/pickle): no recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def _keep(self, generation: Generation | None) -> None:
        if generation is not None:
            with self._lock:
                self._kept.append(generation)

    def drain(self) -> list[Generation]:
        """The generations kept since the last call."""
        with self._lock:
            kept, self._kept = self._kept, []
        return kept

    def _generate(self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None) -> Generation:
        generation = self.inner.generate(messages, config, cache_key=cache_key)
        self._keep(generation)
        return generation

    def _stream(
        self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None, finish: Finish
    ) -> Iterable[str]:
        pieces = self.inner.stream(messages, config, cache_key=cache_key)
        text: list[str] = []
        try:
            for piece in pieces:
                text.append(piece)
                yield piece
        finally:
            close = getattr(pieces, "close", None)
            if callable(close):
                close()
            generation = getattr(pieces, "generation", None) or Generation(text="".join(text))
            self._keep(generation)
            finish(generation)


def engine_summary(generations: list[Generation]) -> dict[str, Any]:
    """Engine-side figures of one level (see the module docstring)."""
    rates = [
        (g.completion_tokens - 1) / (g.latency_s - g.ttft_s)
        for g in generations
        if g.completion_tokens >= 2 and g.ttft_s is not None and g.latency_s > g.ttft_s
    ]
    drafted = sum(g.draft_tokens for g in generations)
    accepted = sum(g.accepted_tokens for g in generations)
    prompt = sum(g.prompt_tokens for g in generations)
    return {
        "generations": len(generations),
        "completion_tokens": sum(g.completion_tokens for g in generations),
        "decode_tokens_per_s": _r3(_percentile(rates, 50)),
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "acceptance": round(accepted / drafted, 4) if drafted else None,
        "cached_prompt_share": round(sum(g.cached_tokens for g in generations) / prompt, 4) if prompt else None,
    }


# -- a run: every level against one server -----------------------------------------------------------------
async def _server_info(url: str) -> dict[str, Any]:
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            health = (await client.get("/health")).json()
        return {"model": health.get("model"), "harness": health.get("harness", {})}
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": f"GET /health failed: {type(exc).__name__}"}


async def run_bench(
    url: str,
    levels: list[int],
    n: int,
    warmup: int,
    seed: int,
    *,
    mode: str = "single",
    timeout_s: float = 120.0,
    recorder: EngineRecorder | None = None,
) -> dict[str, Any]:
    """Every level in turn; returns the JSON-ready report of one run (see the module docstring).
    With ``recorder`` (the served model, in-process), each level also gets its ``engine`` figures."""
    payloads = bench_payloads(n + warmup, seed, mode)
    results = []
    for concurrency in levels:
        t0 = time.perf_counter()
        on_counted = recorder.drain if recorder is not None else None
        samples = await run_level(url, payloads, concurrency, warmup, timeout_s, on_counted)
        row = summarize(samples, concurrency, time.perf_counter() - t0)
        if recorder is not None:
            row["engine"] = engine_summary(recorder.drain())
        results.append(row)
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


@contextlib.contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Run ``app`` under uvicorn on a free loopback port in a daemon thread; yields the base URL."""
    import uvicorn

    # IPPROTO_TCP: asyncio sets TCP_NODELAY only on TCP sockets (else a 40 ms delayed-ACK stall)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_keep_alive=60)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="hat-bench-server")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the benchmark server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@dataclass(frozen=True)
class ServerSettings:
    """How the in-process server runs (``None``: ``hat serve``'s default for the model)."""

    harness: str = "livestream"
    max_concurrency: int | None = None
    max_queue: int = 16
    timeout_s: float | None = None


def bench_model(
    model: Model,
    spec: str,
    speculative: int,
    levels: list[int],
    n: int,
    warmup: int,
    seed: int,
    *,
    mode: str = "single",
    client_timeout_s: float = 120.0,
    server: ServerSettings = ServerSettings(),
) -> dict[str, Any]:
    """One in-process run: ``model`` (loaded from ``spec`` with ``speculative``) served like ``hat serve``."""
    from hat.serve.app import create_app
    from hat.serve.cli import serve_defaults

    recorder = EngineRecorder(model)
    concurrency, deadline, _ = serve_defaults(spec, model)
    app = create_app(
        server.harness,
        recorder,
        max_concurrency=server.max_concurrency or concurrency,
        max_queue=server.max_queue,
        request_timeout_s=server.timeout_s or deadline,
    )
    try:
        with serve_in_thread(app) as url:
            report = asyncio.run(
                run_bench(url, levels, n, warmup, seed, mode=mode, timeout_s=client_timeout_s, recorder=recorder)
            )
    finally:
        app.state.server.close()
    report.update(
        spec=spec,
        speculative=speculative,
        engine=_engine_name(model),
        weight_bytes=weight_bytes(model),
        max_concurrency=server.max_concurrency or concurrency,
    )
    return report


# -- the bandwidth bound and Table 7 ----------------------------------------------------------------------
def _engine_name(model: Any) -> str:
    members = getattr(model, "members", None)
    if isinstance(members, list) and members:  # a ModelPool
        return f"{len(members)} × {_engine_name(members[0])}"
    kind = type(model).__name__
    return {"LlamaCppModel": "llama.cpp", "TransformersModel": "transformers", "ScriptedModel": "scripted"}.get(
        kind, kind
    )


def weight_bytes(model: Any) -> int | None:
    """Bytes of weights one decoded token reads: the GGUF file (llama.cpp), the parameters in memory
    (transformers; tied embeddings once); ``None`` for other models."""
    path = getattr(model, "path", None)
    if isinstance(path, Path) and path.suffix == ".gguf" and path.is_file():
        return path.stat().st_size
    module = getattr(model, "model", None)
    parameters = getattr(module, "parameters", None)
    if callable(parameters):
        return sum(p.numel() * p.element_size() for p in parameters())
    return None


def measure_bandwidth_gbps(size_mb: int = 512, repeats: int = 5) -> float:
    """Memory bandwidth in GB/s: the best of ``repeats`` numpy copies of ``size_mb`` MB (read + write)."""
    import numpy as np

    source = np.ones(size_mb * 1024 * 1024 // 8)
    target = np.empty_like(source)
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(target, source)
        best = max(best, 2 * source.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def bandwidth_bound(run: dict[str, Any], bandwidth_gbps: float | None) -> dict[str, Any]:
    """Decode tokens/s of ``run`` at its lowest concurrency against ``bandwidth / weight bytes``."""
    weights = run.get("weight_bytes")
    first = run["levels"][0] if run.get("levels") else {}
    engine = (first.get("engine") or {}).get("decode_tokens_per_s")
    client = first.get("decode_tokens_per_s")
    bound = bandwidth_gbps * 1e9 / weights if weights and bandwidth_gbps else None
    return {
        "weight_bytes": weights,
        "bound_tokens_per_s": _r3(bound),
        "engine_decode_tokens_per_s": engine,
        "client_decode_tokens_per_s": client,
        "engine_share": round(engine / bound, 4) if engine and bound else None,
        "client_share": round(client / bound, 4) if client and bound else None,
        "at_concurrency": first.get("concurrency"),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _same_share(a: list[str | None], b: list[str | None]) -> float | None:
    pairs = [(x, y) for x, y in zip(a, b, strict=False) if x is not None and y is not None]
    return round(sum(x == y for x, y in pairs) / len(pairs), 4) if pairs else None


def speculative_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table 7: each run with speculative decoding against the run of the same spec without it,
    level by level: wall-P50 speedup (off / on), engine decode speedup (on / off), acceptance, and the
    share of requests whose reply text is identical."""
    rows = []
    for on in (r for r in runs if r.get("speculative")):
        off = next((r for r in runs if r.get("spec") == on.get("spec") and not r.get("speculative")), None)
        if off is None:
            continue
        by_level = {row["concurrency"]: row for row in off["levels"]}
        for row in on["levels"]:
            base = by_level.get(row["concurrency"])
            if base is None:
                continue
            engine_on, engine_off = row.get("engine") or {}, base.get("engine") or {}
            rows.append(
                {
                    "spec": on["spec"],
                    "engine": on.get("engine"),
                    "speculative": on["speculative"],
                    "concurrency": row["concurrency"],
                    "n": row["n"],
                    "wall_p50_off_s": base["wall_p50_s"],
                    "wall_p50_on_s": row["wall_p50_s"],
                    "speedup_wall_p50": _ratio(base["wall_p50_s"], row["wall_p50_s"]),
                    "decode_off_tokens_per_s": engine_off.get("decode_tokens_per_s"),
                    "decode_on_tokens_per_s": engine_on.get("decode_tokens_per_s"),
                    "speedup_decode": _ratio(
                        engine_on.get("decode_tokens_per_s"), engine_off.get("decode_tokens_per_s")
                    ),
                    "acceptance": engine_on.get("acceptance"),
                    "accepted_per_token": _ratio(engine_on.get("accepted_tokens"), engine_on.get("completion_tokens")),
                    "same_reply": _same_share(base.get("replies", []), row.get("replies", [])),
                }
            )
    return rows
