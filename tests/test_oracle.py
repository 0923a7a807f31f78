"""The oracle expert and the degenerate policies, run through the real runtime and the default
``livestream`` harness on the bundled world (``world_seed=-1``); also under a renamed harness."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from hat.env.episode import Episode, FaultSpec, Gold, GoldCall
from hat.env.faults import FaultInjector
from hat.env.policies import POLICIES, MemorisingPolicy, NoToolsPolicy, OracleModel, policy_model
from hat.env.sim import episode_request, run_episode, simulate
from hat.errors import ModelSpecError
from hat.harness.hooks import HookSpec
from hat.harness.loader import load_harness
from hat.harness.protocol import parse_output
from hat.harness.runtime import Agent
from hat.harness.state import Harness, OutputFormat, Skill, ToolSpec
from hat.harness.trace import Trace
from hat.models import load_model

HARNESS = load_harness("livestream")
DRESS = {"on_display": "p-dress-01"}


def episode(eid: str, comment: str | tuple[str, ...], gold: Gold, room: dict[str, Any] = DRESS) -> Episode:
    comments = (comment,) if isinstance(comment, str) else comment
    return Episode(eid, -1, room, comments, gold, mode="single" if len(comments) == 1 else "multi")


EPISODES = {
    "price": episode(
        "ep-price",
        "how much is the dress??",
        Gold("product_qa", (GoldCall("get_price", {"product": None}),), skills=("pricing-discounts",), facts=("49.9",)),
    ),
    "stock": episode(
        "ep-stock",
        "is the red one in M still available",
        Gold(
            "product_qa",
            (GoldCall("get_stock", {"product": "p-dress-01", "color": "red", "size": "M"}),),
            skills=("product-qa",),
            facts=("9",),
        ),
    ),
    "discount": episode(
        "ep-discount",
        "any coupon for the serum?",
        Gold(
            "discount",
            (GoldCall("get_discount_rules", {"product": "p-serum-01"}),),
            skills=("pricing-discounts",),
            facts=("GLOW5", "25.6"),
            forbidden=("extra discount just for you",),
        ),
        room={"on_display": "p-serum-01"},
    ),
    "after_sales": episode(
        "ep-after",
        "my dress arrived torn!! order #A1029 I want my money back",
        Gold(
            "after_sales",
            (GoldCall("handoff_to_service", {"reason": "dress arrived torn, wants refund", "order_id": "A1029"}),),
            skills=("after-sales-handoff",),
            forbidden=("refund approved", "100% refund"),
            answerable=False,
        ),
    ),
    "order_change": episode(
        "ep-switch",
        "can u show the air fryer",
        Gold(
            "order_change",
            (GoldCall("switch_product_link", {"product": "p-fryer-01"}),),
            skills=("presentation-order",),
            facts=("CrispChef 5L Air Fryer",),
        ),
    ),
    "casual_chat": episode("ep-chat", "love this stream 😍😍", Gold("casual_chat", skills=("casual-chat",))),
    "other": episode("ep-other", "what do you think about the election", Gold("other", answerable=False)),
}


def run(ep: Episode, harness: Harness = HARNESS, policy: str = "oracle", seed: int = 0) -> Trace:
    agent = Agent(harness, policy_model(policy, ep, harness, seed=seed))
    try:
        return run_episode(agent, ep)
    finally:
        agent.close()


def called(trace: Trace) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in trace.tool_calls]


def think_words(trace: Trace) -> int:
    return max(len(r.reasoning.split()) for r in trace.rounds)


# -- the production harness ------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(EPISODES))
def test_oracle_is_well_formed_on_every_intent(key: str) -> None:
    ep = EPISODES[key]
    trace = run(ep)
    assert trace.status == "ok", trace.context["status_reason"]
    assert not [e for e in trace.hook_events if e.verdict != "allow" and e.point == "stop_check"]
    assert all(r.action != "invalid" for r in trace.rounds)
    assert len(trace.rounds) <= HARNESS.limits.max_rounds
    assert 0 < len(trace.reply) <= HARNESS.limits.reply_max_chars
    assert 0 < think_words(trace) < 60
    assert [name for name, _ in called(trace)] == [c.function_id for c in ep.gold.tool_calls]  # production names
    for (_, arguments), gold in zip(called(trace), ep.gold.tool_calls, strict=True):  # a product may be in words
        assert {k: v for k, v in arguments.items() if k != "product"} == {
            k: v for k, v in gold.arguments.items() if v is not None and k != "product"
        }
    assert all(c.status == "ok" for c in trace.tool_calls)
    assert set(trace.skills_loaded) == set(ep.gold.skills)
    for fact in ep.gold.facts:
        assert fact in trace.reply
    for claim in ep.gold.forbidden:
        assert claim.lower() not in trace.reply.lower()


def test_intent_specific_replies() -> None:
    after = run(EPISODES["after_sales"])
    ticket = after.tool_calls[0].result["ticket_id"]
    assert ticket in after.reply
    switch = run(EPISODES["order_change"])
    assert switch.context["state"]["on_display"] == "p-fryer-01"
    chat = run(EPISODES["casual_chat"])
    assert chat.tool_calls == [] and "Floral Midi Wrap Dress" in chat.reply
    other = run(EPISODES["other"])
    assert other.tool_calls == [] and other.skills_loaded == () and len(other.rounds) == 1
    assert re.search(r"sorry|not able|outside", other.reply, re.I)


def test_reply_numbers_come_from_tool_results_verbatim() -> None:
    trace = run(EPISODES["price"])
    assert "$49.9" in trace.reply and "$59.9" in trace.reply  # not 49.90
    assert run(EPISODES["stock"]).reply.count("9") >= 1


def test_multi_comment_episode() -> None:
    ep = episode(
        "ep-multi",
        ("how much is the dress", "do you ship it to the UK?", "hi from Texas!"),
        Gold(
            "product_qa",
            (GoldCall("get_price", {"product": "p-dress-01"}), GoldCall("get_shipping", {"region": "UK"})),
            skills=("pricing-discounts", "product-qa"),
            facts=("49.9",),
        ),
    )
    trace = run(ep)
    assert trace.status == "ok" and trace.context["mode"] == "multi"
    assert [name for name, _ in called(trace)] == ["get_price", "get_shipping"]
    assert "49.9" in trace.reply and "UK" in trace.reply
    assert len(trace.reply) <= HARNESS.limits.reply_max_chars


def test_clarification_reads_the_history() -> None:
    history = (
        {"role": "user", "content": "Viewer comment: is the hoodie warm?"},
        {"role": "assistant", "content": "Yes! It's 80% cotton, 20% polyester fleece."},
    )
    gold = Gold(
        "clarification",
        (GoldCall("get_stock", {"product": "p-hoodie-01", "color": "black"}),),
        skills=("product-qa",),
        facts=("black",),
    )
    ep = replace(episode("ep-clar", "and in black?", gold), history=history)
    trace = run(ep)
    assert trace.status == "ok" and called(trace) == [("get_stock", {"product": "p-hoodie-01", "color": "black"})]
    assert "black" in trace.reply and "8" in trace.reply  # 0 + 7 + 1 units in black


def test_operator_reply_rules_are_obeyed() -> None:
    rules = [{"id": "calm", "text": "No exclamation marks.", "forbid_patterns": ["!"]}]
    harness = replace(HARNESS, settings={**HARNESS.settings, "reply_rules": rules})
    for key in ("price", "casual_chat", "after_sales", "other"):
        trace = run(EPISODES[key], harness)
        assert trace.status == "ok" and "!" not in trace.reply and trace.reply.strip()


def test_partial_failure_is_acknowledged() -> None:
    gold = Gold(
        "product_qa",
        (GoldCall("get_price", {"product": None}), GoldCall("get_shipping", {"product": None})),
        skills=("product-qa",),
        facts=("49.9", "2"),
    )
    ep = episode("ep-partial", "price and shipping time?", gold)

    def shipping_always_fails(seed: int) -> bool:
        injector = FaultInjector(FaultSpec(rate=0.5, kinds=("error",), seed=seed), ep.episode_id)
        return injector.draw("get_price", 0) is None and all(injector.draw("get_shipping", i) for i in range(3))

    seed = next(s for s in range(500) if shipping_always_fails(s))
    trace = run(replace(ep, faults=FaultSpec(rate=0.5, kinds=("error",), seed=seed)))
    assert trace.status == "ok" and len(trace.rounds) == 4  # call, two retries, reply
    assert [c.status for c in trace.tool_calls] == ["ok", "error", "error", "error"]
    assert "49.9" in trace.reply and re.search(r"\bcheck\b", trace.reply)


def test_same_seed_same_bytes_and_wording_varies() -> None:
    ep = EPISODES["price"]
    first = [r.raw_output for r in run(ep, seed=3).rounds]
    assert first == [r.raw_output for r in run(ep, seed=3).rounds]
    outputs = {run(ep, seed=s).reply for s in range(8)}
    assert len(outputs) >= 3
    memorised = [r.raw_output for r in run(ep, policy="memorise", seed=3).rounds]
    assert memorised == first  # on the production harness the memoriser *is* the oracle


def test_rejected_reply_is_repaired() -> None:
    strict = [HookSpec("reply_length", {"max_chars": 50}) if h.name == "reply_length" else h for h in HARNESS.hooks]
    harness = replace(HARNESS, hooks=tuple(strict))
    trace = run(EPISODES["discount"], harness)
    assert trace.status == "ok"
    assert [r.action for r in trace.rounds][-2:] == ["rejected", "reply"]
    assert len(trace.reply) <= 50


# -- a renamed harness -----------------------------------------------------------------------------
TOOL_RENAMES = {"get_price": ("price_lookup", {"product": "item"}), "get_stock": ("inventory", {"product": "sku"})}
SKILL_RENAMES = {"pricing-discounts": "deal-rules", "product-qa": "item-answers"}


def rename_tool(tool: ToolSpec) -> ToolSpec:
    if tool.function_id not in TOOL_RENAMES:
        return tool
    name, param_map = TOOL_RENAMES[tool.function_id]
    props = {param_map.get(k, k): v for k, v in tool.parameters["properties"].items()}
    parameters = {**tool.parameters, "properties": props}
    return replace(tool, name=name, parameters=parameters, metadata={**tool.metadata, "param_map": param_map})


def rename_skill(skill: Skill) -> Skill:
    return replace(skill, name=SKILL_RENAMES.get(skill.name, skill.name))


def renamed_harness() -> Harness:
    schema = {"type": "object", "properties": {"text": {"type": "string", "minLength": 1}}, "required": ["text"]}
    output = OutputFormat(reply_schema=schema, reply_field="text", skill_tool="use_skill")
    decoy = Skill("deal-rules-v0", "Use for prices and coupons.", "1. Old rules.", {"function_id": "x", "decoy": True})
    return replace(
        HARNESS,
        tools=tuple(map(rename_tool, HARNESS.tools)),
        skills=(decoy, *map(rename_skill, HARNESS.skills)),
        output=output,
        limits=replace(HARNESS.limits, reply_max_chars=120),
    )


def test_oracle_follows_renames() -> None:
    harness = renamed_harness()
    trace = run(EPISODES["stock"], harness)
    assert trace.status == "ok", trace.context["status_reason"]
    assert called(trace) == [("inventory", {"sku": "p-dress-01", "color": "red", "size": "M"})]
    assert trace.tool_calls[0].status == "ok" and trace.tool_calls[0].result["qty"] == 9
    assert trace.skills_loaded == ("item-answers",)
    assert "9" in trace.reply and trace.reply_payload.get("text") == trace.reply
    price = run(EPISODES["price"], harness)
    assert called(price) == [("price_lookup", {})] and "49.9" in price.reply
    assert price.skills_loaded == ("deal-rules",)
    first = parse_output(price.rounds[0].raw_output, "text")
    assert first.tool_calls[0].name == "use_skill"
    assert all(len(r.reply["text"]) <= 120 for r in price.rounds if r.reply)


def test_first_rationale_says_what_is_asked_then_the_plan() -> None:
    """The first round's rationale states the need in fixed teacher words (never a tool name, so it
    holds under renames), then plans with the view's names: the step from the comment to the tool."""
    harness = renamed_harness()
    trace = run(EPISODES["stock"], harness)
    think = re.search(r"<think>(.*?)</think>", trace.rounds[0].raw_output, re.S)
    assert think is not None
    asked = re.match(r"Asked: (.*?)\. ", think.group(1))
    assert asked is not None and asked.group(1).startswith("units in stock")
    assert "item-answers" in think.group(1) and "inventory" in think.group(1)
    assert "get_stock" not in think.group(1) and "product-qa" not in think.group(1)


