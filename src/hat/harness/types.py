"""The runtime's states, one ``Literal`` each, so mypy checks every value the code sets or compares.

Kept in one module because the trace, the hooks, the tool registry and the protocol parser all
speak about the same requests: a status written by one and read by another must be the same word.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "CallKind",
    "CallStatus",
    "Mode",
    "Outcome",
    "OutputKind",
    "RoundAction",
    "ToolStatus",
    "TraceStatus",
    "VerdictAction",
]

Mode = Literal["single", "multi"]
"""``single``: one user turn per request; ``multi``: several turns answered in one reply."""

VerdictAction = Literal["allow", "block", "rewrite", "retry"]
"""What a hook decided: let it pass, stop it, replace the value (``Verdict.value``), or send the
reason back to the model for another round."""

ToolStatus = Literal["ok", "error", "timeout", "unknown_tool", "invalid_args", "blocked"]
"""How one tool call ended (:class:`~hat.harness.tools.ToolResult`)."""

CallStatus = ToolStatus | Literal["unknown_skill", "not_run"]
"""How one dispatched call of a round ended: a tool status, a skill load that named no skill, or
``not_run`` (a trace rebuilt from a single completion for reward scoring: the call was parsed,
never executed)."""

CallKind = Literal["tool", "skill"]

Outcome = Literal["", "not_started", "unknown"]
"""For a call abandoned at its timeout: ``not_started`` (it never ran) or ``unknown`` (it was
running and may still take effect); empty otherwise."""

OutputKind = Literal["tool_calls", "reply", "invalid"]
"""What the model's output parsed as (:class:`~hat.harness.protocol.ParsedOutput`)."""

RoundAction = OutputKind | Literal["rejected", "error"]
"""What one round did: ``rejected`` - a stop-check hook (or the comment guard) refused the reply;
``error`` - the model backend failed."""

TraceStatus = Literal["ok", "fallback", "refused", "error", "incomplete", "invalid"]
"""How a request ended: ``ok``; ``fallback`` (no accepted reply within the limits, or a hook
blocked it: the harness's fallback reply was sent); ``refused`` (an input hook refused the
request); ``error`` (the backend failed). Traces rebuilt from one completion for reward scoring
(:func:`hat.judge.rewards.trace_from_completion`) also use ``incomplete`` (the completion called
tools, so no reply yet) and ``invalid`` (it did not parse)."""
