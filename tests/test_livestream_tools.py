"""The default ``livestream`` harness content: catalog, Python tools, tool/skill files, prompt blocks,
demo script. Fast, no model, no runtime: files are read with yaml/jinja2 directly so these tests
pin the content itself."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from jinja2.sandbox import SandboxedEnvironment
from jsonschema import Draft202012Validator

from hat.env import livestream_tools as tools
from hat.env.catalog import Catalog, find_product, load_catalog
from hat.env.demo_script import HOST_LINES, VIEWER_COMMENTS, demo_stream
from hat.harness.tools import ToolContext

HARNESS = Path(tools.__file__).resolve().parents[1] / "harnesses" / "livestream"
TOOL_FILES = sorted((HARNESS / "tools").glob("*.yaml"))
SKILL_FILES = sorted((HARNESS / "skills").glob("*/SKILL.md"))


def make_context(**room_changes: Any) -> ToolContext:
    return ToolContext(context={"room": {**load_catalog().new_room(), **room_changes}})


def front_matter(path: Path) -> tuple[dict[str, Any], str]:
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", path.read_text(encoding="utf-8"), re.S)
    assert match, f"{path} has no YAML front matter"
    return yaml.safe_load(match.group(1)), match.group(2)


# -- catalog ----------------------------------------------------------------------------------------
def test_catalog_shape() -> None:
    catalog = load_catalog()
    assert load_catalog() is catalog  # cached
    assert len(catalog.products) >= 10
    assert len({p["category"] for p in catalog.products}) >= 6
    assert len(catalog.faq) >= 10 and len(catalog.campaigns) == 3
    assert catalog.room["on_display"] in {p["id"] for p in catalog.products}
    assert all(re.fullmatch(r"p-[a-z]+-\d\d", p["id"]) for p in catalog.products)


def test_find_product_by_id_name_color_and_typo() -> None:
    assert find_product("p-fryer-01")["id"] == "p-fryer-01"  # type: ignore[index]
    assert find_product("dress")["id"] == "p-dress-01"  # type: ignore[index]
    assert find_product("the blue one")["id"] == "p-dress-01"  # type: ignore[index]
    assert find_product("earbudz pls")["id"] == "p-earbuds-01"  # type: ignore[index]
    assert find_product("air fryer")["id"] == "p-fryer-01"  # type: ignore[index]
    assert find_product("something unrelated") is None


def test_find_product_ambiguity_resolved_only_by_prefer() -> None:
    # "black": hoodie, earbuds and fryer; and not the "block" toy through fuzzy matching
    assert find_product("the black one") is None
    assert find_product("the black one", prefer="p-earbuds-01")["id"] == "p-earbuds-01"  # type: ignore[index]
    assert find_product("the black one", prefer="p-dress-01") is None  # dress has no black


def test_catalog_from_dict_reports_every_problem() -> None:
    data = {"products": [{"id": "x"}, {"id": "x"}], "room": {"on_display": "nope", "order": []}}
    with pytest.raises(ValueError) as err:
        Catalog.from_dict(data)
    message = str(err.value)
    assert "lacks name" in message and "duplicate product ids: x" in message
    assert "unknown products: nope" in message and "room lacks 'host'" in message


# -- product tools ----------------------------------------------------------------------------------
def test_get_price_by_id_and_by_fuzzy_name() -> None:
    by_id = tools.get_price("p-dress-01")
    assert by_id == {
        "product": "p-dress-01",
        "name": "Floral Midi Wrap Dress",
        "currency": "USD",
        "price": 59.9,
        "promo_price": 49.9,
        "promo_active": True,
    }
    assert tools.get_price("floral dress") == by_id
    assert tools.get_price("hoodie")["promo_active"] is False


def test_unknown_and_ambiguous_products_raise_lookup_error_with_guidance() -> None:
    with pytest.raises(LookupError, match=r"no product matches 'spaceship'.*p-dress-01"):
        tools.get_price("spaceship")
    with pytest.raises(LookupError, match=r"matches several products: p-hoodie-01 .*pass one of these ids"):
        tools.get_specs("black")


def test_missing_product_defaults_to_on_display() -> None:
    context = make_context(on_display="p-earbuds-01")
    assert tools.get_price(context=context)["product"] == "p-earbuds-01"
    assert tools.get_specs(context=context)["specs"]["bluetooth"] == "5.3"
    assert tools.get_stock(color="black", context=context)["qty"] == 2
    # ambiguous reference resolved towards the on-display product
    assert tools.get_price("the black one", context=context)["product"] == "p-earbuds-01"
    with pytest.raises(ValueError, match="nothing is on display"):
        tools.get_price()


def test_get_stock_filters_by_color_and_size() -> None:
    blue_m = tools.get_stock("dress", color="Blue", size="medium")
    assert (blue_m["color"], blue_m["size"], blue_m["qty"], blue_m["in_stock"]) == ("blue", "M", 0, False)
    assert tools.get_stock("dress", color="red")["qty"] == 14
    assert tools.get_stock("p-dress-01")["qty"] == 24
    with pytest.raises(ValueError, match="comes in colors blue, red; there is no 'green'"):
        tools.get_stock("dress", color="green")
    with pytest.raises(ValueError, match="has no size options"):
        tools.get_stock("lipstick", size="M")


def test_discount_rules_follow_category() -> None:
    lipstick = {c["code"] for c in tools.get_discount_rules("lipstick")["coupons"]}
    dress = {c["code"] for c in tools.get_discount_rules("dress")["coupons"]}
    assert lipstick == {"LIVE10", "GLOW5", "NEWFAN3"} and dress == {"LIVE10", "NEWFAN3"}
    fryer = {c["code"]: c for c in tools.get_discount_rules("p-fryer-01")["coupons"]}
    assert fryer["LIVE10"]["reached_with_one_unit"] is True  # promo 99 >= threshold 80
    general = tools.get_discount_rules()
    assert general["product"] is None and len(general["coupons"]) == 3 and general["rules"]


def test_get_shipping_region() -> None:
    shipping = tools.get_shipping("coffee", region="Canada")
    assert shipping["ships_in_days"] == 2 and shipping["region"] == "CA"
    assert shipping["ships_to_region"] is False
    assert tools.get_shipping("earbuds", region="germany")["ships_to_region"] is True
    assert "return_policy" in tools.get_shipping("p-dress-01")


# -- room actions -----------------------------------------------------------------------------------
def test_search_faq_ranks_the_obvious_entry_first() -> None:
    cases = {
        "how do I use a coupon code?": "faq-coupon-use",
        "can I return this if it doesn't fit": "faq-returns",
        "do you take paypal": "faq-payment",
        "is this real or fake??": "faq-authentic",
    }
    for query, expected in cases.items():
        results = tools.search_faq(query)["results"]
        assert results[0]["id"] == expected, query
        assert len(results) <= 3
    assert tools.search_faq("zebra quantum")["results"] == []
    with pytest.raises(ValueError, match="no searchable words"):
        tools.search_faq("is it?")


def test_switch_product_link_mutates_state() -> None:
    context = make_context()
    result = tools.switch_product_link("yoga mat", context=context)
    assert result["on_display"] == context.state["on_display"] == "p-yogamat-01"
    assert result["previous"] == "p-dress-01" and result["changed"] is True
    assert context.context["room"]["on_display"] == "p-dress-01"  # the room itself is not edited
    assert tools.get_price(context=context)["product"] == "p-yogamat-01"  # later calls follow
    assert tools.switch_product_link("next", context=context)["on_display"] == "p-fryer-01"
    assert tools.switch_product_link("previous", context=context)["on_display"] == "p-yogamat-01"


def test_switch_next_at_end_and_without_order() -> None:
    with pytest.raises(ValueError, match="last product"):
        tools.switch_product_link("next", context=make_context(on_display="p-blocks-01"))
    with pytest.raises(ValueError, match="no product order"):
        tools.switch_product_link("next", context=ToolContext())


def test_handoff_ticket_is_deterministic() -> None:
    first = tools.handoff_to_service("Dress arrived  torn, wants refund", order_id="#A1029")
    again = tools.handoff_to_service("dress arrived torn, wants refund")
    other = tools.handoff_to_service("late delivery")
    assert first["ticket_id"] == again["ticket_id"] and re.fullmatch(r"CS-[0-9A-F]{8}", first["ticket_id"])
    assert other["ticket_id"] != first["ticket_id"]
    assert first["order_id"] == "A1029" and again["order_id"] is None
    context = make_context()
    tools.handoff_to_service("late delivery", context=context)
    assert context.state["handoffs"] == [other["ticket_id"]]
    with pytest.raises(ValueError, match="reason is empty"):
        tools.handoff_to_service("   ")


def test_context_catalog_overrides_the_bundled_one() -> None:
    data = {
        "products": [{**load_catalog().product("p-dress-01"), "price": 1.0}],  # type: ignore[dict-item]
        "room": {**load_catalog().room, "order": ["p-dress-01"]},
    }
    context = ToolContext(context={"room": data["room"]}, resources={"catalog": Catalog.from_dict(data)})
    assert tools.get_price(context=context)["price"] == 1.0
    assert tools.get_price("p-dress-01")["price"] == 59.9  # no context: the bundled catalog


# -- demo script ------------------------------------------------------------------------------------
def test_demo_stream_is_deterministic_and_sized() -> None:
    assert demo_stream(10, seed=3) == demo_stream(10, seed=3)
    assert demo_stream(10, seed=3) != demo_stream(10, seed=4)
    assert len(demo_stream(0, seed=1)) == 0 and len(demo_stream(50, seed=1)) == 50
    one_pass = demo_stream(len(VIEWER_COMMENTS), seed=7)
    assert sorted(item["comment"] for item in one_pass) == sorted(VIEWER_COMMENTS)  # type: ignore[type-var]
    assert one_pass[0]["host"] == HOST_LINES[0]
    assert all(item["host"] is None or item["host"] in HOST_LINES for item in one_pass)


# -- harness files ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", TOOL_FILES, ids=lambda p: p.stem)
def test_tool_file_matches_python_function(path: Path) -> None:
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert spec["name"] == path.stem == spec["metadata"]["function_id"]
    assert spec["description"].strip()
    schema = spec["parameters"]
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"

    kind, module, function = spec["binding"].split(":")
    assert kind == "python"
    fn = getattr(importlib.import_module(module), function)
    assert tools.TOOL_FUNCTIONS[spec["name"]] is fn
    params = inspect.signature(fn).parameters
    context = params["context"]
    assert context.kind is inspect.Parameter.KEYWORD_ONLY and context.default is None
    arguments = {name: p for name, p in params.items() if name != "context"}
    assert set(schema["properties"]) == set(arguments)
    required = {name for name, p in arguments.items() if p.default is inspect.Parameter.empty}
    assert set(schema.get("required", [])) == required


def test_every_tool_function_has_a_file() -> None:
    assert {p.stem for p in TOOL_FILES} == set(tools.TOOL_FUNCTIONS)


@pytest.mark.parametrize("path", SKILL_FILES, ids=lambda p: p.parent.name)
def test_skill_front_matter_and_rules(path: Path) -> None:
    meta, body = front_matter(path)
    name = meta["name"]
    assert name == path.parent.name and len(name) <= 64
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name)
    assert 0 < len(meta["description"]) <= 1024
    assert meta["metadata"] == {"version": "1.0", "function_id": name}
    rules = re.findall(r"^\d+\. ", body, re.M)
    assert 4 <= len(rules) <= 8
    mentioned = set(re.findall(r"`([a-z_]+)`", body))
    assert mentioned <= set(tools.TOOL_FUNCTIONS), mentioned - set(tools.TOOL_FUNCTIONS)


def test_skill_set_is_complete() -> None:
    expected = {"product-qa", "pricing-discounts", "after-sales-handoff", "casual-chat"}
    assert {p.parent.name for p in SKILL_FILES} == expected | {"presentation-order", "faq-replies"}


def test_harness_yaml_shape() -> None:
    config = yaml.safe_load((HARNESS / "harness.yaml").read_text(encoding="utf-8"))
    assert config["name"] == "livestream" and config["version"] == "1.1.0"
    prompt_files = {p.name for p in (HARNESS / "prompts").iterdir()}
    assert {f"{block}.md" for block in config["pipeline"]} <= prompt_files
    hooks = {hook["name"]: hook.get("config", {}) for hook in config["hooks"]}
    builtin = [
        "input_guard",
        "reply_schema",
        "reply_length",
        "python:hat.env.claims:ClaimsCheckHook",
        "comment_echo",
        "grounded_claims",
        "tool_retry",
    ]
    assert list(hooks) == [*builtin, "tool_policy"]
    assert hooks["tool_retry"] == {"retries": 1, "backoff_s": 0.2, "statuses": ["timeout"]}
    assert "100% refund" in hooks["grounded_claims"]["forbidden_phrases"]
    assert 5 <= len(config["settings"]["boundaries"]) <= 7
    assert len(config["output"]["fallback_reply"]) <= config["limits"]["reply_max_chars"]


# -- prompt blocks ----------------------------------------------------------------------------------
def render_system_prompt(room: dict[str, Any], faq: list[dict[str, str]]) -> str:
    """Render every block with only the documented variables (StrictUndefined catches any other)."""
    from hat.harness import load_harness, template_context

    harness = load_harness(HARNESS)
    variables = template_context(
        harness, {"room": room, "product": load_catalog().product(room.get("on_display") or ""), "faq": faq}
    )
    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    texts = [env.from_string(harness.block(block).template).render(**variables) for block in harness.pipeline]
    return "\n\n".join(t.strip() for t in texts if t.strip())


def test_prompt_renders_compactly_with_documented_variables() -> None:
    faq = [{"question": f["question"], "answer": f["answer"]} for f in load_catalog().faq[:2]]
    text = render_system_prompt(load_catalog().new_room(), faq)
    # ~900 SmolLM2 tokens measured at ~3.5 characters per token; see the harness README notes
    assert len(text) <= 3300, len(text)
    needles = [
        '<tool_call>{"name": "load_skill", "arguments": {"name": "<skill>"}}</tool_call>',
        '<reply>{"reply": "..."}</reply>',
        "at most 160 characters",
        "On display: Floral Midi Wrap Dress",
        "- product-qa: ",
        "- get_stock(product?: string, color?: string, size?: string): ",
        "Never promise delivery dates",
        "Up next: p-hoodie-01",
    ]
    assert [n for n in needles if n not in text] == []
    example = re.search(r"Example: (<tool_call>.*</tool_call>)", text)
    assert example and '"arguments": {"product": "p-dress-01"}' in example.group(1)


def test_prompt_renders_without_product_or_faq() -> None:
    room = {**load_catalog().new_room(), "on_display": None, "campaign": None}
    text = render_system_prompt(room, [])
    assert "Nothing is on display right now." in text and "FAQ:" not in text
    assert "Campaign: none" in text and "Example: <tool_call>" not in text