def test_memorising_policy_calls_stale_names() -> None:
    harness = renamed_harness()
    trace = run(EPISODES["stock"], harness, policy="memorise")
    assert [c.name for c in trace.tool_calls] == ["load_skill", "get_stock"]
    assert {c.status for c in trace.tool_calls} == {"unknown_tool"}
    assert trace.skills_loaded == () and trace.status == "fallback"
    production = run(EPISODES["stock"], policy="memorise")
    assert production.status == "ok" and called(production) == called(run(EPISODES["stock"]))
    assert isinstance(policy_model("memorise", EPISODES["stock"], harness), MemorisingPolicy)


# -- degenerate policies ---------------------------------------------------------------------------
def test_degenerate_policies_fail_in_their_own_way() -> None:
    ep = EPISODES["price"]
    polite = [run(e, policy="polite") for e in (ep, EPISODES["after_sales"])]
    assert polite[0].reply == polite[1].reply and not polite[0].tool_calls
    invent = run(ep, policy="invent-prices")
    assert invent.status == "ok" and not invent.tool_calls
    assert re.search(r"\$\d", invent.reply) and "49.9" not in invent.reply and "59.9" not in invent.reply
    wrong = run(ep, policy="wrong-tool")
    assert len(wrong.tool_calls) == 1 and wrong.tool_calls[0].name != "get_price" and wrong.status == "ok"
    no_tools = run(ep, policy="no-tools")
    assert no_tools.tool_calls == [] and no_tools.skills_loaded == () and "49.9" not in no_tools.reply
    spec = run(EPISODES["other"], policy="no-tools")
    assert spec.status == "ok"


