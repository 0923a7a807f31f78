"""MCPServerPool against a real MCP server subprocess (tests/fixtures/mcp_server.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from hat.errors import MissingDependencyError, ToolBindingError
from hat.harness.mcp_client import MCPResult, MCPServerPool, _to_result

SERVER_SCRIPT = str(Path(__file__).parent / "fixtures" / "mcp_server.py")


def catalog(**extra: object) -> dict[str, dict[str, object]]:
    return {"catalog": {"command": sys.executable, "args": [SERVER_SCRIPT], **extra}}


@pytest.fixture(scope="module")
def pool() -> Iterator[MCPServerPool]:
    with MCPServerPool(catalog()) as shared:
        yield shared


def test_list_tools_gives_names_descriptions_and_schemas(pool: MCPServerPool) -> None:
    tools = {t["name"]: t for t in pool.list_tools("catalog")}
    assert {"add", "echo", "get_price", "slow", "fail"} <= set(tools)
    add = tools["add"]
    assert set(add) == {"name", "description", "inputSchema"}
    assert add["description"] == "Add two integers."
    assert add["inputSchema"]["properties"]["a"]["type"] == "integer"
    assert sorted(add["inputSchema"]["required"]) == ["a", "b"]
    assert tools["get_price"]["inputSchema"]["properties"]["product_id"]["type"] == "string"


def test_call_tool_returns_plain_values(pool: MCPServerPool) -> None:
    added = pool.call_tool("catalog", "add", {"a": 2, "b": 3}, timeout_s=5)
    assert added == MCPResult(content=5, is_error=False, text="5")
    echoed = pool.call_tool("catalog", "echo", {"text": "hello"}, timeout_s=5)
    assert (echoed.content, echoed.is_error) == ("hello", False)


def test_get_price_gives_a_dict(pool: MCPServerPool) -> None:
    result = pool.call_tool("catalog", "get_price", {"product_id": "sku-1"}, timeout_s=5)
    assert result.content == {"product_id": "sku-1", "price": 19.9}
    assert not result.is_error
    assert "19.9" in result.text


def test_tool_error_is_returned_not_raised(pool: MCPServerPool) -> None:
    result = pool.call_tool("catalog", "fail", {"message": "out of stock"}, timeout_s=5)
    assert result.is_error
    assert "out of stock" in result.text


def test_unknown_tool_and_bad_arguments_are_observations(pool: MCPServerPool) -> None:
    unknown = pool.call_tool("catalog", "no_such_tool", {}, timeout_s=5)
    assert unknown.is_error and "no_such_tool" in unknown.text
    bad = pool.call_tool("catalog", "add", {"a": "x"}, timeout_s=5)
    assert bad.is_error and "add" in bad.text


def test_timeout_raises_quickly_and_the_session_survives(pool: MCPServerPool) -> None:
    pool.list_tools("catalog")  # started, so the timing below measures the call only
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="slow"):
        pool.call_tool("catalog", "slow", {"seconds": 5}, timeout_s=0.5)
    assert time.monotonic() - start < 2.0
    assert pool.call_tool("catalog", "add", {"a": 1, "b": 1}, timeout_s=5).content == 2


def test_unknown_server_lists_the_declared_ones(pool: MCPServerPool) -> None:
    with pytest.raises(ToolBindingError, match=r"'inventory'.*catalog"):
        pool.call_tool("inventory", "add", {"a": 1, "b": 2})


def test_bad_command_names_the_server_and_command() -> None:
    servers = {"pricing": {"command": "/nonexistent/hat-mcp-server", "args": ["--stdio"]}}
    with MCPServerPool(servers) as broken, pytest.raises(ToolBindingError) as info:
        broken.call_tool("pricing", "get_price", {"product_id": "x"}, timeout_s=5)
    message = str(info.value)
    assert "'pricing'" in message and "/nonexistent/hat-mcp-server --stdio" in message
    assert "not found" in message and "harness.yaml" in message


def test_server_that_exits_at_start_shows_its_stderr() -> None:
    script = "import sys; print('catalog db missing', file=sys.stderr); sys.exit(2)"
    servers = {"catalog": {"command": sys.executable, "args": ["-c", script]}}
    pattern = r"(?s)'catalog'.*failed to start.*catalog db missing"
    with MCPServerPool(servers) as broken, pytest.raises(ToolBindingError, match=pattern):
        broken.list_tools("catalog", timeout_s=5)


def test_server_that_never_answers_times_out_at_start() -> None:
    mute = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}
    with MCPServerPool({"mute": mute}, start_timeout_s=0.5) as broken:
        start = time.monotonic()
        with pytest.raises(ToolBindingError, match=r"'mute'.*did not finish the MCP handshake within 0\.5s"):
            broken.call_tool("mute", "add", {"a": 1, "b": 2}, timeout_s=5)
        assert time.monotonic() - start < 2.0


def test_bad_config_is_rejected_before_anything_starts() -> None:
    with pytest.raises(ToolBindingError, match=r"mcp_servers\.catalog.*command"):
        MCPServerPool({"catalog": {"args": ["x"]}})


def test_concurrent_calls_from_four_threads_share_one_server() -> None:
    results: dict[int, list[object]] = {}

    def work(i: int) -> None:
        calls = [fresh.call_tool("catalog", "add", {"a": i, "b": k}, timeout_s=10) for k in range(5)]
        results[i] = [c.content for c in calls]
        results[i].append(fresh.call_tool("catalog", "pid", {}, timeout_s=10).content)

    with MCPServerPool(catalog()) as fresh:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
    assert {i: r[:5] for i, r in results.items()} == {i: [i + k for k in range(5)] for i in range(4)}
    assert len({r[5] for r in results.values()}) == 1  # first use from 4 threads started one server


def test_dead_server_is_restarted_on_the_next_call() -> None:
    with MCPServerPool(catalog()) as fresh:
        first_pid = fresh.call_tool("catalog", "pid", {}, timeout_s=10).content
        with pytest.raises(ToolBindingError, match=r"'catalog'.*closed the connection"):
            fresh.call_tool("catalog", "crash", {}, timeout_s=10)
        second_pid = fresh.call_tool("catalog", "pid", {}, timeout_s=10).content
        assert second_pid != first_pid
        os.kill(second_pid, signal.SIGKILL)  # dies while idle: the next call just restarts it
        time.sleep(0.3)
        assert fresh.call_tool("catalog", "add", {"a": 20, "b": 22}, timeout_s=10).content == 42


def test_close_returns_fast_and_is_final() -> None:
    threads_before = set(threading.enumerate())
    fresh = MCPServerPool(catalog())
    server_pid = fresh.call_tool("catalog", "pid", {}, timeout_s=10).content
    start = time.monotonic()
    fresh.close()
    fresh.close()
    assert time.monotonic() - start < 1.5
    with pytest.raises(ProcessLookupError):  # the server process is gone (and reaped)
        os.kill(server_pid, 0)
    assert not set(threading.enumerate()) - threads_before  # and so is the loop thread
    with pytest.raises(RuntimeError, match="closed"):
        fresh.call_tool("catalog", "add", {"a": 1, "b": 2})


def test_mcp_is_imported_lazily_and_its_absence_gives_an_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code = "import sys, hat.harness.mcp_client; assert 'mcp' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    monkeypatch.setitem(sys.modules, "mcp", None)  # makes `import mcp` fail
    with MCPServerPool(catalog()) as no_sdk, pytest.raises(MissingDependencyError, match=r"hat-agent\[mcp\]"):
        no_sdk.call_tool("catalog", "add", {"a": 1, "b": 2})


class _Raw:
    def __init__(self, text: str, structured: object = None, is_error: bool = False) -> None:
        self.content = [type("Block", (), {"type": "text", "text": text})()]
        self.structured_content, self.is_error = structured, is_error


def test_result_conversion_unwraps_only_the_sdk_result_wrapper() -> None:
    assert _to_result(_Raw("5", {"result": 5})).content == 5
    assert _to_result(_Raw('{"result": 5}', {"result": 5})).content == {"result": 5}
    assert _to_result(_Raw("[1, 2]")).content == [1, 2]
    assert _to_result(_Raw("not json")).content == "not json"
