"""The output parser: lenient where intent is clear, feedback otherwise, never an exception."""

from __future__ import annotations

import random

from hat.harness.protocol import ToolCall, parse_output, render_reply, render_tool_call, strip_reasoning


def test_reply_with_reasoning():
    p = parse_output('<think>the viewer greets</think>\n<reply>{"reply": "Hi!"}</reply>')
    assert p.kind == "reply" and p.reply == {"reply": "Hi!"} and p.reasoning == "the viewer greets"


def test_several_tool_calls_win_over_reply():
    text = render_tool_call(ToolCall("a", {"x": 1})) + render_tool_call(ToolCall("b")) + render_reply({"reply": "no"})
    p = parse_output(text)
    assert p.kind == "tool_calls" and [c.name for c in p.tool_calls] == ["a", "b"]
    assert p.tool_calls[0].arguments == {"x": 1}


def test_lenient_repairs():
    assert parse_output('<reply>{"reply": "ok"}').reply == {"reply": "ok"}  # cut at the stop string
    assert parse_output("<reply>plain words</reply>").reply == {"reply": "plain words"}
    assert parse_output('<tool_call>{"name": "f", "arguments": {"a": 1,},}</tool_call>').tool_calls[0].arguments == {
        "a": 1
    }
    assert parse_output('<tool_call>{"name": "f", "arguments": {"a": 1}').kind == "tool_calls"
    assert parse_output('<tool_call>{"name": "f", "arguments": "{\\"a\\": 2}"}</tool_call>').tool_calls[
        0
    ].arguments == {"a": 2}
    assert parse_output("<|im_start|><reply>hey</reply><|im_end|>").reply == {"reply": "hey"}


def test_invalid_outputs_explain_what_to_do():
    cases = {
        "": "empty",
        "just chatting": "no <tool_call> and no <reply>",
        "<tool_call>[1, 2]</tool_call>": 'string "name"',
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>': "must be a JSON object",
        "<reply>   </reply>": "is empty",
        "<reply>{not json</reply>": "not valid JSON",
        "<think>unterminated thought": "empty",
    }
    for text, fragment in cases.items():
        p = parse_output(text)
        assert p.kind == "invalid" and fragment in p.error, (text, p.error)


def test_reply_field_is_configurable():
    assert "answer" in parse_output("nothing", reply_field="answer").error
    assert parse_output("<reply>x</reply>", reply_field="answer").reply == {"answer": "x"}


def test_never_raises_on_random_bytes():
    rng = random.Random(0)
    alphabet = '<>{}[]":,/\\ tool_call reply think name arguments \x00\n'
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        assert parse_output(text).kind in {"invalid", "reply", "tool_calls"}


def test_strip_reasoning():
    assert strip_reasoning("<think>a</think>B<think>c") == "B"
