"""The judges on hand-checked trajectories of the livestream harness.

Each case is a trajectory whose right verdict a person can see at a glance; the tests assert the
verdict in numbers: good dimensions ≥ 0.9, the broken dimension ≤ 0.4, and orderings where a
behaviour is better than another. Traces are built by hand (tool results come from the real
livestream tools, the system prompt from the real prompt pipeline) except one end-to-end test
that runs the agent with a scripted model.
"""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest

from hat.env.catalog import load_catalog
from hat.env.context import livestream_context
from hat.env.episode import Episode, Gold, GoldCall
from hat.env.livestream_tools import get_price, get_specs, get_stock, handoff_to_service, switch_product_link
from hat.harness import Agent, Harness, Request, Round, Skill, ToolCallRecord, Trace, load_harness
from hat.harness.pipeline import render_prompt, template_context
from hat.harness.tools import ToolContext
from hat.judge import JUDGES, JudgeResult, get_judge, judge_trace
from hat.judge.accuracy import accuracy
from hat.judge.base import norm_number, phrase_in, unsupported_numbers
from hat.judge.cot import cot_length, cot_reward, count_tokens, q
from hat.judge.effectiveness import effectiveness
from hat.judge.llm import LLMJudge, parse_grade
from hat.judge.rewards import REWARD_FUNCS, reward_funcs, trace_from_completion
from hat.judge.skills import skill_selection
from hat.judge.tools import tool_rationality
from hat.models.scripted import ScriptedModel

CATALOG = load_catalog()
ROOM = CATALOG.new_room()  # on display: p-dress-01 (list 59.9, promo 49.9), next: p-hoodie-01
BASE = load_harness("livestream")


# -- builders -----------------------------------------------------------------------------------------
def episode(intent: str, comment: str, **gold) -> Episode:
    return Episode(f"ep-{intent}", -1, dict(ROOM), (comment,), Gold(intent=intent, **gold))


def call(name: str, args: dict | None = None, result=None, status: str = "ok", kind: str = "tool") -> ToolCallRecord:
    return ToolCallRecord(name, dict(args or {}), result, status, kind=kind)


def skill_load(name: str, harness: Harness = BASE) -> ToolCallRecord:
    ok = harness.skill(name) is not None
    return call(
        harness.output.skill_tool,
        {"name": name},
        "…" if ok else {"error": "no"},
        "ok" if ok else "unknown_skill",
        "skill",
    )


def trace(
    reply: str,
    *steps: tuple[ToolCallRecord, ...],
    harness: Harness = BASE,
    status: str = "ok",
    reasoning: tuple[str, ...] = (),
    comments: tuple[str, ...] = ("hi",),
) -> Trace:
    """A trace: one round per ``steps`` entry (tool calls), then the reply round."""
    think = list(reasoning) + [""] * (len(steps) + 1 - len(reasoning))
    rounds = [Round(i, "…", "tool_calls", reasoning=think[i], tool_calls=tuple(s)) for i, s in enumerate(steps)]
    rounds.append(Round(len(steps), "…", "reply", reasoning=think[len(steps)], reply={"reply": reply}))
    product = CATALOG.product(ROOM["on_display"])
    prompt = render_prompt(harness, template_context(harness, {"room": dict(ROOM), "product": product, "faq": []})).text
    loaded = tuple(str(c.arguments["name"]) for s in steps for c in s if c.kind == "skill" and c.status == "ok")
    return Trace(
        request_id="r",
        harness_name=harness.name,
        harness_hash=harness.short_hash,
        model="hand",
        comments=comments,
        system_prompt=prompt,
        block_hashes={},
        tools_visible=tuple(t.name for t in harness.tools),
        skills_available=tuple(s.name for s in harness.skills),
        rounds=tuple(rounds),
        skills_loaded=loaded,
        reply=reply,
        reply_payload={"reply": reply},
        status=status,
    )


def renamed(harness: Harness, tool: str, new: str, param_map: dict | None = None) -> Harness:
    tools = tuple(
        dataclasses.replace(
            t,
            name=new,
            metadata={**t.metadata, **({"param_map": param_map} if param_map else {})},
            parameters={
                **t.parameters,
                "properties": {(param_map or {}).get(k, k): v for k, v in t.parameters["properties"].items()},
            },
        )
        if t.name == tool
        else t
        for t in harness.tools
    )
    return harness.replace(tools=tools)


