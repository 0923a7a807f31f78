"""One number parser and one grounding check (:mod:`hat.harness.grounding`) for the runtime's hook,
the simulator's oracle and the judges: the reading rules table by table, then the three consumers
agreeing on the same reply / tool-result pairs (before, the oracle read "1,299" as 1.299 while the
hook and the judges read 1299)."""

from __future__ import annotations

import ast
import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hat.env import claims
from hat.env.episode import Episode, Gold
from hat.env.oracle import _allowed, _Compose, _mentions, _State
from hat.harness import grounding, load_harness
from hat.harness.grounding import (
    NUMBER,
    Grounding,
    find_numbers,
    is_number,
    mentions_number,
    norm_number,
    norm_value,
    numbers_in,
    typed_numbers,
)
from hat.harness.hooks import GroundedClaimsHook, HookContext
from hat.harness.trace import Round, ToolCallRecord, Trace
from hat.judge import base
from hat.judge.base import phrase_in, unsupported_numbers

LIVESTREAM = load_harness("livestream")


# -- reading numbers ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,values",
    [
        ("1,299", ["1299"]),  # comma + three digits: thousands
        ("1,299,000", ["1299000"]),
        ("1,299.50", ["1299.5"]),
        ("4,99", ["4.99"]),  # any other comma: a decimal comma
        ("1,5 kg", ["1.5"]),
        ("1,2999", ["1.2999"]),  # four digits after the comma: not a thousands group
        ("1.299", ["1.299"]),  # a lone dot group is a decimal point (JSON, English)
        ("1.299,00", ["1299"]),  # continental form, read where it cannot be a decimal
        ("1.299.000", ["1299000"]),
        ("49.90 and 49.9", ["49.9", "49.9"]),
        ("007", ["7"]),
        ("0.00", ["0"]),
        ("1234567 vs 1234568", ["1234567", "1234568"]),  # exact, no float rounding
        ("12345678901234567890123456789012", ["12345678901234567890123456789012"]),
    ],
)
def test_separators_and_decimals(text: str, values: list[str]) -> None:
    assert numbers_in(text) == values


@pytest.mark.parametrize(
    "text,values",
    [
        ("only 3pcs left", ["3"]),  # digits before a unit: a number
        ("buy 2x", ["2"]),
        ("110cm long", ["110"]),
        ("code LIVE10", []),  # digits after letters: part of a code
        ("order A12345", []),
        ("x2 and v1.2", []),
        ("p-dress-01", ["1"]),
    ],
)
def test_numbers_glued_to_words(text: str, values: list[str]) -> None:
    assert numbers_in(text) == values


@pytest.mark.parametrize(
    "text,expected",
    [
        ("$12", [("12", "money")]),
        ("US$ 12", [("12", "money")]),
        ("12 USD", [("12", "money")]),
        ("USD 12", [("12", "money")]),
        ("¥1,299", [("1299", "money")]),
        ("€5", [("5", "money")]),
        ("5€", [("5", "money")]),
        ("12 dollars", [("12", "money")]),
        ("1.299,00 €", [("1299", "money")]),
        ("20%", [("20", "percent")]),
        ("20 %", [("20", "percent")]),
        ("20 percent", [("20", "percent")]),
        ("20 pct", [("20", "percent")]),
        ("12 turns", [("12", "plain")]),
        ("since 2019, now $30", [("2019", "plain"), ("30", "money")]),  # a year is not a price
        (
            "on 2024-05-01 at 12:30",
            [("2024", "plain"), ("5", "plain"), ("1", "plain"), ("12", "plain"), ("30", "plain")],
        ),
    ],
)
def test_currencies_percentages_and_years(text: str, expected: list[tuple[str, str]]) -> None:
    assert typed_numbers(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("ships in 10-20 days", [("10", "plain"), ("20", "plain")]),
        ("ships in 10–20 days", [("10", "plain"), ("20", "plain")]),
        ("ships in 10 to 20 days", [("10", "plain"), ("20", "plain")]),
        ("$10-20", [("10", "money"), ("20", "money")]),  # both ends of a range share its kind
        ("10 to 20%", [("10", "percent"), ("20", "percent")]),
        ("-5", [("5", "plain")]),  # a dash, never a minus sign
    ],
)
def test_ranges_are_two_numbers(text: str, expected: list[tuple[str, str]]) -> None:
    assert typed_numbers(text) == expected


def test_number_keeps_what_was_written_and_where() -> None:
    (n,) = find_numbers("now ¥1,299 only")
    assert (n.text, n.value, n.kind) == ("1,299", "1299", "money")
    assert "now ¥1,299 only"[n.start : n.end] == "1,299" and "now ¥1,299 only"[slice(*n.span)] == "¥1,299"
    (p,) = find_numbers("save 20 percent today")
    assert "save 20 percent today"[slice(*p.span)] == "20 percent"


@pytest.mark.parametrize(
    "value,expected",
    [(45.0, "45"), (49.9, "49.9"), (1e-05, "0.00001"), (3, "3"), (True, None), ("49.9", None), (None, None)],
)
def test_norm_value_reads_json_numbers_only(value: Any, expected: str | None) -> None:
    assert norm_value(value) == expected


def test_is_number_and_mentions_number() -> None:
    assert is_number(" 49.90 ") and is_number("1,299") and not is_number("10%") and not is_number("GLOW5")
    assert mentions_number("only 3 left", "3") and mentions_number("3pcs", "3")
    assert not mentions_number("30 left", "3") and not mentions_number("3.5 left", "3")
    assert not mentions_number("code LIVE3", "3") and mentions_number("$1,299", "1299")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**12), st.integers(0, 99), st.booleans(), st.sampled_from(["${}", "{} USD", "¥{}", "{}"]))
