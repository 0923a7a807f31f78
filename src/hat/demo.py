"""``hat demo``: a short simulated live session answered by the agent.

A scripted host talks, viewer comments arrive, the agent answers each one with the current
harness. Library side only: the CLI renders the progress; this module yields one record per
reply, in the shape ``hat demo --json`` prints.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hat.harness.runtime import Agent, Request, Response

__all__ = ["demo_records", "reply_record"]


def reply_record(comment: str, response: Response, host: str | None = None) -> dict[str, Any]:
    """One JSON-able line: the fields a consumer of ``--json`` can rely on, plus the full trace."""
    trace = response.trace
    return {
        "host": host,
        "comment": comment,
        "reply": response.reply,
        "status": trace.status,
        "harness_hash": trace.harness_hash,
        "rounds": len(trace.rounds),
        "tool_calls": [
            {
                "name": c.name,
                "arguments": c.arguments,
                "status": c.status,
                "latency_ms": round(c.latency_ms, 2),
            }
            for c in trace.tool_calls
        ],
        "skills_loaded": list(trace.skills_loaded),
        "latency_ms": round(trace.latency_ms, 1),
        "model_ms": round(trace.model_ms, 1),
        "prompt_tokens": trace.prompt_tokens,
        "completion_tokens": trace.completion_tokens,
        "trace": trace.to_dict(),
    }


def demo_records(
    agent: Agent, stream: list[dict[str, Any]], room: dict[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """Answer each ``{"host": ..., "comment": ...}`` item in order. The room state carries over
    between comments (a product link switched by one reply stays switched), as in a real stream."""
    state_room = dict(room or {})
    for item in stream:
        request = Request.of(item["comment"], context={"room": state_room})
        response = agent.respond(request)
        state_room = dict(response.trace.context.get("request", {}).get("room", state_room))
        if "on_display" in response.trace.context.get("state", {}):  # a switched product link stays
            state_room["on_display"] = response.trace.context["state"]["on_display"]
        yield reply_record(item["comment"], response, item.get("host"))