PRICE_EP = episode(
    "product_qa",
    "how much is this dress?",
    tool_calls=(GoldCall("get_price", {"product": None}),),
    skills=("pricing-discounts",),
    facts=("49.9",),
    forbidden=("lowest price ever",),
)
PRICE = get_price("p-dress-01")
PRICE_CALL = call("get_price", {"product": "p-dress-01"}, PRICE)
GOOD_REPLY = "It's on promo right now: $49.90 instead of $59.90!"
GOOD_PRICE = trace(GOOD_REPLY, (skill_load("pricing-discounts"),), (PRICE_CALL,))
GENERIC = "Thanks so much for your question! Stay tuned, lovely deals are coming up!"

CHAT_EP = episode("casual_chat", "hi Mia you look great today!!", skills=("casual-chat",))


def scores(ep: Episode, tr: Trace, harness: Harness = BASE) -> dict[str, float]:
    return {name: result.score for name, result in judge_trace(ep, tr, harness).items()}


# -- the good trajectory and the generic one --------------------------------------------------------------
def test_correct_answer_with_right_tool_scores_high_everywhere():
    result = judge_trace(PRICE_EP, GOOD_PRICE, BASE)
    assert list(result) == ["accuracy", "effectiveness", "tool_rationality", "skill_selection", "cot_length"]
    assert all(isinstance(r, JudgeResult) for r in result.values())
    assert {k: r.score for k, r in result.items()} == {k: 1.0 for k in result}, {k: r.reason for k, r in result.items()}


def test_polite_generic_reply_to_everything_fails_the_product_question():
    s = scores(PRICE_EP, trace(GENERIC))
    assert s["accuracy"] <= 0.4 and s["effectiveness"] <= 0.4
    assert s["tool_rationality"] <= 0.4 and s["skill_selection"] <= 0.4
    assert s["cot_length"] == 1.0


def test_generic_reply_is_fine_for_small_talk_but_dumping_tool_facts_is_not():
    good = scores(CHAT_EP, trace("Aww thank you! Stay for the Floral Midi Wrap Dress!", (skill_load("casual-chat"),)))
    assert min(good.values()) >= 0.9
    dump = trace("Thanks! The dress is $49.9, list 59.9, blue/red, S/M/L in stock!", (PRICE_CALL,))
    s = scores(CHAT_EP, dump)
    assert s["effectiveness"] <= 0.4
    assert s["tool_rationality"] <= 0.5  # get_price is irrelevant to small talk
    assert s["skill_selection"] == 0.0  # casual-chat not loaded


# -- accuracy --------------------------------------------------------------------------------------------------
def test_invented_price_breaks_accuracy_only():
    s = scores(PRICE_EP, trace("Only $39.90 today, grab it!", (skill_load("pricing-discounts"),), (PRICE_CALL,)))
    assert s["accuracy"] == 0.0
    assert s["tool_rationality"] >= 0.9 and s["skill_selection"] >= 0.9
    both = accuracy(PRICE_EP, trace("49.9 now, and 29.9 with my code!", (PRICE_CALL,)), BASE)
    assert both.score <= 0.4 and both.details["unsupported_numbers"] == ["29.9"]


def test_numbers_compare_as_numbers_and_grounding_sources():
    assert norm_number("49.90") == norm_number("49.9") == "49.9"
    assert norm_number("1,299") == "1299" and norm_number("4,99") == "4.99" and norm_number("007") == "7"
    assert phrase_in("$49.90", "only 49.9 today") and phrase_in("30-day free returns", "30 day FREE returns!")
    assert not phrase_in("49.9", "149.9 dollars")
    tr = trace("The room has 12 turns left, order #55 noted, 49.9 now", (PRICE_CALL,), comments=("my order #55",))
    assert unsupported_numbers(PRICE_EP, tr, BASE) == []  # prompt (12), comment (55), tool result (49.9)


