"""The evolvable harness: state, loading/validation, prompt pipeline, hooks, tools, runtime, trace."""

from hat.harness.hooks import BUILTIN_HOOKS, Hook, HookContext, Verdict
from hat.harness.loader import (
    load_context_provider,
    load_harness,
    resolve_harness_path,
    save_harness,
    validate_harness,
)
from hat.harness.pipeline import RenderedPrompt, render_prompt, template_context
from hat.harness.protocol import ParsedOutput, ToolCall, parse_output
from hat.harness.pytools import Tool, spec_of, tool, tool_yaml, with_tools
from hat.harness.runtime import Agent, Request, Response
from hat.harness.sinks import CallbackSink, ConsoleSink, JSONLSink, Sink
from hat.harness.state import (
    Harness,
    HarnessDiff,
    HookSpec,
    Limits,
    OutputFormat,
    PromptBlock,
    Skill,
    ToolSpec,
    diff_harness,
)
from hat.harness.tools import ToolContext, ToolRegistry, ToolResult
from hat.harness.trace import HookEvent, Round, ToolCallRecord, Trace, read_traces, write_traces

__all__ = [
    "BUILTIN_HOOKS",
    "Agent",
    "CallbackSink",
    "ConsoleSink",
    "Harness",
    "HarnessDiff",
    "Hook",
    "HookContext",
    "HookEvent",
    "HookSpec",
    "JSONLSink",
    "Limits",
    "OutputFormat",
    "ParsedOutput",
    "PromptBlock",
    "RenderedPrompt",
    "Request",
    "Response",
    "Round",
    "Sink",
    "Skill",
    "Tool",
    "ToolCall",
    "ToolCallRecord",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "Trace",
    "Verdict",
    "diff_harness",
    "load_context_provider",
    "load_harness",
    "parse_output",
    "read_traces",
    "render_prompt",
    "resolve_harness_path",
    "save_harness",
    "spec_of",
    "template_context",
    "tool",
    "tool_yaml",
    "validate_harness",
    "with_tools",
    "write_traces",
]
