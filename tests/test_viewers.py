"""The viewer/episode generator: determinism, the report's intent mix, phrasing variety, and gold
that agrees with the real tools (function ids, canonical parameters, achievable facts)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from hat.env import phrasings as ph
from hat.env.episode import INTENT_MIX, Episode, episodes_hash, read_episodes, write_episodes
from hat.env.livestream_tools import TOOL_FUNCTIONS
from hat.env.viewers import generate_episodes, gold_results, intent_quota
from hat.env.world import world_catalog
from hat.harness.state import canonical_json

HARNESS = Path(__file__).resolve().parents[1] / "src" / "hat" / "harnesses" / "livestream"
N = 1000


def _front_matter(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8").split("---")[1])


TOOL_PARAMS = {
    spec["metadata"]["function_id"]: set(spec["parameters"]["properties"])
    for spec in (yaml.safe_load(p.read_text(encoding="utf-8")) for p in (HARNESS / "tools").glob("*.yaml"))
}
SKILL_IDS = {_front_matter(p)["metadata"]["function_id"] for p in (HARNESS / "skills").glob("*/SKILL.md")}


@pytest.fixture(scope="module")
def episodes() -> list[Episode]:
    return generate_episodes(N, 0)


@pytest.fixture(scope="module")
def multi() -> list[Episode]:
    return generate_episodes(300, 4, mode="multi")


def by_intent(episodes: list[Episode], intent: str) -> list[Episode]:
    return [e for e in episodes if e.gold.intent == intent]


def templates_used(episodes: list[Episode]) -> Counter[str]:
    return Counter(t for e in episodes for t in e.gold.notes.split("tpl=")[1].split(","))


# -- determinism --------------------------------------------------------------------------------------
def test_same_arguments_same_hash_in_process_and_subprocess() -> None:
    first = episodes_hash(generate_episodes(300, 11, mode="multi", fault_rate=0.2))
    assert episodes_hash(generate_episodes(300, 11, mode="multi", fault_rate=0.2)) == first
    code = (
        "from hat.env.viewers import generate_episodes; from hat.env.episode import episodes_hash; "
        "print(episodes_hash(generate_episodes(300, 11, mode='multi', fault_rate=0.2)))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "999"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == first


def test_different_seeds_differ_and_runs_are_prefix_stable(episodes: list[Episode]) -> None:
    assert episodes_hash(generate_episodes(100, 1)) != episodes_hash(episodes[:100])
    assert generate_episodes(150, 0) == episodes[:150]  # episode i depends only on (seed, i)
    other_world = generate_episodes(50, 0, world_seed=3)
    assert all(e.world_seed == 3 for e in other_world) and other_world != episodes[:50]
    assert [e.episode_id for e in episodes[:3]] == ["0-00000", "0-00001", "0-00002"]


def test_fault_spec_per_episode() -> None:
    eps = generate_episodes(40, 2, fault_rate=0.3)
    assert all(e.faults.rate == 0.3 for e in eps)
    assert len({e.faults.seed for e in eps}) == 40
    assert all(e.faults.rate == 0.0 for e in generate_episodes(5, 2))


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="mode"):
        generate_episodes(1, 0, mode="batch")
    with pytest.raises(ValueError, match="fault_rate"):
        generate_episodes(1, 0, fault_rate=2.0)
    with pytest.raises(ValueError, match="world_seed"):
        generate_episodes(1, 0, world_seed=-1)


# -- intent mix and variety ----------------------------------------------------------------------------
def test_intent_mix_within_three_points(episodes: list[Episode]) -> None:
    counts = Counter(e.gold.intent for e in episodes)
    measured = {k: counts[k] / N for k in INTENT_MIX}
    print("\nmeasured intent mix (n=1000, seed=0):", {k: f"{v:.1%}" for k, v in measured.items()})
    for intent, target in INTENT_MIX.items():
        assert abs(measured[intent] - target) <= 0.03, (intent, measured[intent], target)
    assert sum(intent_quota(137).values()) == 137


def test_a_training_intent_mix_is_followed_exactly_and_validated() -> None:
    flat = {k: 1.0 for k in INTENT_MIX}  # every intent equally often: 8 per block of 100 + remainder
    eps = generate_episodes(200, 3, intent_mix=flat)
    counts = Counter(e.gold.intent for e in eps)
    assert counts == Counter({k: 2 * v for k, v in intent_quota(100, flat).items()})
    assert min(counts.values()) == 24 and max(counts.values()) == 26
    assert [e.gold.intent for e in generate_episodes(50, 3)] == [
        e.gold.intent for e in generate_episodes(50, 3, intent_mix=None)
    ]
    with pytest.raises(ValueError, match="intent_mix"):
        generate_episodes(5, 0, intent_mix={"shopping": 1.0})


def test_at_least_30_phrasings_per_family(episodes: list[Episode]) -> None:
    sizes = {family: len(set(templates)) for family, templates in ph.FAMILIES.items()}
    used = templates_used(episodes)
    in_use = {f: len({t for t in used if t.startswith(f + "#")}) for f in ph.FAMILIES}
    print("\nphrasings per family (table / used in 1000 episodes):", {f: (sizes[f], in_use[f]) for f in sizes})
    assert set(sizes) == set(INTENT_MIX)
    assert min(sizes.values()) >= 30
    for family in ("product_qa", "casual_chat", "clarification"):  # families with enough episodes to see 30
        assert in_use[family] >= 30, family


def test_noise_and_reference_variety(episodes: list[Episode]) -> None:
    comments = [c for e in episodes for c in e.comments]
    assert sum(c.isupper() for c in comments) >= 10  # ALL CAPS
    assert sum(bool(re.search(r"[\U0001F300-\U0001FAFF❤✨]", c)) for c in comments) >= 150  # emoji
    assert sum(not c.rstrip().endswith(("?", "!", ".")) for c in comments) >= 200  # no punctuation
    qa = by_intent(episodes, "product_qa")
    assert sum(len(e.gold.tool_calls) == 2 for e in qa) >= 15  # two questions in one comment
    assert sum(any(d in e.comments[0].lower() for d in ph.DEICTIC[1:]) for e in qa) >= 20  # "this one"
    assert sum(" one" in e.comments[0] and bool(e.gold.tool_calls[0].arguments.get("product")) for e in qa) >= 3
    kinds = Counter(e.gold.notes.split("kind=")[1].split("/")[0].split(";")[0] for e in qa)
    assert {"price", "stock", "spec", "shipping"} <= set(kinds)


def test_deictic_references_mean_the_product_on_display(episodes: list[Episode]) -> None:
    for e in by_intent(episodes, "product_qa"):
        if any(d in e.comments[0].lower() for d in ("this one", "the one on screen", "the current one")):
            assert all(c.arguments.get("product") is None for c in e.gold.tool_calls), e.comments


# -- gold ------------------------------------------------------------------------------------------------
def test_gold_uses_function_ids_and_canonical_parameters(episodes: list[Episode], multi: list[Episode]) -> None:
    for e in episodes + multi:
        ids = {p["id"] for p in world_catalog(e.world_seed).products}
        assert set(e.gold.skills) <= SKILL_IDS and set(e.gold.optional_tools) <= set(TOOL_PARAMS)
        for call in e.gold.tool_calls:
            assert call.function_id in TOOL_FUNCTIONS and call.function_id in TOOL_PARAMS
            assert set(call.arguments) <= TOOL_PARAMS[call.function_id], call
            product = call.arguments.get("product")
            assert product is None or product in ids
        assert not set(e.gold.optional_tools) & {c.function_id for c in e.gold.tool_calls}


def test_gold_facts_are_in_the_gold_tool_results(episodes: list[Episode], multi: list[Episode]) -> None:
    for e in episodes + multi:
        results = gold_results(e)
        blob = canonical_json(results)
        assert not any("error" in r for r in results), (e.episode_id, results)
        for fact in e.gold.facts:
            assert fact in blob, (e.episode_id, fact)
        for claim in e.gold.forbidden:
            assert claim.lower() not in blob.lower() and claim not in e.gold.facts
    assert sum(bool(e.gold.facts) for e in by_intent(episodes, "product_qa")) >= 350


def test_gold_per_intent(episodes: list[Episode]) -> None:
    def ids(e: Episode) -> list[str]:
        return [c.function_id for c in e.gold.tool_calls]

    product_tools = {"get_price", "get_stock", "get_specs", "get_shipping"}
    assert all(ids(e) and set(ids(e)) <= product_tools for e in by_intent(episodes, "product_qa"))
    assert all(ids(e) == ["handoff_to_service"] and not e.gold.answerable for e in by_intent(episodes, "after_sales"))
    assert all(ids(e) == ["switch_product_link"] for e in by_intent(episodes, "order_change"))
    assert all(ids(e) == ["get_discount_rules"] for e in by_intent(episodes, "discount"))
    assert all(ids(e) == ["search_faq"] and e.gold.facts for e in by_intent(episodes, "faq"))
    assert all(not ids(e) and e.gold.skills == ("casual-chat",) for e in by_intent(episodes, "casual_chat"))
    assert all(not ids(e) and not e.gold.answerable for e in by_intent(episodes, "other"))
    prices = [e for e in episodes if ids(e) == ["get_price"]]
    assert all(re.fullmatch(r"\d+\.\d+", e.gold.facts[0]) for e in prices)  # "45.9" as the tool prints it
    switched = [e for e in by_intent(episodes, "order_change") if "via=next" in e.gold.notes]
    for e in switched:
        order = e.room["order"]
        assert e.gold.tool_calls[0].arguments["product"] == order[order.index(e.room["on_display"]) + 1]


def test_clarification_depends_on_history(episodes: list[Episode]) -> None:
    clarifications = by_intent(episodes, "clarification")
    assert clarifications
    for e in clarifications:
        assert [m["role"] for m in e.history] == ["user", "assistant"]
        assert len(e.gold.tool_calls) == 1
    off_screen = [e for e in clarifications if e.gold.tool_calls[0].arguments.get("product")]
    assert len(off_screen) >= len(clarifications) // 2  # the product comes from the history, not the screen
    carried = [
        e for e in clarifications if "followup/size" in e.gold.notes and "color" in e.gold.tool_calls[0].arguments
    ]
    assert carried  # "is the black one in stock?" ... "and in L?": the colour is carried over


def test_multi_mode_has_2_to_4_comments(multi: list[Episode]) -> None:
    assert all(2 <= len(e.comments) <= 4 and e.mode == "multi" for e in multi)
    assert {len(e.comments) for e in multi} == {2, 3, 4}
    for e in by_intent(multi, "clarification"):
        assert e.gold.notes.split("main=")[1].split(";")[0] == str(len(e.comments) - 1)


def test_json_round_trip(tmp_path: Path, multi: list[Episode]) -> None:
    path = tmp_path / "episodes.jsonl"
    assert write_episodes(path, multi) == len(multi)
    back = read_episodes(path)
    assert back == multi and episodes_hash(back) == episodes_hash(multi)