def test_prompt_numbers_do_not_ground_invented_prices():
    # "12 turns" and "30 min left" are in the prompt, but not as money or a percentage.
    borrowed = accuracy(CHAT_EP, trace("Flash deal: just $30 today, plus 12% off!"), BASE)
    assert borrowed.score <= 0.2 and borrowed.details["unsupported_numbers"] == ["30", "12"]
    assert accuracy(CHAT_EP, trace("30 minutes and 12 turns left, stay with us!"), BASE).score == 1.0
    assert accuracy(CHAT_EP, trace("Orders over $80 get $10 off with LIVE10!"), BASE).score == 1.0  # campaign line
    guessed = episode("product_qa", "is it $35?", tool_calls=(GoldCall("get_price", {"product": None}),))
    assert accuracy(guessed, trace("Yes, $35!"), BASE).details["unsupported_numbers"] == ["35"]


def test_forbidden_claims_gold_and_harness_phrases():
    gold_forbidden = accuracy(PRICE_EP, trace("49.9 - lowest price ever!", (PRICE_CALL,)), BASE)
    hook_forbidden = accuracy(PRICE_EP, trace("49.9 and guaranteed delivery tomorrow!", (PRICE_CALL,)), BASE)
    assert gold_forbidden.score <= 0.2 and hook_forbidden.score <= 0.2
    assert gold_forbidden.details["forbidden_claims"] == ["lowest price ever"]


def test_partial_facts_get_partial_credit():
    ep = dataclasses.replace(PRICE_EP, gold=dataclasses.replace(PRICE_EP.gold, facts=("49.9", "59.9")))
    assert accuracy(ep, trace("Now 49.9!", (PRICE_CALL,)), BASE).score == pytest.approx(0.5)


def test_unanswerable_request_scores_by_absence_of_invention():
    ep = episode("other", "what will the weather be in Paris tomorrow?", answerable=False)
    decline = scores(ep, trace("Sorry, I can't check the weather! Let's get back to this lovely dress."))
    assert min(decline.values()) >= 0.9
    invented = scores(ep, trace("Sunny and 25 degrees in Paris tomorrow!"))
    assert invented["accuracy"] <= 0.4 and invented["effectiveness"] <= 0.4
    ignored = effectiveness(ep, trace("Paris is lovely in spring."), BASE)
    assert ignored.score <= 0.4


# -- tool rationality --------------------------------------------------------------------------------------------
def test_wrong_tool_and_no_tool():
    specs = call("get_specs", {"product": "p-dress-01"}, get_specs("p-dress-01"))
    wrong = scores(PRICE_EP, trace("It's a lovely viscose dress!", (skill_load("pricing-discounts"),), (specs,)))
    assert wrong["tool_rationality"] <= 0.4 and wrong["effectiveness"] <= 0.4
    never = scores(PRICE_EP, trace("Only $49.90 today!", (skill_load("pricing-discounts"),)))
    assert never["tool_rationality"] == 0.0
    # The number happens to be the gold fact, so accuracy does not punish the lucky guess twice ...
    assert never["accuracy"] == 1.0
    # ... but a second, unlooked-up number (the list price) is unsupported.
    assert accuracy(PRICE_EP, trace(GOOD_REPLY), BASE).score <= 0.4


def test_redundant_and_optional_calls():
    twice = tool_rationality(PRICE_EP, trace(GOOD_REPLY, (PRICE_CALL,), (PRICE_CALL,)), BASE)
    assert 0.5 <= twice.score <= 0.75 and "redundant" in twice.reason
    disc = call("get_discount_rules", {}, {"product": "p-dress-01", "coupons": [{"code": "LIVE10"}]})
    extra = trace(GOOD_REPLY, (PRICE_CALL, disc))
    assert tool_rationality(PRICE_EP, extra, BASE).score == 0.5  # irrelevant
    optional = dataclasses.replace(
        PRICE_EP, gold=dataclasses.replace(PRICE_EP.gold, optional_tools=("get_discount_rules",))
    )
    assert tool_rationality(optional, extra, BASE).score == 1.0
    decoy = dataclasses.replace(
        BASE.tools[0], name="get_weather", metadata={"function_id": "decoy:get_weather", "decoy": True}
    )
    h = BASE.replace(tools=(*BASE.tools, decoy))
    lured = trace(GOOD_REPLY, (PRICE_CALL, call("get_weather", {}, {"note": "ok"})), harness=h)
    assert tool_rationality(PRICE_EP, lured, h).score == pytest.approx(0.4)