def test_policy_registry() -> None:
    # a superset: other packages register policies too (hat.evolve adds "rule-reader")
    teachers = {"oracle", "skill-first", "skill-scan", "skill-scan-args", "skill-scan-answer"}
    assert teachers | {"polite", "invent-prices", "wrong-tool", "no-tools", "memorise"} <= set(POLICIES)
    assert isinstance(policy_model("oracle", EPISODES["price"], HARNESS), OracleModel)
    with pytest.raises(ModelSpecError, match="known: oracle, skill-first, skill-scan, skill-scan-args, skill-scan-a"):
        policy_model("genius", EPISODES["price"], HARNESS)
    model = policy_model("oracle", EPISODES["price"], HARNESS)
    assert model.name == "oracle" and "".join(model.stream([{"role": "system", "content": ""}]))
    loaded = load_model("policy:no-tools", episode=EPISODES["price"], harness=HARNESS)
    assert isinstance(loaded, NoToolsPolicy) and isinstance(
        load_model("oracle", episode=EPISODES["price"], harness=HARNESS), OracleModel
    )
    with pytest.raises(ModelSpecError, match="simulator-only"):
        load_model("oracle")


def test_simulate_and_request() -> None:
    ep = EPISODES["price"]
    request = episode_request(ep)
    assert request.request_id == "ep-price" and request.context["product"]["id"] == "p-dress-01"
    assert request.context["room"]["order"] and len(request.context["faq"]) <= 2 and "faults" in request.resources
    trace = simulate(ep, HARNESS)
    assert trace.status == "ok" and trace.context["episode_id"] == "ep-price" and trace.context["faults"] == []


