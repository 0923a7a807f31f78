"""Tool execution safety: bulkheads, abandoned timeouts, idempotent-only retries, the retry bound,
and the ``tool_policy`` before-tool hook for side-effecting tools (issue 11, finding 2)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from hat.errors import HarnessValidationError
from hat.harness import Agent, Hook, Request, Verdict, load_harness
from hat.harness.state import Harness, HookSpec, Limits, ToolSpec
from hat.harness.tools import ToolContext, ToolRegistry
from hat.models.scripted import ScriptedModel

CALLS: dict[str, int] = {}
_LOCK = threading.Lock()
RELEASE = threading.Event()  # set to free every hung tool of this module
SIDE_EFFECT_S = 0.6  # how long the slow side effect takes; its timeout is far shorter
TIMEOUT_S = 0.2


def _count(name: str) -> int:
    with _LOCK:
        CALLS[name] = CALLS.get(name, 0) + 1
        return CALLS[name]


def slow_side_effect(order: str, *, context: ToolContext) -> dict[str, Any]:
    """A hand-off that takes longer than its timeout, then records its effect in the request state."""
    _count(f"side:{order}")
    time.sleep(SIDE_EFFECT_S)
    context.state.setdefault("tickets", []).append(order)
    return {"ticket": order}


def hung(key: str = "") -> dict[str, Any]:
    _count(f"hung:{key}")
    RELEASE.wait(10)
    return {"released": True}


def quick(key: str = "") -> dict[str, Any]:
    _count(f"quick:{key}")
    return {"ok": True}


def slow_first_lookup(key: str) -> dict[str, Any]:
    """A lookup that misses its timeout the first time per key and answers afterwards."""
    if _count(f"lookup:{key}") == 1:
        time.sleep(SIDE_EFFECT_S)
    return {"key": key, "stock": 3}


def always_fails(key: str = "") -> dict[str, Any]:
    _count(f"fail:{key}")
    raise RuntimeError("backend down")


def _tool(name: str, *, idempotent: bool = False, **metadata: Any) -> ToolSpec:
    params = {"type": "object", "properties": {"order": {"type": "string"}, "key": {"type": "string"}}}
    return ToolSpec(name, f"{name} tool", params, f"python:{__name__}:{name}", idempotent=idempotent, metadata=metadata)


TOOLS = (
    _tool("slow_side_effect"),
    _tool("hung", max_concurrency=1),
    _tool("quick"),
    _tool("slow_first_lookup", idempotent=True),
    _tool("always_fails", idempotent=True),
    _tool("fails_once_effect"),
)


def fails_once_effect(key: str = "") -> dict[str, Any]:
    _count(f"effect:{key}")
    raise RuntimeError("half done")


def harness(*hooks: HookSpec, **limits: Any) -> Harness:
    lim = Limits(**{"tool_timeout_s": TIMEOUT_S, "max_rounds": 6, "max_retries": 3, **limits})
    return Harness("safety", "1", tools=TOOLS, hooks=hooks, limits=lim)


def retry(retries: int = 3, statuses: tuple[str, ...] = ("timeout",)) -> HookSpec:
    return HookSpec("tool_retry", {"retries": retries, "backoff_s": 0.0, "statuses": list(statuses)})


def call(name: str, /, **args: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


REPLY = '<reply>{"reply": "On it!"}</reply>'


@pytest.fixture(autouse=True)
def _release_hung_tools():
    RELEASE.clear()
    yield
    RELEASE.set()  # no hung worker outlives its test


# -- abandoned timeouts --------------------------------------------------------------------------
def test_timed_out_side_effect_runs_exactly_once_and_late_writes_never_count() -> None:
    agent = Agent(harness(retry(3)), ScriptedModel([call("slow_side_effect", order="o-1"), REPLY]))
    try:
        trace = agent.respond("refund please").trace
        time.sleep(SIDE_EFFECT_S * 2.5)  # well past its duration: a late second run would show now
    finally:
        agent.close()
    record = trace.tool_calls[0]
    assert (record.status, record.outcome, record.attempts) == ("timeout", "unknown", 1)
    assert "outcome is unknown" in record.result["error"]
    assert CALLS["side:o-1"] == 1  # invoked exactly once in total, although tool_retry allows 3 retries
    assert "tickets" not in trace.context["state"]  # the abandoned call's late write was discarded


class AlwaysRetry(Hook):
    """A hook that asks for every failed call to run again (a careless project hook)."""

    name = "always_retry"

    def on_tool_error(self, ctx, name, arguments, status, error, attempt) -> Verdict:
        return Verdict.retry("again")


def test_runtime_never_reruns_a_non_idempotent_tool_whatever_a_hook_asks() -> None:
    model = ScriptedModel([call("slow_side_effect", order="o-2"), call("fails_once_effect", key="e"), REPLY])
    agent = Agent(harness(), model, extra_hooks=[AlwaysRetry()])
    try:
        trace = agent.respond("x").trace
        time.sleep(SIDE_EFFECT_S * 2)
    finally:
        agent.close()
    assert [c.attempts for c in trace.tool_calls] == [1, 1]
    assert CALLS["side:o-2"] == 1 and CALLS["effect:e"] == 1
    refused = [e for e in trace.hook_events if e.hook == "tool_safety"]
    assert [e.verdict for e in refused] == ["block", "block"] and "not idempotent" in refused[0].reason


def test_idempotent_tool_is_retried_after_a_timeout() -> None:
    agent = Agent(harness(retry(1)), ScriptedModel([call("slow_first_lookup", key="k1"), REPLY]))
    try:
        record = agent.respond("in stock?").trace.tool_calls[0]
    finally:
        agent.close()
    assert (record.status, record.attempts, record.result["stock"]) == ("ok", 2, 3)


def test_retry_count_follows_the_hook_setting_not_a_hidden_cap() -> None:
    agent = Agent(harness(retry(7, ("error",))), ScriptedModel([call("always_fails", key="r7"), REPLY]))
    try:
        record = agent.respond("x").trace.tool_calls[0]
    finally:
        agent.close()
    assert record.status == "error" and record.attempts == 8 and CALLS["fail:r7"] == 8


# -- bulkheads -----------------------------------------------------------------------------------
def test_hung_tool_does_not_block_other_tools() -> None:
    registry = ToolRegistry(harness())
    try:
        with ThreadPoolExecutor(20) as pool:  # more hung calls than the old shared pool's 16 workers
            hung_results = [pool.submit(registry.call, "hung", {"key": f"h{i}"}) for i in range(20)]
            time.sleep(0.05)
            start = time.perf_counter()
            fast = registry.call("quick", {"key": "q"})
            fast_s = time.perf_counter() - start
            outcomes = [f.result().outcome for f in hung_results]
        RELEASE.set()
        time.sleep(0.1)
    finally:
        registry.close()
    assert fast.status == "ok" and fast_s < TIMEOUT_S  # did not wait behind the hung backend
    assert outcomes.count("unknown") == 1 and outcomes.count("not_started") == 19  # its bulkhead holds 1 worker
    assert sum(v for k, v in CALLS.items() if k.startswith("hung:h")) == 1  # queued calls were cancelled, never ran


def test_bulkhead_size_comes_from_metadata_or_the_registry_default() -> None:
    registry = ToolRegistry(harness(), max_concurrency=3)
    try:
        assert registry.concurrency["hung"] == 1 and registry.concurrency["quick"] == 3
    finally:
        registry.close()


# -- before_tool policy --------------------------------------------------------------------------
def _policy(**config: Any) -> HookSpec:
    return HookSpec("tool_policy", config)


def test_policy_limits_side_effects_per_request_by_default() -> None:
    outputs = [call("quick", key="p1"), call("quick", key="p2"), call("slow_first_lookup", key="p3")]
    agent = Agent(harness(_policy()), ScriptedModel([*outputs, call("slow_first_lookup", key="p3"), REPLY]))
    try:
        trace = agent.respond("x").trace
    finally:
        agent.close()
    statuses = [(c.name, c.status) for c in trace.tool_calls]
    assert statuses == [
        ("quick", "ok"),
        ("quick", "blocked"),  # not idempotent: once per request
        ("slow_first_lookup", "timeout"),
        ("slow_first_lookup", "ok"),  # idempotent: no default limit
    ]
    assert "at most 1 time(s)" in trace.tool_calls[1].error and "quick:p2" not in CALLS


def test_policy_requires_a_preceding_lookup_and_matches_renamed_tools() -> None:
    renamed = tuple(
        ToolSpec("open_ticket", t.description, t.parameters, t.binding, metadata={"function_id": "quick"})
        if t.name == "quick"
        else t
        for t in TOOLS
    )
    rules = {"quick": {"max_calls": 2, "requires_any": ["slow_first_lookup"]}}
    h = harness(_policy(rules=rules)).replace(tools=renamed)
    outputs = [call("open_ticket", key="t1"), call("slow_first_lookup", key="t2"), call("open_ticket", key="t3")]
    agent = Agent(h, ScriptedModel([*outputs, REPLY]))
    try:
        trace = agent.respond("x").trace
    finally:
        agent.close()
    first, lookup, second = trace.tool_calls
    assert first.status == "blocked" and "first" in first.error and "open_ticket" in first.error
    assert lookup.status == "timeout"  # a failed lookup does not satisfy the rule ...
    assert second.status == "blocked"


def test_policy_allows_after_a_successful_lookup() -> None:
    rules = {"quick": {"requires_any": ["slow_first_lookup"]}}
    outputs = [call("slow_first_lookup", key="t4"), call("slow_first_lookup", key="t4"), call("quick", key="t5")]
    agent = Agent(harness(_policy(rules=rules)), ScriptedModel([*outputs, REPLY]))
    try:
        trace = agent.respond("x").trace
    finally:
        agent.close()
    assert [c.status for c in trace.tool_calls] == ["timeout", "ok", "ok"]


# -- the livestream harness and the tool files ---------------------------------------------------
def test_livestream_lookups_are_idempotent_and_side_effects_are_policed() -> None:
    live = load_harness("livestream")
    idempotent = {t.name for t in live.tools if t.idempotent}
    assert idempotent == {"get_price", "get_stock", "get_specs", "get_shipping", "get_discount_rules", "search_faq"}
    handoff = call("handoff_to_service", reason="refund")
    agent = Agent(live, ScriptedModel([handoff, handoff, '<reply>{"reply": "Customer service will help!"}</reply>']))
    try:
        trace = agent.respond(Request.of("refund!", context={"room": {"on_display": "p-dress-01"}})).trace
    finally:
        agent.close()
    assert [c.status for c in trace.tool_calls] == ["ok", "blocked"]
    assert len(trace.context["state"]["handoffs"]) == 1


def test_idempotent_flag_loads_saves_and_is_validated(tmp_path: Path) -> None:
    from hat.harness.loader import save_harness

    live = load_harness("livestream")
    folder = save_harness(live, tmp_path / "copy")
    assert load_harness(folder).content_hash() == live.content_hash()
    bad = folder / "tools" / "get_price.yaml"
    data = yaml.safe_load(bad.read_text())
    bad.write_text(yaml.safe_dump({**data, "idempotent": "yes"}))
    with pytest.raises(HarnessValidationError, match="idempotent must be true or false"):
        load_harness(folder)