def test_arguments_compare_by_product_id_and_resolved_values():
    ep = episode(
        "product_qa",
        "is the blue one in medium available?",
        tool_calls=(GoldCall("get_stock", {"product": "p-dress-01", "color": "blue", "size": "M"}),),
        facts=("sold out",),
    )
    by_name = call(
        "get_stock",
        {"product": "Floral Dress", "color": "Blue", "size": "medium"},
        get_stock("Floral Dress", color="Blue", size="medium"),
    )
    assert tool_rationality(ep, trace("Blue M is sold out, sorry!", (by_name,)), BASE).score == 1.0
    red = call("get_stock", {"product": "p-dress-01", "color": "red", "size": "M"}, get_stock("p-dress-01", "red", "M"))
    partial = tool_rationality(ep, trace("Red M has 9!", (red,)), BASE)
    assert partial.score == pytest.approx(0.5 + 0.5 * 2 / 3)
    omitted = tool_rationality(PRICE_EP, trace(GOOD_REPLY, (call("get_price", {}, PRICE),)), BASE)
    assert omitted.score == 1.0  # gold product None: the one on display, may be omitted
    other = call("get_price", {"product": "p-hoodie-01"}, get_price("p-hoodie-01"))
    assert tool_rationality(PRICE_EP, trace(GOOD_REPLY, (other,)), BASE).score == 0.5


def test_a_product_in_words_counts_even_when_the_call_returned_nothing():
    """A call whose backend timed out has no result to echo the product: the written argument is read
    the way the tool reads it (a name, or a step through the room order for switch_product_link)."""
    hoodie = GoldCall("get_price", {"product": "p-hoodie-01"})
    ep = episode("product_qa", "how much is the hoodie?", tool_calls=(hoodie,))
    late = {"error": "get_price did not answer within 5s"}
    words = tool_rationality(
        ep, trace("Let me check that!", (call("get_price", {"product": "hoodie"}, late, "timeout"),)), BASE
    )
    wrong = tool_rationality(
        ep, trace("Let me check that!", (call("get_price", {"product": "serum"}, late, "timeout"),)), BASE
    )
    assert "arguments" not in words.reason and "arguments 0% right" in wrong.reason
    room = {**ROOM, "order": ["p-hoodie-01", "p-dress-01"]}
    back = dataclasses.replace(
        episode(
            "order_change", "can u go back", tool_calls=(GoldCall("switch_product_link", {"product": "p-hoodie-01"}),)
        ),
        room=room,
    )
    empty = call("switch_product_link", {"product": "previous"}, {"note": "the backend returned no data"}, "ok")
    assert "arguments" not in tool_rationality(back, trace("One sec, switching!", (empty,)), BASE).reason


def test_stale_tool_name_after_a_rename():
    h = renamed(BASE, "get_price", "price_lookup")
    assert h.tool("get_price") is None and h.tool_by_function("get_price").name == "price_lookup"
    stale = call("get_price", {"product": "p-dress-01"}, {"error": "no tool"}, "unknown_tool")
    gave_up = scores(
        PRICE_EP, trace("Let me check that for you!", (skill_load("pricing-discounts", h),), (stale,), harness=h), h
    )
    assert gave_up["tool_rationality"] == 0.0 and gave_up["skill_selection"] == 1.0
    fresh = call("price_lookup", {"product": "p-dress-01"}, PRICE)
    good = trace(GOOD_REPLY, (skill_load("pricing-discounts", h),), (fresh,), harness=h)
    assert min(scores(PRICE_EP, good, h).values()) >= 0.9
    # The very trace that was right before the rename is wrong under the renamed harness.
    assert tool_rationality(PRICE_EP, GOOD_PRICE, h).score == 0.0
    recovered = tool_rationality(PRICE_EP, trace(GOOD_REPLY, (stale,), (fresh,), harness=h), h)
    assert recovered.score == pytest.approx(0.4)


