"""hat serve under load and faults: a 2,000-request soak with a reload in the middle, an MCP tool
server killed mid-call, the latency bench and the ``hat serve`` command shell.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from hat.harness.trace import Trace
from hat.models.scripted import ScriptedModel
from hat.serve import create_app
from serving import (
    ADMIN,
    ADMIN_TOKEN,
    OTHER,
    PRICE_CALL,
    REPLY,
    edit_role,
    harness_copy,
    rss_mb,
    serving,
)

SERVER = Path(__file__).parent / "fixtures" / "mcp_server.py"


# -- soak, reload under load, killed tool backend -----------------------------------------------------
async def _answer(client: httpx.AsyncClient, i: int, results: dict[str, Any]) -> httpx.Response | None:
    """POST until the server answers with something other than 429; transport errors are recorded."""
    while True:
        try:
            r = await client.post("/v1/reply", json={"room_id": "soak", "comment": f"hi #{i}"})
        except httpx.HTTPError as exc:  # recorded, not retried: the test fails on any
            results["transport_errors"].append(f"request {i}: {type(exc).__name__}: {exc}")
            return None
        results["codes"][r.status_code] = results["codes"].get(r.status_code, 0) + 1
        if r.status_code != 429:
            return r
        results["retries"] += 1
        await asyncio.sleep(0.05)


async def _soak_client(url: str, n: int, concurrency: int, reload_at: int, new_path: str) -> dict[str, Any]:
    results: dict[str, Any] = {"codes": {}, "hashes": {}, "retries": 0, "reload": None, "transport_errors": []}
    counter = iter(range(n))
    done = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:

        async def worker() -> None:
            nonlocal done
            for i in counter:
                r = await _answer(client, i, results)
                if r is not None and r.status_code == 200:
                    h = r.json()["harness"]["hash"]
                    results["hashes"][h] = results["hashes"].get(h, 0) + 1
                done += 1
                if done == reload_at:
                    reload = await client.post("/v1/harness/reload", json={"path": new_path}, headers=ADMIN)
                    results["reload"] = reload.json()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def test_soak_2000_requests_at_concurrency_16_with_a_reload(tmp_path):
    first, second = harness_copy(tmp_path, "v1"), harness_copy(tmp_path, "v2")
    edit_role(second, "Version two.")
    app = create_app(first, ScriptedModel([REPLY], loop=True), max_concurrency=4, max_queue=32, admin_token=ADMIN_TOKEN)
    with serving(app) as url:
        asyncio.run(_soak_client(url, 200, 16, 0, ""))  # warm-up: imports, pools, allocator
        gc.collect()
        rss_before = rss_mb()
        t0 = time.perf_counter()
        results = asyncio.run(_soak_client(url, 2000, 16, 1000, str(second)))
        elapsed = time.perf_counter() - t0
        gc.collect()
        growth = rss_mb() - rss_before
        health = httpx.get(f"{url}/health").json()
    print(f"\nsoak: 2000 requests in {elapsed:.1f}s, RSS growth {growth:.1f} MB, codes {results['codes']}")
    assert not results["transport_errors"], results["transport_errors"][:5]
    assert set(results["codes"]) <= {200, 429}, results["codes"]
    assert results["codes"][200] == 2000  # every request got a reply, reload or not
    assert results["reload"]["changed"] is True
    assert set(results["hashes"]) == {results["reload"]["previous"]["hash"], results["reload"]["current"]["hash"]}
    # No wall-time bound here (a test is not a benchmark; a busy machine would flake it): speed is
    # measured by `hat bench` (reports/serving.md); a hang is caught by pytest-timeout.
    assert growth < 40, f"RSS grew by {growth:.1f} MB"
    assert (health["running"], health["queued"]) == (0, 0)


def test_mcp_server_killed_mid_call_still_yields_a_reply_with_the_fault_in_the_trace(tmp_path):
    pytest.importorskip("mcp")
    psutil = pytest.importorskip("psutil")
    folder = harness_copy(tmp_path)
    yaml_path = folder / "harness.yaml"
    server = f"mcp_servers:\n  shop: {{command: {json.dumps(sys.executable)}, args: [{json.dumps(str(SERVER))}]}}\n"
    yaml_path.write_text(yaml_path.read_text(encoding="utf-8") + server, encoding="utf-8")
    for name, binding, prop in (("remote_price", "get_price", "product_id"), ("remote_slow", "slow", "seconds")):
        kind = "string" if prop == "product_id" else "number"
        (folder / "tools" / f"{name}.yaml").write_text(
            f"name: {name}\ndescription: Shop server tool.\nbinding: mcp:shop/{binding}\ntimeout_s: 20\n"
            f"parameters: {{type: object, properties: {{{prop}: {{type: {kind}}}}}, required: [{prop}]}}\n",
            encoding="utf-8",
        )
    price = '<tool_call>{"name": "remote_price", "arguments": {"product_id": "p-dress-01"}}</tool_call>'
    slow = '<tool_call>{"name": "remote_slow", "arguments": {"seconds": 8}}</tool_call>'

    def script(messages: list[dict[str, str]]) -> str:
        if any(m["role"] == "assistant" for m in messages):
            return OTHER
        return slow if "slow" in messages[-1]["content"] else price

    traces: list[Trace] = []

    class Keep:
        def emit(self, trace: Trace) -> None:
            traces.append(trace)

    app = create_app(folder, ScriptedModel(script), sinks=[Keep()])
    answers: dict[str, Any] = {}
    with serving(app) as url:

        def ask(key: str, comment: str) -> None:
            answers[key] = httpx.post(f"{url}/v1/reply", json={"room_id": "r", "comment": comment}, timeout=60).json()

        ask("first", "price?")  # starts the MCP server
        children = [p for p in psutil.Process().children(recursive=True) if str(SERVER) in " ".join(p.cmdline())]
        assert len(children) == 1
        in_flight = threading.Thread(target=ask, args=("killed", "slow one please"))
        in_flight.start()
        time.sleep(1.0)  # the slow call (8 s) is now running on the server
        children[0].kill()
        in_flight.join(30)
        ask("after", "price?")
    assert answers["first"]["tool_calls"][0]["status"] == "ok"
    killed = answers["killed"]
    assert killed["status"] == "ok" and killed["reply"] == "Great question, I will check for you."
    assert killed["tool_calls"][0]["status"] == "error"
    fault = next(t for t in traces if t.request_id == killed["trace_id"]).tool_calls[0]
    assert fault.status == "error" and "shop" in fault.error, fault  # the trace names the dead server
    assert answers["after"]["tool_calls"][0]["status"] == "ok"  # the pool started the server again


# -- the latency bench and the CLI shells --------------------------------------------------------------
def test_bench_latency_replays_simulator_traffic_and_writes_outputs(tmp_path):
    import typer
    from typer.testing import CliRunner

    from hat.cli.bench_cmd import bench_app
    from hat.serve.bench import bench_payloads

    cli = typer.Typer()
    cli.add_typer(bench_app, name="bench")  # as hat.cli.main registers it

    payloads = bench_payloads(5, seed=3)
    assert payloads == bench_payloads(5, seed=3) and all(p["room_id"] == "bench-3" for p in payloads)
    app = create_app("livestream", ScriptedModel([PRICE_CALL, REPLY], loop=True), max_concurrency=2, max_queue=8)
    with serving(app) as url:
        args = ["bench", "latency", "--url", url, "--concurrency", "1,4", "--n", "8", "--warmup", "2", "--json"]
        result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert [row["concurrency"] for row in report["levels"]] == [1, 4]
    for row in report["levels"]:
        assert row["n"] == 8 and row["errors"] == 0 and row["under_15s"] == 1.0
        assert 0 < row["wall_p50_s"] <= row["wall_p95_s"] and 0 < row["ttft_p95_s"] <= row["wall_p95_s"]
        assert row["decode_tokens_per_s"] > 0 and row["tokens_method"] == ["words"]
    assert report["server"]["model"] == "scripted"
    assert json.loads((tmp_path / "latency.json").read_text())["levels"][0]["n"] == 8
    if __import__("importlib").util.find_spec("matplotlib"):
        assert (tmp_path / "latency_cdf.png").stat().st_size > 1000


def test_serve_command_refuses_a_wildcard_bind_without_host_names_and_bad_harness():
    import typer
    from typer.testing import CliRunner

    from hat.serve.cli import serve_command

    app = typer.Typer()
    app.command()(serve_command)
    app.command("other")(lambda: None)
    public = CliRunner().invoke(app, ["serve-command", "--host", "0.0.0.0", "--model", "scripted:x"])
    assert public.exit_code == 2 and "--allowed-host" in public.output
    broken = CliRunner().invoke(app, ["serve-command", "--harness", "/no/such/harness", "--model", "oracle"])
    assert broken.exit_code == 2 and "error" in broken.output