def test_any_formatted_amount_reads_back_as_its_value(whole: int, cents: int, grouped: bool, form: str) -> None:
    written = form.format(f"{whole:,}.{cents:02d}" if grouped else f"{whole}.{cents:02d}")
    assert numbers_in(f"now {written} only") == [norm_number(str(Decimal(whole) + Decimal(cents) / 100))]


# -- the grounding check -----------------------------------------------------------------------------
def test_typed_grounding_rules() -> None:
    ground = Grounding.of(['{"price": 49.9}'], typed=["12 turns left, 30% off"], plain=["my order 7781"])
    assert ground.supports("49.9", "money") and ground.supports("49.9", "percent")  # data: any kind
    assert ground.supports("12", "plain") and not ground.supports("12", "money")  # "12 turns" is no price
    assert ground.supports("30", "percent") and ground.supports("30", "plain") and not ground.supports("30", "money")
    assert ground.supports("7781", "plain") and not ground.supports("7781", "money")  # a viewer's guess is no price
    assert [n.value for n in ground.unsupported("$12 now, was $49.90, 30% off, 3-5 days")] == ["12", "3", "5"]
    assert Grounding.of(values=[1299, "49.90"]).data == {"1299", "49.9"}


def test_one_parser_is_shared() -> None:
    assert claims.NUMBER is NUMBER and claims.norm_number is norm_number and claims.numbers_in is numbers_in
    assert base.norm_number is norm_number and base.typed_numbers is typed_numbers and base.Grounding is Grounding


def test_grounding_module_imports_only_the_standard_library() -> None:
    source = Path(grounding.__file__ or "").read_text(encoding="utf-8")
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {m for m in imported if m.split(".")[0] == "hat"}, imported


# -- hook, oracle and judge agree ----------------------------------------------------------------------
EPISODE = Episode("ep-grounding", -1, {"on_display": "p-dress-01"}, ("how much?",), Gold("product_qa"))


def hook_accepts(reply: str, result: dict[str, Any]) -> bool:
    ctx = HookContext(LIVESTREAM, "t", grounding=[json.dumps(result)])
    return GroundedClaimsHook().stop_check(ctx, {"reply": reply}) is None


def oracle_accepts(reply: str, result: dict[str, Any]) -> bool:
    state = _State(grounding=json.dumps(result))
    return _allowed(reply, _Compose(EPISODE, state, random.Random(0), [("get_price", result)], None, 500))


def judge_accepts(reply: str, result: dict[str, Any]) -> bool:
    rounds = (
        Round(0, "…", "tool_calls", tool_calls=(ToolCallRecord("get_price", {}, result, "ok"),)),
        Round(1, "…", "reply", reply={"reply": reply}),
    )
    trace = Trace("t", "livestream", "h", "hand", ("how much?",), "", {}, (), (), rounds, reply=reply)
    return not unsupported_numbers(EPISODE, trace, LIVESTREAM)


AGREEMENT = [
    # (reply, the tool result it may quote, grounded?)
    ("It is $1,299 today.", {"price": 1299}, True),  # the old bug: the oracle read 1.299
    ("It is $1,299 today.", {"price": 1.299}, False),  # ... and accepted this one
    ("Yours for ¥1,299,000!", {"price": 1299000}, True),
    ("Now 1.299,00 € only.", {"price": 1299}, True),
    ("Only $49.90!", {"price": 49.9}, True),
    ("Only $49.9!", {"price": 49.90}, True),
    ("It is 1234567 points.", {"points": 1234568}, False),  # the oracle's %g made these equal
    ("Take 20% off!", {"percent_off": 20}, True),
    ("Take 25 percent off!", {"percent_off": 20}, False),
    ("Ships in 3-5 days.", {"ships_in_days": 3}, False),  # each end of a range is a claim
    ("Ships in 3–5 days.", {"min_days": 3, "max_days": 5}, True),
    ("Ships in 3 to 5 days.", {"min_days": 3, "max_days": 5}, True),
    ("Only 3pcs left, buy 2x!", {"qty": 3, "max_per_order": 2}, True),
    ("Use code LIVE10 now!", {"code": "LIVE10"}, True),  # a code, not the number 10
    ("Use code LIVE10 for $10 off!", {"code": "LIVE10"}, False),
]


@pytest.mark.parametrize("reply,result,grounded", AGREEMENT)
def test_hook_oracle_and_judge_agree(reply: str, result: dict[str, Any], grounded: bool) -> None:
    assert (hook_accepts(reply, result), oracle_accepts(reply, result), judge_accepts(reply, result)) == (
        grounded,
        grounded,
        grounded,
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 5_000_000), min_size=1, max_size=3),
    st.integers(1, 5_000_000),
    st.sampled_from(["${:,}", "{:,} USD", "{}%", "{} left", "{:,}.00"]),
)
def test_hook_oracle_and_judge_agree_on_generated_pairs(data: list[int], said: int, form: str) -> None:
    reply, result = f"It is {form.format(said)} now.", {"values": data}
    verdicts = {hook_accepts(reply, result), oracle_accepts(reply, result), judge_accepts(reply, result)}
    assert verdicts == {said in data}


def test_oracle_and_judge_agree_on_whether_a_fact_is_stated() -> None:
    for text, fact in [("$1,299 today", "1299"), ("only 3pcs", "3"), ("code LIVE10", "10"), ("30 left", "3")]:
        assert _mentions(text, fact) == phrase_in(fact, text) == mentions_number(text, fact), (text, fact)
