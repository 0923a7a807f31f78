"""``@tool``: typed Python functions as tools (hat.harness.pytools)."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import textwrap
import uuid
from pathlib import Path
from types import ModuleType
from typing import Annotated, Literal

import pytest
import yaml
from pydantic import AfterValidator, BaseModel, Field

from hat.errors import ToolBindingError
from hat.harness import (
    Agent,
    Harness,
    HookSpec,
    PromptBlock,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolSpec,
    load_harness,
    spec_of,
    tool,
    tool_yaml,
    with_tools,
)
from hat.harness.loader import check_harness
from hat.models.scripted import ScriptedModel


def _order_id(value: str) -> str:
    if not value.startswith("SD-"):
        raise ValueError("an order id starts with SD-")
    return value


class Window(BaseModel):
    start: datetime.date
    days: int = 7


@tool(idempotent=True, timeout_s=3)
def find_orders(
    customer: str,
    status: Literal["open", "closed"] = "open",
    since: datetime.date | None = None,
    limit: Annotated[int, Field(ge=1, le=50, description="At most this many.")] = 10,
    tags: list[str] | None = None,
    *,
    context: ToolContext,
) -> dict:
    """Find a customer's orders.

    Only orders the signed-in agent may see
    are returned.

    Args:
        customer: The customer id,
            like C-100.
        status (str): Open or closed orders.
        since: Only orders placed on or after this day.
        limit: Ignored: the Field's description wins.

    Returns:
        The matching orders.
    """
    return {"customer": customer, "status": status, "since": since, "limit": limit, "seen": dict(context.context)}


def test_schema_comes_from_hints_and_docstring():
    assert isinstance(find_orders, Tool) and find_orders.name == "find_orders"
    assert find_orders.description == "Find a customer's orders."
    params = find_orders.parameters
    assert params["type"] == "object" and params["required"] == ["customer"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert list(props) == ["customer", "status", "since", "limit", "tags"]  # context is not a parameter
    assert props["customer"] == {"type": "string", "description": "The customer id, like C-100."}
    assert props["status"]["enum"] == ["open", "closed"] and props["status"]["default"] == "open"
    assert props["status"]["description"] == "Open or closed orders."  # "name (type): text" form
    assert {"type": "string", "format": "date"} in props["since"]["anyOf"]
    assert props["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
        "default": 10,
        "description": "At most this many.",
    }
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert "title" not in str(props)  # no "Order Id"-style titles in the prompt


def test_sphinx_params_and_nested_models():
    @tool
    def book(window: Window, note: str = "") -> str:
        """Book a window.

        :param window: When the booking starts and how long it lasts.
        :param note: Free text for the team.
        """
        return f"{window.start.isoformat()} +{window.days}"

    props = book.parameters["properties"]
    assert props["window"]["description"] == "When the booking starts and how long it lasts."
    assert props["window"]["$ref"] == "#/$defs/Window" and "Window" in book.parameters["$defs"]
    assert book.idempotent is False and book.metadata == {"function_id": "book"}
    assert book.run(window={"start": "2026-12-01"}) == "2026-12-01 +7"  # nested model validated and built


def test_docstring_sections_end_where_they_end():
    @tool
    def f(a: int, b: int = 0) -> int:
        """Add.

        Args:
            a: The first.
            b: The second,
                continued here.
        a: not this (a line at the left margin ends the section).

        Returns:
            c: not a parameter either.
        """
        return a + b

    props = f.parameters["properties"]
    assert props["a"]["description"] == "The first." and props["b"]["description"] == "The second, continued here."
    assert f.description == "Add."


def test_the_decorated_function_stays_callable():
    ctx = ToolContext(context={"customer_id": "C-1"})
    direct = find_orders("C-1", "closed", context=ctx)  # positional, unvalidated, as written
    assert direct["status"] == "closed" and direct["seen"] == {"customer_id": "C-1"}
    assert find_orders.__name__ == "find_orders" and find_orders.__doc__.startswith("Find a customer's orders.")
    assert find_orders.__wrapped__.__name__ == "find_orders"


def test_run_validates_passes_context_and_returns_json():
    ctx = ToolContext(context={"customer_id": "C-9"})
    out = find_orders.run(customer="C-9", since="2026-11-02", context=ctx)
    assert out == {
        "customer": "C-9",
        "status": "open",
        "since": "2026-11-02",
        "limit": 10,
        "seen": {"customer_id": "C-9"},
    }
    assert find_orders.run(customer="C-9")["seen"] == {}  # no context given: an empty one


def test_context_annotation_need_not_resolve():
    def lookup(order_id: str, *, context: NotImportedAnywhere) -> str:  # noqa: F821 (only a name, never evaluated)
        """Look up an order."""
        return f"{order_id}@{context.request_id}"

    made = tool(lookup)
    assert list(made.parameters["properties"]) == ["order_id"]
    assert made.run(order_id="SD-1", context=ToolContext(request_id="r1")) == "SD-1@r1"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(x):\n    'Doc.'\n", "needs a type hint"),
        ("def f(*xs: int):\n    'Doc.'\n", "cannot be passed by name"),
        ("def f(x: int, /):\n    'Doc.'\n", "cannot be passed by name"),
        ("def f(**kw: int):\n    'Doc.'\n", "cannot be passed by name"),
        ("def f(x: int):\n    pass\n", "needs a description"),
        ("from __future__ import annotations\ndef f(x: Undefined):\n    'Doc.'\n", "cannot resolve its type hints"),
    ],
)
def test_what_cannot_become_a_schema_fails_at_decoration(source, message):
    namespace: dict = {}
    exec(source, namespace)
    with pytest.raises(TypeError, match=message):
        tool(namespace["f"])


def _bare_harness(*hooks: HookSpec) -> Harness:
    return Harness(name="t", version="1", blocks=(PromptBlock("role", "You help."),), pipeline=("role",), hooks=hooks)


CALLS: list[str] = []


@tool(idempotent=True)
def cancel_check(order_id: Annotated[str, AfterValidator(_order_id)], reason: str = "") -> dict:
    """Check whether an order can be cancelled.

    Args:
        order_id: The order number, like SD-1001.
    """
    CALLS.append(order_id)
    return {"order_id": order_id, "cancellable": True}


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"order_id": 1001}, "order_id: 1001 is not of type 'string'"),  # the JSON Schema
        ({"order_id": "SD-1", "urgent": True}, "'urgent' was unexpected"),  # undeclared argument
        ({}, "'order_id' is a required property"),
        ({"order_id": "X-1"}, "at order_id: Value error, an order id starts with SD-"),  # pydantic only
    ],
)
def test_validation_errors_become_invalid_args_observations(arguments, where):
    CALLS.clear()
    registry = ToolRegistry(_bare_harness(), extra=[cancel_check])
    try:
        result = registry.call("cancel_check", arguments)
        ok = registry.call("cancel_check", {"order_id": "SD-1"})
    finally:
        registry.close()
    assert result.status == "invalid_args" and where in result.error, result.error
    assert ok.ok and ok.result == {"order_id": "SD-1", "cancellable": True}
    assert CALLS == ["SD-1"]  # the invalid call never reached the function


def test_invalid_args_reach_the_model_as_an_observation():
    registry = ToolRegistry(_bare_harness(), extra=[cancel_check])
    model = ScriptedModel(
        [
            '<tool_call>{"name": "cancel_check", "arguments": {"order_id": "X-1"}}</tool_call>',
            '<reply>{"reply": "Could you check the order number?"}</reply>',
        ]
    )
    agent = Agent(registry.harness, model, tools=registry)
    try:
        trace = agent.respond("cancel X-1").trace
    finally:
        agent.close()
    (call,) = trace.tool_calls
    assert call.status == "invalid_args" and "starts with SD-" in call.result["error"]
    assert "starts with SD-" in model.calls[1][-1]["content"]  # the model saw why
    assert trace.status == "ok" and trace.tools_visible == ("cancel_check",)


ATTEMPTS: dict[str, int] = {}


def _slow_once(key: str) -> str:
    ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    if ATTEMPTS[key] == 1:
        raise TimeoutError("backend slow")
    return "done"


@tool(idempotent=True)
def read_status(key: str) -> str:
    """Read a status (a lookup: safe to run twice)."""
    return _slow_once(f"read:{key}")


@tool
def send_refund(key: str) -> str:
    """Send a refund (a side effect: never run twice)."""
    return _slow_once(f"send:{key}")


def test_idempotent_flag_decides_retries():
    assert spec_of(read_status)["idempotent"] is True and spec_of(send_refund)["idempotent"] is False
    retry = HookSpec("tool_retry", {"retries": 2, "backoff_s": 0.0, "statuses": ["timeout"]})
    registry = ToolRegistry(_bare_harness(retry), extra=[read_status, send_refund])
    assert registry.is_idempotent("read_status") and not registry.is_idempotent("send_refund")
    calls = (
        '<tool_call>{"name": "read_status", "arguments": {"key": "a"}}</tool_call>'
        '<tool_call>{"name": "send_refund", "arguments": {"key": "a"}}</tool_call>'
    )
    agent = Agent(registry.harness, ScriptedModel([calls, '<reply>{"reply": "ok"}</reply>']), tools=registry)
    ATTEMPTS.clear()
    try:
        read, send = agent.respond("go").trace.tool_calls
    finally:
        agent.close()
    assert (read.status, read.attempts, read.result) == ("ok", 2, "done")  # retried after the timeout
    assert (send.status, send.attempts) == ("timeout", 1)  # a side effect is not re-run
    assert ATTEMPTS == {"read:a": 2, "send:a": 1}


def test_with_tools_and_registry_extra():
    existing = ToolSpec("cancel_check", "old", {"type": "object"}, "python:x:y")
    harness = _bare_harness().replace(tools=(existing,))
    extended = with_tools(harness, [read_status, cancel_check])
    assert [t.name for t in extended.tools] == ["cancel_check", "read_status"]  # replaced in place, appended
    assert extended.tool("cancel_check").description.startswith("Check whether")
    assert extended.tool("read_status").binding == f"python:{__name__}:read_status"
    assert harness.tools == (existing,)  # pure
    with pytest.raises(ToolBindingError, match="share the name"):
        ToolRegistry(harness, extra=[read_status, tool(name="read_status")(send_refund)])


def test_plain_typed_functions_work_too():
    def add(a: int, b: int = 1) -> int:
        """Add two numbers."""
        return a + b

    assert spec_of(add)["parameters"]["required"] == ["a"]
    registry = ToolRegistry(_bare_harness(), extra=[add])
    try:
        assert registry.call("add", {"a": 2}).result == 3
    finally:
        registry.close()


TOOLS_MODULE = '''
from __future__ import annotations

import datetime

from hat.harness import ToolContext, tool


@tool(idempotent=True)
def days_until(day: datetime.date, *, context: ToolContext) -> dict:
    """Days from the request's today to a day.

    Args:
        day: The day, as YYYY-MM-DD.
    """
    today = datetime.date.fromisoformat(context.context["today"])
    return {"day": day, "days": (day - today).days}
'''


@pytest.fixture
def bound_harness(tmp_path, monkeypatch) -> tuple[Path, ModuleType]:
    """A harness folder whose tools/*.yaml binds a decorated function in a module of the folder
    (a fresh module name per test: validation locates a module through ``sys.modules`` first)."""
    root = tmp_path / "h"
    (root / "prompts").mkdir(parents=True)
    (root / "tools").mkdir()
    (root / "harness.yaml").write_text("name: bound\nversion: '1'\npipeline: [role]\n")
    (root / "prompts" / "role.md").write_text("You count days.")
    name = f"calendar_tools_{uuid.uuid4().hex[:8]}"
    (root / f"{name}.py").write_text(textwrap.dedent(TOOLS_MODULE))
    monkeypatch.syspath_prepend(str(root))
    module = importlib.import_module(name)
    (root / "tools" / "days_until.yaml").write_text(tool_yaml(module.days_until))
    return root, module


def test_generated_yaml_is_a_valid_binding_that_runs_validated(bound_harness):
    root, module = bound_harness
    text = (root / "tools" / "days_until.yaml").read_text()
    assert yaml.safe_load(text) == spec_of(module.days_until)
    assert f"binding: python:{module.__name__}:days_until" in text
    check = check_harness(root)
    assert check.ok and not check.warnings, (check.errors, check.warnings)
    registry = ToolRegistry(load_harness(root))  # imported by name from the YAML binding
    try:
        ok = registry.call("days_until", {"day": "2026-12-25"}, ToolContext(context={"today": "2026-12-01"}))
        bad = registry.call("days_until", {"day": "Christmas"}, ToolContext(context={"today": "2026-12-01"}))
    finally:
        registry.close()
    assert ok.result == {"day": "2026-12-25", "days": 24}  # a date in, a date back out as JSON
    assert bad.status == "invalid_args" and "at day" in bad.error


def test_renamed_parameters_are_validated_under_their_canonical_names(bound_harness):
    harness = load_harness(bound_harness[0])
    spec = harness.tool("days_until")
    params = {**spec.parameters, "properties": {"when": spec.parameters["properties"]["day"]}, "required": ["when"]}
    renamed = dataclasses.replace(spec, parameters=params, metadata={**spec.metadata, "param_map": {"day": "when"}})
    registry = ToolRegistry(harness.replace(tools=(renamed,)))
    ctx = ToolContext(context={"today": "2026-12-01"})
    try:
        ok = registry.call("days_until", {"when": "2026-12-02"}, ctx)
        bad = registry.call("days_until", {"when": "soon"}, ctx)
        old = registry.call("days_until", {"day": "2026-12-02"}, ctx)
    finally:
        registry.close()
    assert ok.result["days"] == 1
    assert bad.status == "invalid_args" and "at day" in bad.error
    assert old.status == "invalid_args"  # the old name is not part of the renamed schema
