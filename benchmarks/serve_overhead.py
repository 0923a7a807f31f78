"""Server overhead per request: what ``hat serve`` adds on top of the agent, with the scripted model.

    .venv/bin/python benchmarks/serve_overhead.py [--n 300] [--endpoint reply|stream] [--json]

A real uvicorn server runs on 127.0.0.1 (a free port, in a thread of this process) with the shipped
livestream harness and a scripted model that answers instantly in one round. Requests are sent one
at a time, so nothing queues. Per request:

- ``overhead_ms`` = client wall time − the agent's own time (``timings.agent_ms`` of the reply):
  HTTP parsing and writing, validation, admission, the worker hand-off, JSON, the loopback round trip
  and the client itself;
- ``server_overhead_ms`` = the server's ``timings.total_ms`` − ``agent_ms``: the part inside the
  route handler (validation excluded, admission and worker hand-off included).

Client and server share one process (and its GIL), which makes the numbers an upper bound.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import threading
import time

import httpx
import uvicorn

from hat.models.scripted import ScriptedModel
from hat.serve import create_app

REPLY = '<reply>{"reply": "Great pick! Let me know if you want the size chart."}</reply>'


def _serve(app: object) -> tuple[uvicorn.Server, threading.Thread, str]:
    # proto=IPPROTO_TCP: asyncio enables TCP_NODELAY only for sockets whose proto says TCP; with
    # proto 0 every keep-alive response would wait ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


def _one(client: httpx.Client, endpoint: str, i: int) -> tuple[float, dict]:
    body = {"room_id": "bench", "comment": f"is this dress warm? #{i}"}
    t0 = time.perf_counter()
    if endpoint == "reply":
        r = client.post("/v1/reply", json=body)
        wall = time.perf_counter() - t0
        return wall * 1000, r.json()
    r = client.post("/v1/reply/stream", json=body)
    wall = time.perf_counter() - t0
    done = r.text.strip().split("\n\n")[-1]
    return wall * 1000, json.loads(done.split("data: ", 1)[1])


def _q(values: list[float], q: int) -> float:
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--endpoint", choices=("reply", "stream"), default="reply")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    app = create_app("livestream", ScriptedModel([REPLY], loop=True), max_concurrency=1, max_queue=4)
    server, thread, url = _serve(app)
    overhead, inside, agent = [], [], []
    with httpx.Client(base_url=url) as client:
        for i in range(30):  # warm-up: imports, templates, connection, allocator
            _one(client, args.endpoint, i)
        for i in range(args.n):
            wall_ms, body = _one(client, args.endpoint, i)
            timings = body["timings"]
            overhead.append(wall_ms - timings["agent_ms"])
            inside.append(timings["total_ms"] - timings["agent_ms"])
            agent.append(timings["agent_ms"])
    server.should_exit = True
    thread.join(10)
    result = {
        "endpoint": args.endpoint,
        "n": args.n,
        "overhead_ms_p50": _q(overhead, 50),
        "overhead_ms_p95": _q(overhead, 95),
        "server_overhead_ms_p50": _q(inside, 50),
        "server_overhead_ms_p95": _q(inside, 95),
        "agent_ms_p50": _q(agent, 50),
        "machine": f"{platform.machine()} python {platform.python_version()}",
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:26s} {value}")


if __name__ == "__main__":
    main()
