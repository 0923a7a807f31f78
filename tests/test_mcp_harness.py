"""A harness tool bound to a real MCP server process, called through the agent loop."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from hat.harness import Agent, load_harness
from hat.models.scripted import ScriptedModel

SERVER = Path(__file__).parent / "fixtures" / "mcp_server.py"


def test_agent_calls_mcp_tool(mini_harness_dir):
    yaml_path = mini_harness_dir / "harness.yaml"
    yaml_path.write_text(
        yaml_path.read_text()
        + f"mcp_servers:\n  shop: {{command: {json.dumps(sys.executable)}, args: [{json.dumps(str(SERVER))}]}}\n"
    )
    (mini_harness_dir / "tools" / "remote_price.yaml").write_text(
        "name: remote_price\ndescription: Price from the shop server.\n"
        "parameters: {type: object, properties: {product_id: {type: string}}, required: [product_id]}\n"
        "binding: mcp:shop/get_price\ntimeout_s: 20\n"
    )
    (mini_harness_dir / "tools" / "remote_fail.yaml").write_text(
        "name: remote_fail\ndescription: Always fails.\n"
        "parameters: {type: object, properties: {message: {type: string}}, required: [message]}\n"
        "binding: mcp:shop/fail\ntimeout_s: 20\n"
    )
    calls = (
        '<tool_call>{"name": "remote_price", "arguments": {"product_id": "p-9"}}</tool_call>'
        '<tool_call>{"name": "remote_fail", "arguments": {"message": "shop closed"}}</tool_call>'
    )
    agent = Agent(load_harness(mini_harness_dir), ScriptedModel([calls, '<reply>{"reply": "It is 19.9!"}</reply>']))
    try:
        trace = agent.respond("price of p-9?").trace
    finally:
        agent.close()
    ok, failed = trace.tool_calls
    assert ok.status == "ok" and ok.result["price"] == 19.9 and ok.result["product_id"] == "p-9"
    assert failed.status == "error" and "shop closed" in failed.error
    assert trace.reply == "It is 19.9!"  # grounded by the MCP tool's result