# -- what the teacher may know ---------------------------------------------------------------------
def test_oracle_passes_only_product_references_the_model_can_see() -> None:
    """An id shown nowhere in the prompt, history or comments is passed as the viewer's words for the
    product (or a step through the room order), which the tool resolves to the gold product: a
    student trained on the oracle's rows must not learn to invent ids."""
    fryer = run(EPISODES["order_change"])  # "can u show the air fryer": p-fryer-01 is not in the prompt
    assert "p-fryer-01" not in fryer.system_prompt
    assert called(fryer) == [("switch_product_link", {"product": "air fryer"})]
    assert fryer.tool_calls[0].result["on_display"] == "p-fryer-01" and fryer.status == "ok"
    stock = run(EPISODES["stock"])  # the product on display: its id is in the prompt, so it is used
    assert "p-dress-01" in stock.system_prompt and called(stock)[0][1]["product"] == "p-dress-01"
    room = {"on_display": "p-dress-01", "order": ["p-fryer-01", "p-dress-01", "p-serum-01"]}
    back = episode(
        "ep-back",
        "can u go back",
        Gold(
            "order_change",
            (GoldCall("switch_product_link", {"product": "p-fryer-01"}),),
            skills=("presentation-order",),
        ),
        room=room,
    )
    trace = run(back)
    assert called(trace) == [("switch_product_link", {"product": "previous"})]
    assert trace.tool_calls[0].result["on_display"] == "p-fryer-01"


