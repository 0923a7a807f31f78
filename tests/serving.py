"""Helpers for the hat serve tests: a real uvicorn server on a free loopback port, a model that
holds requests until released, SSE parsing, schema and metric look-ups.

Imported by ``test_serve*.py`` after they skip without FastAPI/uvicorn (tests/ is on sys.path,
as for ``toolbox.py``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from jsonschema import Draft202012Validator

from hat.harness.loader import resolve_harness_path
from hat.models.scripted import ScriptedModel
from hat.serve.streaming import _ACTIVE

REPLY = '<think>a greeting</think><reply>{"reply": "Hello there, welcome to the stream!"}</reply>'
OTHER = '<reply>{"reply": "Great question, I will check for you."}</reply>'
PRICE_CALL = '<tool_call>{"name": "get_price", "arguments": {}}</tool_call>'
ADMIN_TOKEN = "test-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}  # headers for POST /v1/harness/reload


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """Run ``app`` under uvicorn on a free loopback port; yields the base URL."""
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto is TCP, and a
    # socket made with proto 0 would add a 40 ms delayed-ACK stall to every keep-alive response.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # a long keep-alive: a busy 2-core box must not let uvicorn close a pooled connection just as the
    # client reuses it (the idle-close race of HTTP/1.1 keep-alive, not a server fault)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5, timeout_keep_alive=60
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def harness_copy(tmp_path: Path, name: str = "h") -> Path:
    dest = tmp_path / name
    shutil.copytree(resolve_harness_path("livestream"), dest)
    return dest


def edit_role(folder: Path, extra: str) -> None:
    role = folder / "prompts" / "role.md"
    role.write_text(role.read_text(encoding="utf-8") + f"\n{extra}\n", encoding="utf-8")


class Gate:
    """A scripted model that blocks on comments containing ``slow`` until the test releases it.

    The wait happens outside :class:`ScriptedModel` (which holds its lock while it asks a
    callable), so other requests keep being answered while one is held.
    """

    name = "scripted"

    def __init__(self, outputs: tuple[str, ...] = (REPLY,)) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.outputs = outputs
        self.calls = 0
        self.channel: Any = None  # the serving request channel of the last call (set in the worker)
        self._lock = threading.Lock()
        self._inner = ScriptedModel(self._pick)

    def _pick(self, messages: list[dict[str, str]]) -> str:
        rounds = sum(1 for m in messages if m["role"] == "assistant")
        return self.outputs[min(rounds, len(self.outputs) - 1)]

    def _wait(self, messages: Any) -> None:
        with self._lock:
            self.calls += 1
            self.channel = _ACTIVE.get()
        user = next(m["content"] for m in messages if m["role"] == "user")
        if "slow" in user:
            self.entered.set()
            assert self.release.wait(30), "the test never released the model"

    def generate(self, messages: Any, config: Any = None, *, cache_key: str | None = None) -> Any:
        self._wait(messages)
        return self._inner.generate(messages, config, cache_key=cache_key)

    def stream(self, messages: Any, config: Any = None, *, cache_key: str | None = None) -> Any:
        self._wait(messages)
        return self._inner.stream(messages, config, cache_key=cache_key)


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def standing_text(events: list[tuple[str, dict[str, Any]]]) -> str:
    """The invariant a TTS consumer relies on: deltas of rounds never retracted."""
    retracted = {d["round"] for e, d in events if e == "retract"}
    return "".join(d["text"] for e, d in events if e == "delta" and (d["round"] is None or d["round"] not in retracted))


def schema_validator(openapi: dict[str, Any], name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": openapi["components"]})


def metric(text: str, line_prefix: str) -> float:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_prefix)]
    return sum(values)


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")
