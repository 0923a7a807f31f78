"""The support desk's ticketing system, as a small MCP server over stdio.

``harness.yaml`` declares it under ``mcp_servers`` (``python mcp_server.py``, started in this
folder) and ``tools/open_ticket.yaml`` binds ``mcp:desk/open_ticket``. It stands in for a real
ticketing API: the ticket number is derived from the order number, so runs are repeatable, and
nothing is written anywhere.
"""

from __future__ import annotations

from typing import Literal

try:  # mcp 2.x names the high-level server MCPServer; 1.x called it FastMCP
    from mcp.server.mcpserver import MCPServer as _Server
except ImportError:  # pragma: no cover - mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server

server = _Server("support-desk-tickets")

QUEUES = {"refund": "billing", "charge": "billing", "damaged": "returns", "broken": "returns", "wrong": "returns"}


@server.tool()
def open_ticket(order_id: str, reason: str, priority: Literal["normal", "urgent"] = "normal") -> dict:
    """Open a ticket for the human support team about one order."""
    digits = "".join(c for c in order_id if c.isdigit()) or "0"
    queue = next((q for word, q in QUEUES.items() if word in reason.lower()), "support")
    hours = 4 if priority == "urgent" else 24
    return {"ticket_id": f"T-{digits}", "queue": queue, "first_reply_within_hours": hours}


if __name__ == "__main__":
    server.run("stdio")
