"""Harness-State Augmentation: valid, distinct, deterministic, labels follow, pools split."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from typer.testing import CliRunner

from hat.augment import AUGMENTERS, FAMILIES, augment, generate_variants, load_envelope, pools, write_variant
from hat.cli.main import app
from hat.errors import HatError
from hat.harness import Agent, load_harness, validate_harness
from hat.models.scripted import ScriptedModel


@pytest.fixture(scope="module")
def base():
    return load_harness("livestream")


def test_variants_distinct_cover_families_and_deterministic(base):
    a = generate_variants(base, 200, seed=7, split="heldout")
    b = generate_variants(base, 200, seed=7, split="heldout")
    assert [v.harness.content_hash() for v in a] == [v.harness.content_hash() for v in b]
    assert [json.dumps(v.record, sort_keys=True) for v in a] == [json.dumps(v.record, sort_keys=True) for v in b]
    assert len({v.harness.content_hash() for v in a}) == 200
    families = Counter(f for v in a for f in v.families)
    assert set(families) == set(FAMILIES) == {"skills", "tools", "prompt", "hooks"}
    applied = Counter(t for v in a for t in v.applied)
    assert set(applied) == set(AUGMENTERS)  # every transform of the envelope was exercised


def test_saved_variants_validate_and_reload_identically(base, tmp_path):
    for i, variant in enumerate(generate_variants(base, 40, seed=3, split="train")):
        folder = write_variant(variant, tmp_path / f"v{i}")
        assert validate_harness(folder) == [], variant.applied
        assert load_harness(folder).content_hash() == variant.harness.content_hash()


def test_byte_identical_on_disk(base, tmp_path):
    for run in ("a", "b"):
        write_variant(augment(base, 11, split="heldout"), tmp_path / run)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files and all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)


def test_labels_follow_renames(base):
    env = load_envelope("tools")
    v = next(
        v for v in generate_variants(base, 40, 1, env) if "tool_rename" in v.applied and "param_rename" in v.applied
    )
    for fid, new in v.record["tools"].items():
        tool = v.harness.tool(new)
        assert tool is not None and tool.function_id == fid and base.tool(fid) is not None
    for fid, pmap in v.record["params"].items():
        props = v.harness.tool_by_function(fid).parameters["properties"]
        assert all(cur in props for cur in pmap.values())
    renamed = v.record["tools"]
    if "get_stock" in renamed:  # skill bodies name tools; they follow the rename
        body = v.harness.skill_by_function("product-qa").body
        assert renamed["get_stock"] in body and "`get_stock`" not in body


def test_renamed_parameters_reach_the_binding_canonically(base):
    v = next(
        v
        for v in generate_variants(base, 60, 2, load_envelope("tools"))
        if "get_stock" in v.record.get("params", {}) and "product" in v.record["params"]["get_stock"]
    )
    tool = v.harness.tool_by_function("get_stock")
    arg = v.record["params"]["get_stock"]["product"]
    call = json.dumps({"name": tool.name, "arguments": {arg: "p-dress-01"}})
    agent = Agent(v.harness, ScriptedModel([f"<tool_call>{call}</tool_call>", "<reply>ok</reply>"]))
    record = agent.respond("stock?").trace.tool_calls[0]
    assert record.status == "ok" and record.result["product"] == "p-dress-01"


def test_pools_are_split_without_overlap():
    def flat(value):
        if isinstance(value, dict):
            return [x for v in value.values() for x in flat(v)]
        if isinstance(value, (list, tuple)):
            return [x for v in value for x in flat(v)]
        return [value]

    for name in (
        "TOOL_VERBS",
        "REPLY_FIELDS",
        "SKILL_TOOL_NAMES",
        "FEEDBACK_TEMPLATES",
        "DECOY_TOOLS",
        "DECOY_SKILLS",
        "RULE_PREFIXES",
    ):
        pool = getattr(pools, name)
        overlap = (set(flat(pool["train"])) - {"", "string", "type"}) & set(flat(pool["heldout"]))
        assert not overlap, (name, overlap)
    for table in (
        pools.TOOL_CONCEPTS,
        pools.SKILL_CONCEPTS,
        pools.PARAM_NAMES,
        pools.TOOL_DESCRIPTIONS,
        pools.SKILL_DESCRIPTIONS,
    ):
        for key, pool in table.items():
            assert not set(pool["train"]) & set(pool["heldout"]), key


def _made_up(name: str) -> bool:
    """A name built only from the train split's made-up syllables (any casing or separator)."""
    syllables = "|".join(pools.NONCE_SYLLABLES["train"])
    return all(re.fullmatch(f"(?:{syllables})+", w) for w in re.split(r"[-_]|(?<=[a-z])(?=[A-Z])", name.lower()) if w)


