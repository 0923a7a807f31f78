"""Runtime overhead per round: everything except model time, measured with the scripted model.

    .venv/bin/python benchmarks/runtime_overhead.py [--n 300] [--harness livestream] [--json]

Each request runs two rounds against the shipped harness: a tool call (a real Python tool over the
catalog) and a reply that passes every stop-check hook. The scripted model answers instantly, so
``trace.latency_ms - trace.model_ms`` is the runtime's own cost: input hooks, prompt rendering,
parsing, hooks, tool dispatch through the worker pool, trace building.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from hat.env.context import livestream_context
from hat.harness import Agent, Request, load_harness
from hat.models.scripted import ScriptedModel

CALL = '<think>price question</think><tool_call>{"name": "get_price", "arguments": {"product": "%s"}}</tool_call>'
REPLY = '<reply>{"reply": "Great pick! Let me know if you want the size chart."}</reply>'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--harness", default="livestream")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    harness = load_harness(args.harness)
    tool = harness.tool_by_function("get_price")
    assert tool is not None, "the harness has no get_price tool"
    room = livestream_context(Request.of("x")).context["room"]
    outputs = [(CALL % room["on_display"]).replace("get_price", tool.name), REPLY]
    agent = Agent(harness, ScriptedModel(outputs, loop=True), context_provider=livestream_context)
    for _ in range(20):  # warm-up: imports, template compilation, thread pool
        agent.respond("how much is it?")
    per_round, per_request = [], []
    t0 = time.perf_counter()
    for i in range(args.n):
        trace = agent.respond(Request.of(f"how much is it? #{i}")).trace
        assert trace.status == "ok", trace.context
        per_request.append(trace.overhead_ms)
        per_round.append(trace.overhead_ms / len(trace.rounds))
    wall = time.perf_counter() - t0
    q = statistics.quantiles(per_round, n=20)
    result = {
        "n_requests": args.n,
        "rounds_per_request": 2,
        "overhead_ms_per_round_mean": round(statistics.mean(per_round), 3),
        "overhead_ms_per_round_p50": round(statistics.median(per_round), 3),
        "overhead_ms_per_round_p95": round(q[18], 3),
        "overhead_ms_per_request_mean": round(statistics.mean(per_request), 3),
        "requests_per_s": round(args.n / wall, 1),
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}".strip(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:32s} {v}")
    agent.close()


if __name__ == "__main__":
    main()