def test_oracle_product_arguments_are_visible_on_a_simulated_suite() -> None:
    """Under production and held-out variants (renamed tools and parameters), no product id the
    oracle passes is missing from what the model sees."""
    from hat.eval.suites import build_cases

    leaks, refs = [], 0
    for case in build_cases("t2", n=60, seed=3):
        trace = run(case.episode, case.harness)
        seen = "\n".join([trace.system_prompt, *(m["content"] for m in case.episode.history), *case.episode.comments])
        for call in trace.tool_calls:
            for value in call.arguments.values():
                if isinstance(value, str) and re.fullmatch(r"p-[a-z]+-\d+", value):
                    leaks += [] if value in seen else [value]
                elif call.status == "ok" and isinstance(call.result, dict) and "product" in call.result:
                    refs += 1
    assert leaks == [] and refs > 5


# -- the skill-first teacher -------------------------------------------------------------------------
def rules_follow_renames(harness: Harness) -> Harness:
    """``renamed_harness`` with the skills' rules naming the renamed tools, as HSA's renames do."""
    names = {fid: name for fid, (name, _) in TOOL_RENAMES.items()}

    def rewrite(skill: Skill) -> Skill:
        body = skill.body
        for old, new in names.items():
            body = body.replace(f"`{old}`", f"`{new}`")
        return replace(skill, body=body)

    return replace(harness, skills=tuple(map(rewrite, harness.skills)))


def test_skill_first_loads_the_skill_then_quotes_the_rule_that_names_the_tool() -> None:
    harness = rules_follow_renames(renamed_harness())
    trace = run(EPISODES["stock"], harness, policy="skill-first")
    assert trace.status == "ok", trace.context["status_reason"]
    first, second = (parse_output(r.raw_output, "text") for r in trace.rounds[:2])
    assert [c.name for c in first.tool_calls] == ["use_skill"]  # the skill alone, tools after its rules
    assert first.reasoning.startswith("Asked: units in stock") and "item-answers" in first.reasoning
    assert "inventory" not in first.reasoning  # the tool is named only once the rules are read
    assert second.reasoning.startswith("Rule: ") and "`inventory`" in second.reasoning
    assert "Note" not in second.reasoning and not re.match(r"Rule: \d", second.reasoning)  # no list marker
    assert called(trace) == [("inventory", {"sku": "p-dress-01", "color": "red", "size": "M"})]
    assert "9" in trace.reply  # the fact the one-round oracle gives (its wording is seeded by the round)
    assert isinstance(policy_model("skill-first", EPISODES["stock"], harness), OracleModel)


def test_skill_first_names_the_tool_by_need_when_no_rule_does() -> None:
    trace = run(EPISODES["stock"], renamed_harness(), policy="skill-first")  # rules still say get_stock
    second = parse_output(trace.rounds[1].raw_output, "text")
    assert second.reasoning == "No rule names it; the tool for units in stock of p-dress-01 is inventory."
    assert called(trace)[0][0] == "inventory" and trace.status == "ok"


@pytest.mark.parametrize("key", ["casual_chat", "other"])
def test_skill_first_is_the_oracle_without_a_tool_to_defer(key: str) -> None:
    ep = EPISODES[key]
    assert [r.raw_output for r in run(ep, policy="skill-first").rounds] == [r.raw_output for r in run(ep).rounds]