def test_made_up_names_only_in_train_variants(base):
    """Train variants give some tools and skills made-up names (matchable only by description);
    held-out variants never do, and no held-out pool name has that shape."""
    names = lambda split: [  # noqa: E731
        n
        for v in generate_variants(base, 60, seed=5, split=split)
        for n in [*v.record.get("tools", {}).values(), *v.record.get("skills", {}).values()]
    ]
    train, heldout = names("train"), names("heldout")
    made_up = [n for n in train if _made_up(n)]
    assert len(made_up) > len(train) / 4 and len(set(made_up)) > len(made_up) / 2  # many, and rarely repeated
    assert heldout and not any(_made_up(n) for n in heldout)
    for table in (pools.SKILL_CONCEPTS, pools.SKILL_FOREIGN, pools.TOOL_CONCEPTS, pools.TOOL_FOREIGN):
        assert not any(_made_up(n) for pool in table.values() for n in pool["heldout"])


def test_unknown_envelope_transform(tmp_path):
    bad = tmp_path / "env.yaml"
    bad.write_text("transforms: {tool_rename: 0.5, teleport: 1.0}\n")
    with pytest.raises(Exception, match="teleport"):
        load_envelope(bad)


def test_cli_augment(tmp_path):
    result = CliRunner().invoke(
        app, ["augment", "--n", "5", "--seed", "4", "--out", str(tmp_path / "out"), "--split", "heldout"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["n"] == 5 and len({r["hash"] for r in summary["variants"]}) == 5
    assert (tmp_path / "out" / "variant-0004" / "augmentation.json").is_file()


def test_wide_pools_widen_train_descriptions_and_leave_held_out_variants_identical(base):
    """`pools: wide` (envelope `wide`) draws train skill descriptions from dozens of composed
    paraphrases (so a student must read them, not recall two strings); held-out variants are
    byte-identical to the default envelope's, and the default's train pool is the old one."""
    production = {s.function_id: s.description for s in base.skills}
    wide, default = load_envelope("wide"), load_envelope("default")
    assert wide.pools == "wide" and wide.transforms == default.transforms and "pools" not in default.to_dict()

    def shown(split, envelope):
        seen: dict[str, set[str]] = {}
        for v in generate_variants(base, 80, 11, envelope, split):
            for s in v.harness.skills:
                if s.function_id in pools.SKILL_DESCRIPTIONS:
                    seen.setdefault(s.function_id, set()).add(s.description)
        return seen

    for fid, pool in pools.SKILL_DESCRIPTIONS_WIDE.items():
        assert len(pool["train"]) >= 30 and not set(pool["train"]) & set(pool["heldout"]), fid
        assert pool["heldout"] == pools.SKILL_DESCRIPTIONS[fid]["heldout"]
    assert not {d[0] for d in pools.DECOY_SKILLS_WIDE["train"]} & {d[0] for d in pools.DECOY_SKILLS["heldout"]}
    assert all(len(d) >= 8 for d in shown("train", wide).values())
    for fid, descriptions in shown("train", default).items():
        assert descriptions <= {*pools.SKILL_DESCRIPTIONS[fid]["train"], production[fid]}, fid
    held = [v.harness.content_hash() for v in generate_variants(base, 40, 3, wide, "heldout")]
    assert held == [v.harness.content_hash() for v in generate_variants(base, 40, 3, default, "heldout")]


def test_envelope_rejects_unknown_pools(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: huge\ntransforms: {skill_rename: 0.5}\n", encoding="utf-8")
    with pytest.raises(HatError, match="unknown pools"):
        load_envelope(bad)
