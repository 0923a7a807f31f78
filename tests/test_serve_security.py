"""hat serve at its trust boundary (issue 11): the admin token, reload roots, the Host check, typed
room state, errors that keep the connection, cancellation of clients that leave, what an API
client may see, and the request-body deadline.

Real uvicorn servers on a free loopback port (``serving.serving``); raw sockets where the test is
about the connection itself (keep-alive, a client that vanishes, a body that never arrives).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from hat.harness.trace import Trace
from hat.models.scripted import ScriptedModel
from hat.serve import create_app
from hat.serve.limits import allowed_hosts
from serving import ADMIN, ADMIN_TOKEN, OTHER, PRICE_CALL, REPLY, Gate, edit_role, harness_copy, metric, serving


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.01)


def _raw_post(url: str, path: str, body: dict[str, Any]) -> socket.socket:
    """Send a POST on a fresh socket and return the socket without reading the answer."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


# -- 1. admin token, reload roots, Host check ---------------------------------------------------------
def test_reload_needs_the_admin_token_even_when_none_was_configured():
    app = create_app("livestream", ScriptedModel([REPLY], loop=True))
    token = app.state.server.admin_token
    with serving(app) as url:
        anonymous = httpx.post(f"{url}/v1/harness/reload")
        admin = httpx.post(f"{url}/v1/harness/reload", headers={"Authorization": f"Bearer {token}"})
    assert len(token) >= 32
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthorized"
    assert admin.status_code == 200 and admin.json()["changed"] is False


