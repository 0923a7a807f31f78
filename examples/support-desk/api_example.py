"""The support desk from Python (run from anywhere: python examples/support-desk/api_example.py)."""

from pathlib import Path

from hat.harness import Agent, Request, ToolRegistry, load_context_provider, load_harness, tool
from hat.models import ScriptedModel

HERE = Path(__file__).parent  # the harness folder; its support_desk.py is found there, no sys.path needed


@tool(idempotent=True)
def team_hours(day: str) -> str:
    """When the human support team works on a given weekday."""
    return "closed" if day.lower() in ("saturday", "sunday") else "9:00-17:00"


harness = load_harness(HERE)
tools = ToolRegistry(harness, extra=[team_hours])  # the YAML tools, the MCP tool, and one more from Python
model = ScriptedModel([  # stands in for a real model: hat.models.load_model("openai:...#...")
    '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "SD-1002"}}</tool_call>'
    '<tool_call>{"name": "team_hours", "arguments": {"day": "Saturday"}}</tool_call>',
    '<reply>{"reply": "SD-1002 shipped with DHL, due 2026-12-04. The team is closed on Saturday."}</reply>',
])  # fmt: skip
agent = Agent(tools.harness, model, tools=tools, context_provider=load_context_provider(harness))
response = agent.respond(Request.of("Where is SD-1002? Is anyone there Saturday?", context={"customer_id": "C-100"}))
agent.close()
print(response.reply)
print([(call.name, call.status) for call in response.trace.tool_calls])