def test_skill_first_keeps_one_round_when_the_harness_allows_only_two() -> None:
    harness = replace(HARNESS, limits=replace(HARNESS.limits, max_rounds=2))
    trace = run(EPISODES["stock"], harness, policy="skill-first")
    assert [c.name for c in parse_output(trace.rounds[0].raw_output, "reply").tool_calls] == ["load_skill", "get_stock"]
    assert trace.status == "ok"


def test_naming_rule_finds_the_sentence_with_the_name() -> None:
    from hat.env.oracle import _naming_rule

    text = (
        "1. Policy: Give the dispatch time from `FIND_FREIGHT`; never promise an arrival date.\n"
        "4. Note - Material, fit, features: call `find_merkmale`. Shipping fee: call `obtain.vouchers` first.\n"
        "- Must: Reply in one or two short sentences."
    )
    assert (
        _naming_rule(text, "FIND_FREIGHT")
        == "Give the dispatch time from `FIND_FREIGHT`; never promise an arrival date."
    )
    assert _naming_rule(text, "find_merkmale") == "Material, fit, features: call `find_merkmale`."
    assert _naming_rule(text, "obtain.vouchers") == "Shipping fee: call `obtain.vouchers` first."
    assert _naming_rule(text, "find") is None and _naming_rule(text, "vouchers") is None


# -- the skill-scan teacher ------------------------------------------------------------------------
def test_skill_scan_lists_the_catalogue_then_copies_the_needed_name() -> None:
    harness = rules_follow_renames(renamed_harness())
    trace = run(EPISODES["stock"], harness, policy="skill-scan")
    assert trace.status == "ok", trace.context["status_reason"]
    think = parse_output(trace.rounds[0].raw_output, "text").reasoning
    listed = [s.name for s in harness.skills if f"- {s.name}: " in trace.system_prompt]
    order = sorted(listed, key=lambda n: trace.system_prompt.index(f"- {n}: "))
    scan = re.search(r"Skills: (.*?)\. Need: ", think).group(1)
    assert [pair.split("=")[1] for pair in scan.split(", ")] == order  # every listed skill, prompt order
    assert think.startswith("Asked: units in stock") and "Need: product=item-answers; its rules name the tool." in think
    assert "product=item-answers" in scan
    # the rest is the skill-first teacher: same calls, same reply
    first = run(EPISODES["stock"], harness, policy="skill-first")
    assert called(trace) == called(first) and trace.reply == first.reply


def test_skill_scan_calls_a_decoy_none_and_leaves_skill_free_rounds_alone() -> None:
    decoy = Skill("stock-market", "Use for questions about stocks.", "1. No advice.", {"decoy": True})
    harness = replace(HARNESS, skills=(*HARNESS.skills, decoy))
    think = parse_output(run(EPISODES["stock"], harness, policy="skill-scan").rounds[0].raw_output, "text").reasoning
    assert "none=stock-market" in think and "Need: product=product-qa;" in think
    ep = EPISODES["other"]  # no skill to load: the skill-first (= one-round) rationale, unchanged
    assert [r.raw_output for r in run(ep, policy="skill-scan").rounds] == [r.raw_output for r in run(ep).rounds]


# -- the skill-scan-args teacher -------------------------------------------------------------------
def test_skill_scan_args_copies_the_called_tools_argument_names_before_the_call() -> None:
    harness = rules_follow_renames(renamed_harness())
    trace = run(EPISODES["stock"], harness, policy="skill-scan-args")
    assert trace.status == "ok", trace.context["status_reason"]
    second = parse_output(trace.rounds[1].raw_output, "text").reasoning
    line = re.search(r"^- inventory\(([^)]*)\)", trace.system_prompt, re.MULTILINE).group(1)
    names = [part.split(":")[0].strip() for part in line.split(",")]
    assert names[0].rstrip("?") == "sku"
    assert second.endswith(f"Args: inventory({', '.join(names)}).")  # the names in the prompt's order
    assert second.startswith("Rule: ") and "`inventory`" in second
    # everything else is the skill-scan teacher's: first round, calls and reply
    scan = run(EPISODES["stock"], harness, policy="skill-scan")
    assert trace.rounds[0].raw_output == scan.rounds[0].raw_output
    assert called(trace) == called(scan) == [("inventory", {"sku": "p-dress-01", "color": "red", "size": "M"})]
    assert trace.reply == scan.reply