def test_renamed_parameter_through_param_map():
    h = renamed(BASE, "get_price", "price_lookup", {"product": "item"})
    ep = dataclasses.replace(
        PRICE_EP,
        gold=dataclasses.replace(PRICE_EP.gold, tool_calls=(GoldCall("get_price", {"product": "p-dress-01"}),)),
    )
    new = call("price_lookup", {"item": "p-dress-01"}, PRICE)
    assert tool_rationality(ep, trace(GOOD_REPLY, (new,), harness=h), h).score == 1.0
    old = call("price_lookup", {"product": "p-dress-01"}, {"error": "unexpected"}, "error")
    stale = tool_rationality(ep, trace(GOOD_REPLY, (old,), harness=h), h)
    assert stale.score <= 0.4 and "invalid args" in stale.reason


def test_fault_then_retry_vs_fault_then_invented_answer():
    timeout = call("get_price", {"product": "p-dress-01"}, {"error": "get_price did not answer within 5s"}, "timeout")
    retried = scores(PRICE_EP, trace(GOOD_REPLY, (skill_load("pricing-discounts"),), (timeout,), (PRICE_CALL,)))
    assert min(retried.values()) >= 0.9
    invented = scores(PRICE_EP, trace("It's just $39.90 today!", (skill_load("pricing-discounts"),), (timeout,)))
    assert invented["tool_rationality"] <= 0.4 and invented["accuracy"] <= 0.4
    honest = scores(PRICE_EP, trace("The price system is slow, let me check and get back to you!", (timeout,)))
    assert honest["tool_rationality"] >= 0.9
    assert invented["accuracy"] < honest["accuracy"] == 0.5 < retried["accuracy"]  # facts excused, not given
    assert honest["effectiveness"] == pytest.approx(0.5)  # tried, failed, said so: half-served
    empty = call("get_price", {"product": "p-dress-01"}, {"note": "the backend returned no data"}, "ok")
    confident = tool_rationality(PRICE_EP, trace("Great price, it's in the cart already!", (empty,)), BASE)
    assert confident.score <= 0.4 and "unhandled fault" in confident.reason


def test_action_intents_need_their_action():
    after = episode(
        "after_sales",
        "my dress arrived torn, order A123, I want a refund",
        tool_calls=(GoldCall("handoff_to_service", {"reason": "torn dress refund", "order_id": "A123"}),),
        skills=("after-sales-handoff",),
    )
    ticket = handoff_to_service("Dress arrived torn, viewer wants a refund", "A123")
    handoff = call(
        "handoff_to_service", {"reason": "Dress arrived torn, viewer wants a refund", "order_id": "A123"}, ticket
    )
    reply = f"So sorry! Ticket {ticket['ticket_id']} is open, customer service will message you privately."
    assert min(scores(after, trace(reply, (skill_load("after-sales-handoff"),), (handoff,))).values()) >= 0.9
    words_only = scores(
        after, trace("So sorry! Please contact customer service.", (skill_load("after-sales-handoff"),))
    )
    assert words_only["effectiveness"] <= 0.4 and words_only["tool_rationality"] <= 0.4
    switch = episode(
        "order_change", "next one please", tool_calls=(GoldCall("switch_product_link", {"product": "p-hoodie-01"}),)
    )
    ctx = ToolContext(context={"room": dict(ROOM)})
    nxt = call("switch_product_link", {"product": "next"}, switch_product_link("next", context=ctx))
    s = scores(switch, trace("Here's the Cozy Fleece Hoodie, ask me anything!", (nxt,)))
    assert s["tool_rationality"] == 1.0 and s["effectiveness"] == 1.0


