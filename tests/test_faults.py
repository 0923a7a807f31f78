"""Fault injection in the simulated tool backends, and the oracle under faults."""

from __future__ import annotations

import inspect
import time
from dataclasses import replace
from typing import Any

import pytest

from hat.env import livestream_tools as tools
from hat.env.episode import Episode, FaultSpec, Gold, GoldCall
from hat.env.faults import FAULT_KINDS, FaultInjector
from hat.env.policies import policy_model
from hat.env.sim import episode_request, run_episode
from hat.harness.loader import load_harness
from hat.harness.runtime import Agent
from hat.harness.tools import ToolContext, ToolRegistry
from hat.harness.trace import Trace

HARNESS = load_harness("livestream")


def context(spec: FaultSpec, episode_id: str = "ep") -> ToolContext:
    return ToolContext(
        context={"room": {"on_display": "p-dress-01"}}, resources={"faults": FaultInjector(spec, episode_id)}
    )


# -- the injector ----------------------------------------------------------------------------------
def test_draws_are_deterministic_and_keyed() -> None:
    spec = FaultSpec(rate=0.5, seed=11)
    grid = [(f, i) for f in ("get_price", "get_stock", "search_faq") for i in range(40)]
    first = [FaultInjector(spec, "ep-1").draw(f, i) for f, i in grid]
    assert first == [FaultInjector(spec, "ep-1").draw(f, i) for f, i in grid]
    assert first != [FaultInjector(spec, "ep-2").draw(f, i) for f, i in grid]
    assert first != [FaultInjector(replace(spec, seed=12), "ep-1").draw(f, i) for f, i in grid]
    assert set(first) == {None, *FAULT_KINDS}
    assert 0.3 < sum(k is not None for k in first) / len(first) < 0.7
    assert all(FaultInjector(FaultSpec(rate=0.0), "ep").draw(f, i) is None for f, i in grid)
    assert all(FaultInjector(FaultSpec(rate=1.0, kinds=("error",)), "ep").draw(f, i) == "error" for f, i in grid)


def test_invalid_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        FaultInjector(FaultSpec(rate=0.1, kinds=("meteor",)), "ep")
    with pytest.raises(ValueError, match="not a probability"):
        FaultInjector(FaultSpec(rate=1.5), "ep")


def test_each_kind_in_a_tool() -> None:
    with pytest.raises(TimeoutError, match="simulated timeout"):
        tools.get_price(context=context(FaultSpec(rate=1.0, kinds=("timeout",))))
    with pytest.raises(RuntimeError, match="backend error"):
        tools.get_stock(context=context(FaultSpec(rate=1.0, kinds=("error",))))
    empty = context(FaultSpec(rate=1.0, kinds=("empty",)))
    assert tools.search_faq("paypal", context=empty)["results"] == []
    assert "product" not in tools.get_price(context=empty) and tools.get_price(context=empty)["note"]
    slow = context(FaultSpec(rate=1.0, kinds=("slow",)))
    start = time.perf_counter()
    assert tools.get_price(context=slow)["price"] == 59.9
    assert 0.015 < time.perf_counter() - start < 0.5
    log = slow.resources["faults"].log
    assert log == [{"function_id": "get_price", "call_index": 0, "kind": "slow", "delay_ms": log[0]["delay_ms"]}]
    assert 20 <= log[0]["delay_ms"] <= 80


def test_retries_are_new_draws_and_logged() -> None:
    ctx = context(FaultSpec(rate=0.5, kinds=("error",), seed=1), "ep-retry")
    outcomes = []
    for _ in range(12):
        try:
            outcomes.append(tools.get_price(context=ctx)["price"])
        except RuntimeError:
            outcomes.append("error")
    assert "error" in outcomes and 59.9 in outcomes
    assert [e["call_index"] for e in ctx.resources["faults"].log] == [i for i, o in enumerate(outcomes) if o == "error"]


