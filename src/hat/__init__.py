"""HAT - Harness-Aware Training toolkit: compact LLM agents that survive an evolving harness.

Public API (everything else is internal and may change)::

    from hat import load_harness, Agent, Request, load_model
    harness = load_harness("livestream")
    agent = Agent(harness, load_model("smollm2-hat"), context_provider=load_context_provider(harness))
    print(agent.respond(Request.of("how much is the dress?")).reply)
"""

from hat.errors import HarnessError, HarnessValidationError, HatError, ModelError, ModelSpecError
from hat.harness import (
    Agent,
    Harness,
    Hook,
    Request,
    Response,
    Trace,
    Verdict,
    diff_harness,
    load_context_provider,
    load_harness,
    save_harness,
    tool,
    validate_harness,
)
from hat.models import load_model

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "Harness",
    "HarnessError",
    "HarnessValidationError",
    "HatError",
    "Hook",
    "ModelError",
    "ModelSpecError",
    "Request",
    "Response",
    "Trace",
    "Verdict",
    "__version__",
    "diff_harness",
    "load_context_provider",
    "load_harness",
    "load_model",
    "save_harness",
    "tool",
    "validate_harness",
]
