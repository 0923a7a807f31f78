"""The agent loop with a scripted model: tools, skills, hooks, feedback, bounds, bad input."""

from __future__ import annotations

import json
import time

import pytest

from hat.harness import Agent, Hook, JSONLSink, Request, Verdict, load_harness, read_traces
from hat.models.scripted import ScriptedModel

REPLY = '<reply>{"reply": "It is 19.9 today!"}</reply>'
HELLO = '<reply>{"reply": "Hello there!"}</reply>'


def tool(tool_name: str, /, **args) -> str:
    return "<tool_call>" + json.dumps({"name": tool_name, "arguments": args}) + "</tool_call>"


def agent_for(harness_dir, outputs, **kw) -> Agent:
    return Agent(load_harness(harness_dir), ScriptedModel(outputs), **kw)


def test_tool_then_reply_records_everything(mini_harness_dir):
    agent = agent_for(mini_harness_dir, ["<think>need price</think>" + tool("get_price", product="p-1"), REPLY])
    resp = agent.respond(Request.of("how much?", context={"room": {"on_display": "p-1"}}))
    t = resp.trace
    assert resp.reply == "It is 19.9 today!" and t.status == "ok"
    assert [r.action for r in t.rounds] == ["tool_calls", "reply"]
    call = t.tool_calls[0]
    assert call.name == "get_price" and call.status == "ok" and call.result["price"] == 19.9
    assert call.result["on_display"] == "p-1"  # the tool saw the room through its context
    assert t.rounds[0].reasoning == "need price"
    assert t.harness_hash == agent.harness.content_hash()
    assert set(t.block_hashes) == {"role", "catalog", "format"}
    assert "get_price" in t.tools_visible and t.latency_ms > 0
    msgs = t.to_messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]


def test_skill_loading_puts_body_in_context(mini_harness_dir):
    model = ScriptedModel([tool("load_skill", name="price-talk"), HELLO])
    agent = Agent(load_harness(mini_harness_dir), model)
    resp = agent.respond("price?")
    assert resp.trace.skills_loaded == ("price-talk",)
    assert "Use tools for numbers" in model.calls[1][-1]["content"]


def test_unknown_tool_and_skill_become_observations(mini_harness_dir):
    agent = agent_for(mini_harness_dir, [tool("nope", x=1) + tool("load_skill", name="ghost"), HELLO])
    t = agent.respond("price?").trace
    statuses = [c.status for c in t.rounds[0].tool_calls]
    assert statuses == ["unknown_tool", "unknown_skill"]
    assert "available tools" in t.rounds[0].tool_calls[0].error


def test_invalid_args_are_reported_to_the_model(mini_harness_dir):
    agent = agent_for(mini_harness_dir, [tool("get_price"), HELLO])
    t = agent.respond("price?").trace
    assert t.rounds[0].tool_calls[0].status == "invalid_args"
    assert "'product' is a required property" in t.rounds[0].tool_calls[0].error


def test_malformed_output_becomes_feedback_not_exception(mini_harness_dir):
    model = ScriptedModel(["I think it costs 5 dollars", "<tool_call>{broken json", HELLO])
    agent = Agent(load_harness(mini_harness_dir), model)
    t = agent.respond("price?").trace
    assert [r.action for r in t.rounds] == ["invalid", "invalid", "reply"]
    assert "no <tool_call> and no <reply>" in t.rounds[0].feedback
    assert t.rounds[0].feedback in model.calls[1][-1]["content"]


def test_retries_are_bounded_and_fallback_is_sent(mini_harness_dir):
    agent = agent_for(mini_harness_dir, ["garbage"] * 10)
    resp = agent.respond("hello")
    assert resp.status == "fallback" and resp.reply == "One moment please!"
    assert len(resp.trace.rounds) == 3  # max_retries=2 → the third failure stops


def test_rounds_are_bounded(mini_harness_dir):
    agent = agent_for(mini_harness_dir, [tool("get_price", product="p-1")] * 10)
    resp = agent.respond("price?")
    assert resp.status == "fallback" and len(resp.trace.rounds) == 4


def test_tool_that_raises_is_an_observation(mini_harness_dir):
    agent = agent_for(mini_harness_dir, [tool("boom"), '<reply>{"reply": "Sorry, checking!"}</reply>'])
    t = agent.respond("x").trace
    call = t.tool_calls[0]
    assert call.status == "error" and "backend exploded" in call.error
    assert t.status == "ok"


def test_hung_tool_times_out_and_request_is_answered(mini_harness_dir):
    agent = agent_for(mini_harness_dir, [tool("hang", seconds=30), '<reply>{"reply": "One sec!"}</reply>'])
    start = time.perf_counter()
    t = agent.respond("x").trace
    assert time.perf_counter() - start < 5
    call = t.tool_calls[0]
    assert call.status == "timeout" and call.attempts == 2  # the tool_retry hook retried once
    assert any(e.point == "tool_error" and e.verdict == "retry" for e in t.hook_events)
    assert t.reply == "One sec!"


def test_retry_hook_recovers_a_flaky_tool(mini_harness_dir):
    agent = agent_for(mini_harness_dir, [tool("flaky", key=f"k{time.time()}"), '<reply>{"reply": "ok"}</reply>'])
    call = agent.respond("x").trace.tool_calls[0]
    assert call.status == "ok" and call.attempts == 2


