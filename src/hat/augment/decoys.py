"""The binding of HSA decoy tools: callable, harmless, and useless for the task."""

from __future__ import annotations

from typing import Any


def decoy_tool(**arguments: Any) -> dict[str, Any]:
    return {"note": "this tool is not available in the live room; use another tool", "arguments": arguments}