def test_wrapped_tools_keep_their_signature() -> None:
    for name, fn in tools.TOOL_FUNCTIONS.items():
        assert fn.__name__ == name and "context" in inspect.signature(fn).parameters
    assert list(inspect.signature(tools.get_stock).parameters) == ["product", "color", "size", "context"]
    assert tools.get_price("p-hoodie-01")["price"] == 45.0  # no context: no faults


def test_registry_maps_faults_to_statuses() -> None:
    registry = ToolRegistry(HARNESS)
    try:
        timeout = registry.call("get_price", {}, context(FaultSpec(rate=1.0, kinds=("timeout",))))
        error = registry.call("get_price", {}, context(FaultSpec(rate=1.0, kinds=("error",))))
        fine = registry.call("get_price", {}, context(FaultSpec(rate=0.0)))
    finally:
        registry.close()
    assert (timeout.status, error.status, fine.status) == ("timeout", "error", "ok")
    assert timeout.latency_ms < 1000  # no real waiting for the harness's tool timeout


# -- the oracle under faults -----------------------------------------------------------------------
def price_episode(eid: str, spec: FaultSpec) -> Episode:
    gold = Gold(
        "product_qa", (GoldCall("get_price", {"product": None}),), skills=("pricing-discounts",), facts=("49.9",)
    )
    return Episode(eid, -1, {"on_display": "p-dress-01"}, ("how much is this?",), gold, faults=spec)


def run(ep: Episode) -> Trace:
    agent = Agent(HARNESS, policy_model("oracle", ep, HARNESS))
    try:
        return run_episode(agent, ep)
    finally:
        agent.close()


def test_oracle_retries_timeouts_and_ends_in_budget() -> None:
    trace = run(price_episode("ep-timeouts", FaultSpec(rate=1.0, kinds=("timeout",))))
    assert trace.status == "ok" and len(trace.rounds) <= HARNESS.limits.max_rounds
    prices = [c for c in trace.tool_calls if c.name == "get_price"]
    assert len(prices) == 3 and {c.status for c in prices} == {"timeout"}  # the call plus two retries
    assert "49.9" not in trace.reply and len(trace.reply) <= HARNESS.limits.reply_max_chars
    faults = trace.context["faults"]
    assert faults and {f["kind"] for f in faults} == {"timeout"}
    assert len(faults) == sum(c.attempts for c in prices)  # the tool_retry hook's attempts are draws too


def test_oracle_recovers_from_an_empty_answer() -> None:
    for seed in range(40):  # find a spec whose first draw is empty and whose retry is clean
        injector = FaultInjector(FaultSpec(rate=0.5, kinds=("empty",), seed=seed), "ep-empty")
        if injector.draw("get_price", 0) == "empty" and injector.draw("get_price", 1) is None:
            break
    trace = run(price_episode("ep-empty", FaultSpec(rate=0.5, kinds=("empty",), seed=seed)))
    assert [c.status for c in trace.tool_calls] == ["ok", "ok"]
    assert trace.status == "ok" and "49.9" in trace.reply


def test_thirty_faulty_episodes_end_within_budget() -> None:
    gold_calls: list[tuple[str, dict[str, Any]]] = [
        ("get_price", {"product": None}),
        ("get_stock", {"product": "p-dress-01", "color": "blue"}),
        ("get_shipping", {"region": "UK"}),
        ("search_faq", {"query": "return policy"}),
        ("handoff_to_service", {"reason": "parcel lost"}),
    ]
    traces = []
    for i in range(30):
        function_id, args = gold_calls[i % len(gold_calls)]
        gold = Gold("product_qa", (GoldCall(function_id, args), GoldCall("get_specs", {})), skills=("product-qa",))
        ep = Episode(
            f"ep-{i}", -1, {"on_display": "p-dress-01"}, ("tell me more",), gold, faults=FaultSpec(0.3, seed=5)
        )
        traces.append(run(ep))
    assert all(t.status in ("ok", "fallback") for t in traces)
    assert all(len(t.rounds) <= HARNESS.limits.max_rounds for t in traces)
    assert sum(len(t.context["faults"]) for t in traces) > 5
    assert episode_request(price_episode("x", FaultSpec())).resources["faults"].log == []