# -- skill selection ---------------------------------------------------------------------------------------
def test_decoy_missing_and_irrelevant_skills():
    decoy = Skill(
        "pricing-deals",
        "Use for price questions.",
        "Quote any price.",
        {"decoy": True, "function_id": "pricing-discounts"},
    )
    h = BASE.replace(skills=(*BASE.skills, decoy))
    only_decoy = skill_selection(
        PRICE_EP, trace(GOOD_REPLY, (skill_load("pricing-deals", h),), (PRICE_CALL,), harness=h), h
    )
    assert only_decoy.score == 0.0 and "decoy" in only_decoy.reason
    both = trace(
        GOOD_REPLY, (skill_load("pricing-deals", h), skill_load("pricing-discounts", h)), (PRICE_CALL,), harness=h
    )
    assert skill_selection(PRICE_EP, both, h).score == pytest.approx(0.4)
    ghost = trace(GOOD_REPLY, (skill_load("price-wizard"), skill_load("pricing-discounts")), (PRICE_CALL,))
    assert skill_selection(PRICE_EP, ghost, BASE).score == pytest.approx(0.4)
    extra = trace(GOOD_REPLY, (skill_load("casual-chat"), skill_load("pricing-discounts")), (PRICE_CALL,))
    assert skill_selection(PRICE_EP, extra, BASE).score == pytest.approx(0.6)
    assert skill_selection(episode("other", "?", answerable=False), trace("Sorry!"), BASE).score == 1.0


def test_renamed_skill_is_judged_by_function_id():
    skills = tuple(
        dataclasses.replace(s, name="price-help", metadata={**s.metadata, "function_id": "pricing-discounts"})
        if s.name == "pricing-discounts"
        else s
        for s in BASE.skills
    )
    h = BASE.replace(skills=skills)
    assert skill_selection(PRICE_EP, trace(GOOD_REPLY, (skill_load("price-help", h),), harness=h), h).score == 1.0
    assert skill_selection(PRICE_EP, GOOD_PRICE, h).score == 0.0  # the old name is gone


# -- effectiveness: status, limits, rules -----------------------------------------------------------------
def test_over_length_reply_under_a_tightened_limit():
    reply = "It's on promo right now at $49.90 instead of $59.90, a lovely deal on this dress!"
    assert 60 < len(reply) <= 160
    tight = BASE.replace(limits=dataclasses.replace(BASE.limits, reply_max_chars=60))
    tr = trace(reply, (skill_load("pricing-discounts"),), (PRICE_CALL,))
    assert effectiveness(PRICE_EP, tr, BASE).score == 1.0
    over = effectiveness(PRICE_EP, trace(reply, (PRICE_CALL,), harness=tight), tight)
    assert over.score <= 0.4 and over.details["limit"] == 60


def test_reply_rule_violation_for_the_intents_it_names():
    rules = [
        {
            "id": "no-dm",
            "text": "Never ask viewers to DM.",
            "forbid_patterns": [r"\bDM me\b", r"message me"],
            "intents": ["product_qa"],
        },
        {"id": "bad-regex", "text": "literal fallback", "forbid_patterns": ["(((unclosed"]},
    ]
    h = BASE.replace(settings={**BASE.settings, "reply_rules": rules})
    reply = "Now $49.90! DM me for more."
    broken = effectiveness(PRICE_EP, trace(reply, (PRICE_CALL,), harness=h), h)
    assert broken.score <= 0.4 and broken.details["violated_rules"] == ["no-dm"]
    assert effectiveness(PRICE_EP, trace(reply, (PRICE_CALL,)), BASE).score == 1.0
    chat = effectiveness(CHAT_EP, trace("Thank you! DM me anytime!", harness=h), h)
    assert chat.score >= 0.9  # the rule names product_qa only
    assert effectiveness(CHAT_EP, trace("oops (((unclosed", harness=h), h).details["violated_rules"] == ["bad-regex"]


def test_status_fallback_refused_and_empty():
    fb = trace(BASE.output.fallback_reply, status="fallback")
    assert effectiveness(PRICE_EP, fb, BASE).score == 0.0
    refused = trace("Sorry, I could not read that comment.", status="refused")
    empty_ep = episode("other", " \u200b ", answerable=False)
    assert effectiveness(empty_ep, refused, BASE).score == 1.0
    assert effectiveness(PRICE_EP, refused, BASE).score == 0.0
    assert effectiveness(CHAT_EP, trace("   "), BASE).score == 0.0