def _roots_layout(tmp_path: Path) -> tuple[Path, Path]:
    """root/{served, v2, broken, empty, note.txt, link -> outside/h} and outside/h (a valid harness)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    served = harness_copy(root, "served")
    edit_role(harness_copy(root, "v2"), "Version two.")
    broken = harness_copy(root, "broken")
    (broken / "tools" / "get_price.yaml").write_text("name: get_price\nparameters: [unclosed\n", encoding="utf-8")
    (root / "empty").mkdir()
    (root / "note.txt").write_text("not a harness", encoding="utf-8")
    edit_role(harness_copy(outside, "h"), "Outside the roots.")
    (root / "link").symlink_to(outside / "h")
    return served, outside / "h"


def test_reload_loads_only_under_the_roots_and_answers_every_unusable_path_alike(tmp_path):
    served, outside = _roots_layout(tmp_path)
    root = served.parent
    app = create_app(served, ScriptedModel([REPLY], loop=True), admin_token=ADMIN_TOKEN)
    unusable = [
        str(outside),  # a valid harness outside the roots
        "../outside/h",  # the same, reached from a root
        str(root / "link"),  # a symlink in a root that leads out of it
        str(tmp_path / "missing"),
        str(root / "empty"),  # a folder that is not a harness
        str(root / "note.txt"),
        "/etc",
        "bad\u0000path",  # not even a valid path
    ]
    with serving(app) as url:

        def reload(path: str) -> httpx.Response:
            return httpx.post(f"{url}/v1/harness/reload", json={"path": path}, headers=ADMIN)

        refused = [reload(p) for p in unusable]
        broken = reload("broken")
        good = reload("v2")
        public = httpx.get(f"{url}/v1/harness").text + httpx.get(f"{url}/health").text
    assert {r.status_code for r in refused} == {422}
    assert len({r.text for r in refused}) == 1, [r.text for r in refused]  # nothing tells them apart
    assert refused[0].json()["error"]["code"] == "harness_unavailable"
    assert app.state.server.holder.current.harness.version == "1.1.0" and good.status_code == 200, good.text
    assert good.json()["current"]["path"] == "v2" and good.json()["previous"]["path"] == "served"
    # an allowed but broken harness lists its problems, by file relative to the harness
    error = broken.json()["error"]
    assert broken.status_code == 422 and error["code"] == "invalid_harness"
    assert any(d["file"] == os.path.join("tools", "get_price.yaml") and d["line"] for d in error["details"])
    for text in (broken.text, good.text, public):
        assert str(tmp_path) not in text  # no server path reaches a client


def test_harness_roots_can_be_widened(tmp_path):
    served, outside = _roots_layout(tmp_path)
    roots = [served.parent, outside.parent]
    app = create_app(served, ScriptedModel([REPLY], loop=True), admin_token=ADMIN_TOKEN, harness_roots=roots)
    with serving(app) as url:
        r = httpx.post(f"{url}/v1/harness/reload", json={"path": str(outside)}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["changed"] is True and r.json()["current"]["path"] == "h"


def test_the_host_header_must_name_the_server():
    default = create_app("livestream", ScriptedModel([REPLY], loop=True))
    named = create_app("livestream", ScriptedModel([REPLY], loop=True), allowed_hosts=["hat.internal"])
    with serving(default) as url:
        rebound = httpx.get(f"{url}/health", headers={"Host": "attacker.example"})
        reload = httpx.post(f"{url}/v1/harness/reload", headers={"Host": "attacker.example:80"})
        loopback = [httpx.get(f"{url}/health", headers={"Host": h}) for h in ("localhost:1", "127.0.0.1", "[::1]:8")]
    with serving(named) as url:
        internal = httpx.get(f"{url}/health", headers={"Host": "hat.internal"})
        local = httpx.get(f"{url}/health")
    assert rebound.status_code == 400 and rebound.json()["error"]["code"] == "invalid_host"
    assert reload.status_code == 400  # refused before authentication or the body is looked at
    assert [r.status_code for r in loopback] == [200, 200, 200]
    assert internal.status_code == 200 and local.status_code == 400


def test_allowed_hosts_follow_the_bind_address():
    assert allowed_hosts("127.0.0.1", []) == ["localhost", "127.0.0.1", "[::1]"]
    assert allowed_hosts("::1", ["hat.local"]) == ["localhost", "127.0.0.1", "[::1]", "hat.local"]
    assert allowed_hosts("10.0.0.5", []) == ["10.0.0.5"]
    assert allowed_hosts("fe80::2", ["*"]) == ["[fe80::2]", "*"]
    assert allowed_hosts("0.0.0.0", ["shop.example"]) == ["localhost", "127.0.0.1", "[::1]", "shop.example"]
    with pytest.raises(ValueError, match="--allowed-host"):
        allowed_hosts("0.0.0.0", [])


def test_serve_command_writes_a_generated_admin_token_0600_and_prints_it_once(tmp_path, monkeypatch):
    import typer
    import uvicorn
    from typer.testing import CliRunner

    from hat.serve.cli import serve_command

    captured: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: captured.update(app=app, **kw))
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps(REPLY) + "\n", encoding="utf-8")
    token_file = tmp_path / "state" / "admin-token"
    cli = typer.Typer()
    cli.command()(serve_command)
    cli.command("other")(lambda: None)
    args = ["serve-command", "--model", f"scripted:{script}", "--admin-token-file", str(token_file)]
    result = CliRunner().invoke(cli, [*args, "--harness-root", str(tmp_path), "--allowed-host", "hat.internal"])
    assert result.exit_code == 0, result.output
    token = token_file.read_text(encoding="utf-8").strip()
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    assert len(token) >= 32 and result.output.count(token) == 1
    server = captured["app"].state.server
    assert server.admin_token == token and server.holder.roots == (tmp_path.resolve(),)
    again = CliRunner().invoke(cli, [*args, "--admin-token", "given-token"])
    assert again.exit_code == 0 and "given-token" not in again.output
    assert captured["app"].state.server.admin_token == "given-token"
    assert token_file.read_text(encoding="utf-8").strip() == token  # a given token is not written


# -- 2. no handler error breaks a keep-alive connection --------------------------------------------------
def test_a_template_failing_at_render_gives_the_fallback_with_status_error(tmp_path):
    folder = harness_copy(tmp_path)
    edit_role(folder, "You have {{ 600 // room.turns_left }} seconds per turn.")  # renders, unless 0 turns
    app = create_app(folder, ScriptedModel([REPLY], loop=True))
    with serving(app) as url:
        crashed = httpx.post(f"{url}/v1/reply", json={"room_id": "r", "comment": "hi", "room": {"turns_left": 0}})
        fine = httpx.post(f"{url}/v1/reply", json={"room_id": "r", "comment": "hi", "room": {"turns_left": 5}})
    body = crashed.json()
    assert crashed.status_code == 200 and body["status"] == "error", crashed.text
    assert body["reply"] == app.state.server.holder.current.harness.output.fallback_reply
    assert "ZeroDivision" not in crashed.text and body["trace_id"] in body["status_reason"]
    assert fine.status_code == 200 and fine.json()["status"] == "ok"


def test_a_failing_request_leaves_the_keep_alive_connection_usable(tmp_path):
    folder = harness_copy(tmp_path)
    edit_role(folder, "You have {{ 600 // room.turns_left }} seconds per turn.")
    app = create_app(folder, ScriptedModel([REPLY], loop=True))

    async def broken_route() -> None:
        raise RuntimeError("crashed while reading /srv/private/config")

    app.add_api_route("/broken", broken_route)
    with serving(app) as url:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)

        def ask(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
            conn.request(method, path, json.dumps(body) if body else None, {"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read())

        crashed = ask("POST", "/v1/reply", {"room_id": "r", "comment": "hi", "room": {"turns_left": 0}})
        sock = conn.sock
        after_crash = ask("POST", "/v1/reply", {"room_id": "r", "comment": "hi"})
        same_after_crash = conn.sock is sock
        broken = ask("GET", "/broken")
        after_500 = ask("POST", "/v1/reply", {"room_id": "r", "comment": "hi"})
        same_after_500 = conn.sock is sock
        conn.close()
    assert crashed[0] == 200 and crashed[1]["status"] == "error"
    assert after_crash[0] == 200 and same_after_crash  # the same TCP connection answered
    assert broken[0] == 500 and broken[1]["error"]["code"] == "internal_error"
    assert "/srv/private" not in json.dumps(broken[1]) and "RuntimeError" not in json.dumps(broken[1])
    assert after_500[0] == 200 and after_500[1]["status"] == "ok" and same_after_500


# -- 3. typed room state ---------------------------------------------------------------------------
def test_room_is_typed_bounded_and_rejects_unknown_keys():
    model = ScriptedModel([OTHER], loop=True)
    app = create_app("livestream", model)

    def room(value: dict[str, Any]) -> dict[str, Any]:
        return {"room_id": "r", "comment": "hi", "room": value}

    with serving(app) as url, httpx.Client(base_url=url) as c:
        text_time = c.post("/v1/reply", json=room({"time_left_s": "soon"}))  # was a 500: "soon" // 60
        typo = c.post("/v1/reply", json=room({"turns_lefts": 3}))
        nested = c.post("/v1/reply", json=room({"campaign": {"code": "X", "deep": [[[[1]]]]}}))
        long_order = c.post("/v1/reply", json=room({"order": [f"p-{i}" for i in range(65)]}))
        control = c.post("/v1/reply", json=room({"campaign": "SALE\x1b[2J"}))
        ok = c.post("/v1/reply", json=room({"turns_left": 2, "campaign": None, "host": "Ava"}))
        spec = c.get("/openapi.json").json()
    assert text_time.status_code == 422 and "body.room.time_left_s" in text_time.json()["error"]["message"]
    assert typo.status_code == 422 and "turns_lefts" in typo.json()["error"]["message"]
    assert nested.status_code == 422 and long_order.status_code == 422 and control.status_code == 422
    assert ok.status_code == 200, ok.text
    system = model.calls[-1][0]["content"]
    assert "You are Ava" in system and "Room: 2 turns" in system and "Campaign: none" in system
    room_schema = spec["components"]["schemas"]["RoomState"]
    assert room_schema["additionalProperties"] is False and "turns_left" in room_schema["properties"]


# -- 4. clients that leave are cancelled -----------------------------------------------------------
def test_clients_that_leave_are_cancelled_queued_or_running():
    pytest.importorskip("prometheus_client")
    gate = Gate(outputs=(PRICE_CALL, REPLY))  # the running request would need a second round
    app = create_app("livestream", gate, max_concurrency=1, max_queue=4)
    server = app.state.server
    with serving(app) as url:
        running = _raw_post(url, "/v1/reply", {"room_id": "r", "comment": "slow"})
        assert gate.entered.wait(10)
        queued = _raw_post(url, "/v1/reply", {"room_id": "r", "comment": "queued"})
        queued_stream = _raw_post(url, "/v1/reply/stream", {"room_id": "r", "comment": "queued stream"})
        _until(lambda: server.admission.queued == 2, "two requests queued")
        queued.close()
        queued_stream.close()
        _until(lambda: server.admission.queued == 0 and server.cancelled == 2, "the queued clients cancelled")
        running.close()
        _until(lambda: gate.channel.cancel.is_set(), "the running request cancelled")
        gate.release.set()
        _until(lambda: server.admission.running == 0, "the worker returned")
        health = httpx.get(f"{url}/health").json()
        text = httpx.get(f"{url}/metrics").text
    assert gate.calls == 1  # no queued request ran, and the running one stopped before its second round
    assert health["cancelled"] == 3
    assert metric(text, 'hat_cancelled_total{endpoint="reply",stage="queued"}') == 1
    assert metric(text, 'hat_cancelled_total{endpoint="stream",stage="queued"}') == 1
    assert metric(text, 'hat_cancelled_total{endpoint="reply",stage="running"}') == 1


# -- 5. what clients may see; slow bodies --------------------------------------------------------------
def test_tool_errors_stay_in_the_trace_and_out_of_the_reply():
    traces: list[Trace] = []

    class Keep:
        def emit(self, trace: Trace) -> None:
            traces.append(trace)

    call = '<tool_call>{"name": "get_price", "arguments": {"product": "no-such-item"}}</tool_call>'
    app = create_app("livestream", ScriptedModel([call, OTHER], loop=True), sinks=[Keep()])
    with serving(app) as url:
        r = httpx.post(f"{url}/v1/reply", json={"room_id": "r", "comment": "hi"})
    body = r.json()
    record = body["tool_calls"][0]
    assert r.status_code == 200 and record["status"] == "error", r.text
    assert "LookupError" not in r.text and "no-such-item" not in r.text and body["trace_id"] in record["error"]
    assert "LookupError" in traces[0].tool_calls[0].error  # the detail is kept server-side


def test_a_request_body_that_never_arrives_gets_408_and_the_connection_closed():
    app = create_app("livestream", ScriptedModel([REPLY], loop=True), body_timeout_s=0.3)
    with serving(app) as url:
        parts = urlsplit(url)
        sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
        head = f"POST /v1/reply HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        sock.sendall((head + "Content-Length: 200\r\n\r\n").encode() + b'{"room_id": "r", ')
        t0 = time.perf_counter()
        received = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            received += chunk
        waited = time.perf_counter() - t0
        sock.close()
        health = httpx.get(f"{url}/health")
    status_line, _, rest = received.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 408"), received
    assert b'"code":"body_timeout"' in rest and waited < 4
    assert health.status_code == 200
