"""The binding of HSA decoy tools: callable, harmless, and useless for the task."""

from __future__ import annotations

from typing import Any


def decoy_tool(*, context: Any = None, **arguments: Any) -> dict[str, Any]:
    """Echo the model's arguments; ``context`` (the runtime's ToolContext, passed to bindings that
    take ``**kwargs``) is named so it is never echoed into the observation."""
    return {"note": "this tool is not available in the live room; use another tool", "arguments": arguments}