# -- q(L) -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "expected_q"), [(50, 0.0), (100, 0.0), (150, 0.5), (200, 1.0), (300, 1.0)])
def test_cot_length_q_of_reasoning_tokens(n, expected_q):
    words = " ".join(["w"] * n)
    half = " ".join(["w"] * (n // 2))
    tr = trace(GOOD_REPLY, (PRICE_CALL,), reasoning=(half, " ".join(["w"] * (n - n // 2))))
    assert count_tokens(words) == n and q(n) == expected_q
    result = cot_length(PRICE_EP, tr, BASE)
    assert result.details["tokens"] == n and result.score == pytest.approx(1 - expected_q)
    assert cot_reward(tr) == pytest.approx(-0.1 * expected_q)


def test_cot_counts_with_a_given_tokenizer():
    tr = trace(GOOD_REPLY, reasoning=("abcd " * 30,))  # 30 regex tokens, 150 characters
    assert cot_length(CHAT_EP, tr, BASE).score == 1.0
    by_chars = cot_length(CHAT_EP, tr, BASE, tokenizer=lambda s: list(s))
    assert by_chars.details["tokens"] == 150 and by_chars.score == pytest.approx(0.5)
    assert count_tokens("Price? Let's call get_price.", tokenizer=lambda s: 7) == 7
    assert count_tokens("Price? Let's call get_price.") == 8  # Price ? Let ' s call get_price .


# -- the runtime's own traces, the registry, rewards ----------------------------------------------------------
def _tool(tool_name: str, /, **args) -> str:
    return "<tool_call>" + json.dumps({"name": tool_name, "arguments": args}) + "</tool_call>"


def test_end_to_end_agent_trace_is_judged_good_and_round_trips():
    outputs = [
        "<think>price question, load the skill</think>" + _tool("load_skill", name="pricing-discounts"),
        _tool("get_price", product="p-dress-01"),
        '<reply>{"reply": "' + GOOD_REPLY + '"}</reply>',
    ]
    agent = Agent(BASE, ScriptedModel(outputs), context_provider=livestream_context)
    tr = agent.respond(Request.of("how much is this dress?", context={"room": dict(ROOM)})).trace
    agent.close()
    assert tr.status == "ok" and tr.reply == GOOD_REPLY
    first = judge_trace(PRICE_EP, tr, BASE)
    assert min(r.score for r in first.values()) >= 0.9, {k: r.reason for k, r in first.items()}
    again = judge_trace(PRICE_EP, Trace.from_dict(json.loads(tr.to_json())), BASE)
    assert {k: r.score for k, r in again.items()} == {k: r.score for k, r in first.items()}  # pure, JSON-stable


def test_registry_and_result_bounds():
    assert set(JUDGES) == {"accuracy", "effectiveness", "tool_rationality", "skill_selection", "cot_length"}
    assert get_judge("accuracy") is accuracy
    with pytest.raises(KeyError, match="known judges: accuracy"):
        get_judge("vibes")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        JudgeResult(1.2, "too good")


def test_reward_functions_over_dict_columns_and_raw_completions():
    good, bad = GOOD_PRICE, trace(GENERIC)
    kwargs = {
        "episode": [PRICE_EP.to_dict()] * 2,
        "trace": [good.to_dict(), bad.to_dict()],
        "harness": ["livestream", BASE],
    }
    rewards = {name: fn(["", ""], **kwargs) for name, fn in REWARD_FUNCS.items()}
    assert rewards["accuracy"] == [1.0, 0.0] and rewards["tool_rationality"] == [1.0, 0.0]
    assert rewards["cot_length"] == [0.0, 0.0]
    assert [f.__name__ for f in reward_funcs(["accuracy", "cot_length"])] == ["accuracy_reward", "cot_length_reward"]
    # Without a trace column, the completion itself is parsed (single-turn GRPO).
    long_think = "<think>" + "w " * 250 + "</think>"
    completions = [
        long_think + '<reply>{"reply": "Just 49.9 now!"}</reply>',
        [{"role": "assistant", "content": _tool("load_skill", name="pricing-discounts") + _tool("get_price")}],
    ]
    cols = {
        "episode": [PRICE_EP, PRICE_EP],
        "harness": [BASE, BASE],
        "prompts": [[{"role": "system", "content": "x"}], "x"],
    }
    assert REWARD_FUNCS["cot_length"](completions, **cols) == [pytest.approx(-0.1), 0.0]
    assert REWARD_FUNCS["accuracy"](completions, **cols)[0] == 1.0
    assert REWARD_FUNCS["skill_selection"](completions, **cols) == [0.0, 1.0]
    assert REWARD_FUNCS["tool_rationality"](completions, **cols) == [0.0, 1.0]
    assert REWARD_FUNCS["effectiveness"](completions, **cols)[1] == 0.0  # no reply yet
    with pytest.raises(ValueError, match="'episode' column"):
        REWARD_FUNCS["accuracy"](["x"], harness=[BASE])
    assert trace_from_completion("garbage", PRICE_EP, BASE).status == "invalid"


# -- the optional LLM judge -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "grade"),
    [
        ("Score: 4\nWarm and correct.", 4.0),
        ('{"score": 5, "why": "great"}', 5.0),
        ("**Score:** 4.5 - natural", 4.5),
        ("<think>maybe 2? no</think>I'd give it 3/5.", 3.0),
        ("3 out of 5", 3.0),
        ("2", 2.0),
        ("The reply is fine. 4", 4.0),
        ("Score: 10", None),
        ("between 2 and 4", None),
        ("no idea", None),
    ],
)
def test_parse_grade(text, grade):
    assert parse_grade(text) == grade


def test_llm_judge_with_a_scripted_model():
    model = ScriptedModel(["Score: 4\nWarm, grounded, slightly long.", "I cannot grade this."])
    judge = LLMJudge(model)
    good = judge(PRICE_EP, GOOD_PRICE, BASE)
    assert good.score == pytest.approx(0.75) and good.details["grade"] == 4.0
    system, user = model.calls[0]
    assert "live-shopping" in system["content"] and GOOD_REPLY in user["content"] and "get_price" in user["content"]
    unreadable = judge(PRICE_EP, GOOD_PRICE, BASE)
    assert unreadable.score == 0.0 and unreadable.details["parsed"] is False
    both = judge_trace(PRICE_EP, GOOD_PRICE, BASE, judges={"llm": LLMJudge(ScriptedModel(["5"]))})
    assert list(both) == ["llm"] and both["llm"].score == 1.0


def test_llm_judge_over_an_openai_compatible_endpoint():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"content": "Score: 2\nIt dodges."}}]})

    judge = LLMJudge.from_endpoint("http://judge.local", "big-model", transport=httpx.MockTransport(handler))
    result = judge(PRICE_EP, trace(GENERIC), BASE)
    assert result.score == pytest.approx(0.25) and "It dodges." in result.reason
    body = seen[0]
    assert body["model"] == "big-model" and body["temperature"] == 0.0
    assert body["messages"][0]["role"] == "system" and GENERIC in body["messages"][1]["content"]