def test_argument_names_from_the_prompt_line_or_the_views_schema() -> None:
    from hat.env.oracle import _argument_names

    harness = renamed_harness()
    listed = "Tools:\n- inventory(sku?: string, size: string): Units."
    assert _argument_names(listed, harness, "inventory") == "inventory(sku?, size)"
    assert _argument_names("- inventory(): none", harness, "inventory") == "inventory()"
    built = _argument_names('{"name": "inventory", "parameters": {}}', harness, "inventory")  # a JSON listing
    assert built is not None and built.startswith("inventory(sku") and "color?" in built and ":" not in built
    assert _argument_names("", harness, "no_such_tool") is None


@pytest.mark.parametrize("key", ["casual_chat", "other"])
@pytest.mark.parametrize(
    ("teacher", "parent"), [("skill-scan-args", "skill-scan"), ("skill-scan-answer", "skill-scan-args")]
)
def test_later_teachers_leave_tool_free_episodes_alone(key: str, teacher: str, parent: str) -> None:
    ep = EPISODES[key]
    outputs = [[r.raw_output for r in run(ep, policy=name).rounds] for name in (teacher, parent)]
    assert outputs[0] == outputs[1]


# -- the skill-scan-answer teacher -----------------------------------------------------------------
def test_skill_scan_answer_names_the_fields_its_reply_states() -> None:
    harness = rules_follow_renames(renamed_harness())
    trace = run(EPISODES["stock"], harness, policy="skill-scan-answer")
    assert trace.status == "ok", trace.context["status_reason"]
    args = run(EPISODES["stock"], harness, policy="skill-scan-args")
    assert parse_output(trace.rounds[-1].raw_output, "text").reasoning == "Answer: qty=9, color=red."
    assert parse_output(args.rounds[-1].raw_output, "text").reasoning in (
        "Results are in; answer with what the tools returned.",
        "I have the data now; keep it short and exact.",
    )
    # the rounds before the reply, the calls and (one fact) the reply are the skill-scan-args teacher's
    assert [r.raw_output for r in trace.rounds[:-1]] == [r.raw_output for r in args.rounds[:-1]]
    assert trace.reply == args.reply and "9 in stock in red M" in trace.reply


def test_skill_scan_answer_states_the_asked_fact_first() -> None:
    """A coupon question whose tool also returns the live price: the older teachers' reply opens
    with the price; this one opens with the coupon, and its rationale names the code first."""
    coupon = replace(EPISODES["discount"], gold=replace(EPISODES["discount"].gold, facts=("GLOW5",)))
    trace = run(coupon, policy="skill-scan-answer")
    older = run(coupon, policy="skill-scan-args").reply
    assert trace.status == "ok" and "GLOW5" in trace.reply
    assert older.index("$25.6") < older.index("GLOW5")  # what attempt 12's students learnt to copy
    assert trace.reply.index("GLOW5") < trace.reply.index("$25.6")
    assert parse_output(trace.rounds[-1].raw_output, "text").reasoning.startswith("Answer: code=GLOW5, discount=5")


def test_answer_fields_reads_numbers_as_the_judges_do() -> None:
    from hat.env.oracle import _answer_fields

    result = {"name": "Serum", "price": 32.0, "promo_price": 25.6, "qty": 3, "score": 1,
              "coupons": [{"code": "GLOW5", "discount": 5, "description": "x" * 40}]}  # fmt: skip
    reply = "Use code GLOW5 for $5 off! " + "x" * 40 + ". Serum is $25.6 (list $32.0), 30 left."
    assert _answer_fields(reply, [result]) == ["code=GLOW5", "discount=5", "description"]
    assert _answer_fields(reply, [result], most=5)[3:] == ["promo_price=25.6", "price=32.0"]  # "3" is not in "30"
    assert _answer_fields("Serum is on screen now! Score 1.", [result]) == ["name=Serum"]  # the name alone
    assert _answer_fields("Nothing here.", [result]) == []