def test_stop_check_rejects_long_and_ungrounded_replies(mini_harness_dir):
    long = '<reply>{"reply": "' + "very " * 30 + '"}</reply>'
    invented = '<reply>{"reply": "Today 50% off!"}</reply>'
    promise = '<reply>{"reply": "Guaranteed delivery for you"}</reply>'
    agent = agent_for(mini_harness_dir, [long, invented, tool("get_price", product="p-1"), promise, REPLY])
    t = agent.respond("price?").trace
    events = [(e.hook, e.verdict) for e in t.hook_events if e.point == "stop_check"]
    assert events == [("reply_length", "retry"), ("grounded_claims", "retry"), ("grounded_claims", "retry")]
    assert "limit is 60" in t.rounds[0].feedback and "50" in t.rounds[1].feedback
    assert t.status == "fallback"  # retries exhausted at the third rejection


def test_schema_hook_and_plain_reply(mini_harness_dir):
    agent = agent_for(mini_harness_dir, ['<reply>{"text": "wrong field"}</reply>', "<reply>Hi there!</reply>"])
    t = agent.respond("hi").trace
    assert t.rounds[0].action == "rejected" and "schema" in t.rounds[0].feedback
    assert t.reply == "Hi there!"


@pytest.mark.parametrize(
    "comment,status",
    [
        ("x" * 20_000, "ok"),
        ("\x00\x01\x1b[31mhi\u202e\x7f" * 50, "ok"),
        ("", "refused"),
        ("\x00\x00  \n", "refused"),
    ],
)
def test_hostile_and_empty_comments(mini_harness_dir, comment, status):
    agent = agent_for(
        mini_harness_dir,
        ['<reply>{"reply": "Hello!"}</reply>'],
    )
    resp = agent.respond(Request.of(comment))
    assert resp.status == status
    if status == "refused":
        assert resp.reply == "Sorry, I could not read that comment." and not resp.trace.rounds
    else:
        seen = resp.trace.comments[0]
        assert len(seen) <= 2002 and not any(ord(ch) < 32 for ch in seen)


def test_project_hooks_block_and_rewrite(mini_harness_dir):
    class NoBoom(Hook):
        name = "no_boom"

        def before_tool(self, ctx, name, arguments):
            return Verdict.block("boom is disabled today") if name == "boom" else None

        def stop_check(self, ctx, reply):
            return Verdict.rewrite({"reply": reply["reply"].upper()})

    agent = agent_for(mini_harness_dir, [tool("boom"), '<reply>{"reply": "ok then"}</reply>'], extra_hooks=[NoBoom()])
    t = agent.respond("x").trace
    assert t.tool_calls[0].status == "blocked" and t.reply == "OK THEN"


def test_reasoning_is_stripped_before_dispatch(mini_harness_dir, tmp_path):
    out = tmp_path / "traces.jsonl"
    agent = agent_for(
        mini_harness_dir,
        ['<think>secret plan</think><reply>{"reply": "Hi!", "reasoning": "x"}</reply>'],
        sinks=[JSONLSink(out)],
    )
    resp = agent.respond("hi")
    assert resp.payload == {"reply": "Hi!"}
    saved = read_traces(out)
    assert len(saved) == 1 and saved[0].reply == "Hi!" and saved[0].rounds[0].reasoning == "secret plan"
    assert saved[0] == resp.trace


def test_model_failure_gives_fallback(mini_harness_dir):
    agent = agent_for(mini_harness_dir, [])  # exhausted at once → ModelError
    resp = agent.respond("hi")
    assert resp.status == "error" and resp.reply == "One moment please!"


def test_trace_with_an_unserialisable_tool_result_still_serialises(mini_harness_dir):
    """A tool result holding a lock (once: a decoy tool echoing the runtime's ToolContext) must not
    make the trace unwritable; the odd value becomes its repr."""
    import dataclasses
    import threading

    from hat.harness.trace import Trace

    t = agent_for(mini_harness_dir, [tool("get_price", product="p-1"), REPLY]).respond(Request.of("how much?")).trace
    first = t.rounds[0]
    record = dataclasses.replace(first.tool_calls[0], result={"lock": threading.Lock(), "n": 1, "ids": (1, 2)})
    odd = dataclasses.replace(t, rounds=(dataclasses.replace(first, tool_calls=(record,)), *t.rounds[1:]))
    data = odd.to_dict()
    result = json.loads(json.dumps(data))["rounds"][0]["tool_calls"][0]["result"]
    assert result["n"] == 1 and result["ids"] == [1, 2] and "lock" in result["lock"]
    as_json = json.loads(json.dumps(t.to_dict()))
    assert json.loads(json.dumps(Trace.from_dict(as_json).to_dict())) == as_json  # round trip unchanged


def test_decoy_tool_never_echoes_the_runtime_context():
    from hat.augment.decoys import decoy_tool
    from hat.harness.tools import ToolContext

    out = decoy_tool(context=ToolContext(), product="p-1")
    assert out["arguments"] == {"product": "p-1"}