# -- the simulator's policies, judged -----------------------------------------------------------------------------
def test_simulator_policies_are_ranked_as_expected():
    sim = pytest.importorskip("hat.env.sim")
    stock = episode(
        "product_qa",
        "is the red one in M still available",
        tool_calls=(GoldCall("get_stock", {"product": "p-dress-01", "color": "red", "size": "M"}),),
        skills=("product-qa",),
        facts=("9",),
    )
    eps = [PRICE_EP, stock, CHAT_EP, episode("other", "who wins the election?", answerable=False)]
    h = renamed(BASE, "get_price", "price_lookup", {"product": "item"})
    means = {}
    for policy in ("oracle", "polite", "invent-prices", "wrong-tool", "no-tools", "memorise"):
        runs = [judge_trace(ep, sim.simulate(ep, h, policy), h) for ep in eps]
        means[policy] = {k: sum(r[k].score for r in runs) / len(runs) for k in JUDGES}
    assert min(means["oracle"].values()) >= 0.9, means["oracle"]
    assert means["invent-prices"]["accuracy"] <= 0.4
    assert means["polite"]["effectiveness"] <= 0.5 and means["no-tools"]["tool_rationality"] <= 0.6
    assert means["wrong-tool"]["tool_rationality"] <= 0.4
    assert means["memorise"]["tool_rationality"] < means["oracle"]["tool_rationality"]  # stale get_price
