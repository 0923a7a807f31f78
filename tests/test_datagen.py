"""``hat datagen``: determinism, seeds, harness choice, rejection sampling, recorded conversations,
segments and their token spans.

Datasets are small (a dozen episodes with the oracle run in well under a second) and shared per
module. Token-span checks use a byte-level BPE tokenizer trained here (the same pre-tokenizer family
as SmolLM2's) with a ChatML template; ``build_tokenizer`` is reused by ``test_sft.py``.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hat.errors import HatError
from hat.harness.loader import load_harness
from hat.harness.tools import ToolRegistry
from hat.train import DatagenConfig, generate_dataset, load_dataset, load_rows, segment_token_spans
from hat.train.datagen import (
    _Teacher,
    char_spans_to_token_spans,
    datagen_episodes,
    message_segments,
    run_teacher,
    tokenize_chat,
)

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(texts: Sequence[str], vocab_size: int = 600) -> Any:
    """A fast byte-level BPE tokenizer (every byte encodable) with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    raw.train_from_iterator([*texts, string.printable], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|im_end|>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = CHATML
    return tokenizer


def _generate(tmp: Path, **fields: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    stats = generate_dataset(DatagenConfig(**fields), tmp)
    return stats, load_rows(tmp)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("mixed") / "data"
    stats, rows = _generate(folder, n_episodes=16, seed=1, hsa_ratio=0.5, episodes_per_world=8, comments_per_snapshot=2)
    return folder, stats, rows


@pytest.fixture(scope="module")
def tokenizer(mixed: tuple[Path, dict[str, Any], list[dict[str, Any]]]) -> Any:
    return build_tokenizer([m["content"] for r in mixed[2] for m in r["messages"]])


# -- config and seeds -----------------------------------------------------------------------------
def test_config_yaml_roundtrip_and_validation(tmp_path: Path) -> None:
    config = DatagenConfig(n_episodes=7, seed=3, hsa_ratio=0.25, thresholds={"accuracy": 1.0}, formats=["jsonl"])
    assert DatagenConfig.load(config.save(tmp_path / "c.yaml")) == config
    with pytest.raises(HatError, match=r"unknown judge dimension.*known: accuracy"):
        DatagenConfig(thresholds={"acuracy": 0.9})
    with pytest.raises(HatError, match="temperature > 0"):
        DatagenConfig(teacher="openai:http://x/v1#m", k=4)
    with pytest.raises(HatError, match="unknown datagen config key"):
        DatagenConfig.from_dict({"n": 3})
    assert DatagenConfig(teacher="oracle", k=4).k == 4  # a policy varies its wording by seed
    mixed = DatagenConfig(n_episodes=40, episodes_per_world=40, intent_mix={"faq": 1, "discount": 1})
    assert DatagenConfig.load(mixed.save(tmp_path / "m.yaml")) == mixed
    assert {e.gold.intent for e in datagen_episodes(mixed)} == {"faq", "discount"}
    with pytest.raises(HatError, match="intent_mix"):
        DatagenConfig(intent_mix={"faq": 0.0})


def test_episode_seeds_never_meet_evaluation_seeds() -> None:
    config = DatagenConfig(n_episodes=12, seed=2, episodes_per_world=5)
    assert config.world_chunks() == [(12_000, 5), (12_001, 5), (12_002, 2)]
    episodes = datagen_episodes(config)
    assert len(episodes) == 12 and len({e.episode_id for e in episodes}) == 12
    assert {e.world_seed for e in episodes} == {12_000, 12_001, 12_002}


# -- determinism and files ------------------------------------------------------------------------
def test_datagen_is_deterministic_per_seed(mixed: tuple[Path, dict[str, Any], list], tmp_path: Path) -> None:
    folder, stats, rows = mixed
    again, _ = _generate(
        tmp_path / "again", n_episodes=16, seed=1, hsa_ratio=0.5, episodes_per_world=8, comments_per_snapshot=2
    )
    assert again["dataset_hash"] == stats["dataset_hash"]
    assert (tmp_path / "again" / "data.jsonl").read_bytes() == (folder / "data.jsonl").read_bytes()
    other, _ = _generate(
        tmp_path / "other", n_episodes=16, seed=2, hsa_ratio=0.5, episodes_per_world=8, comments_per_snapshot=2
    )
    assert other["dataset_hash"] != stats["dataset_hash"]
    assert DatagenConfig.load(folder / "config.yaml").seed == 1
    assert json.loads((folder / "stats.json").read_text())["rows"] == len(rows) == stats["accepted"]


def test_stats_break_acceptance_down(mixed: tuple[Path, dict[str, Any], list]) -> None:
    stats = mixed[1]
    assert stats["samples"] == 16 and stats["accept_rate"] == 1.0
    assert set(stats["dims"]) >= {"accuracy", "effectiveness", "tool_rationality", "skill_selection"}
    assert sum(v["samples"] for v in stats["by_intent"].values()) == 16
    assert set(stats["by_harness"]) == {"production", "hsa"}


def test_parquet_and_arrow_formats_load_back(tmp_path: Path) -> None:
    stats, rows = _generate(tmp_path / "d", n_episodes=4, formats=["jsonl", "parquet", "arrow"])
    dataset = load_dataset(tmp_path / "d")
    assert (tmp_path / "d" / "data.parquet").is_file() and len(dataset) == len(rows) == stats["rows"]
    assert dataset[0]["messages"] == rows[0]["messages"] and dataset[0]["segments"] == rows[0]["segments"]


def test_out_dir_must_be_new_or_empty(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(HatError, match="not empty"):
        generate_dataset(DatagenConfig(n_episodes=1), tmp_path / "taken")


# -- harness states -------------------------------------------------------------------------------
def test_hsa_rows_carry_variants_and_their_own_hashes(mixed: tuple[Path, dict[str, Any], list]) -> None:
    _, stats, rows = mixed
    production = [r for r in rows if r["harness_kind"] == "production"]
    hsa = [r for r in rows if r["harness_kind"] == "hsa"]
    assert production and hsa
    assert {r["harness_hash"] for r in production} == {stats["production_hash"]}
    assert all(r["harness_variant"] == [] and r["augmentation"] == "{}" for r in production)
    assert all(r["harness_variant"] and json.loads(r["augmentation"]) for r in hsa)
    assert stats["production_hash"] not in {r["harness_hash"] for r in hsa}
    # one variant per room snapshot (comments of a snapshot share it), a new one for every snapshot
    snapshots = {r["snapshot"] for r in hsa}
    assert len({r["harness_hash"] for r in hsa}) == len(snapshots) > 1
    assert all(r["snapshot"].endswith(r["harness_hash"][:16]) for r in rows)
    renamed = [r for r in hsa if "tool_rename" in r["harness_variant"]]
    production_tools = {t["name"] for t in json.loads(production[0]["tools"])}
    assert renamed and all({t["name"] for t in json.loads(r["tools"])} != production_tools for r in renamed)


@pytest.mark.parametrize(("ratio", "kinds"), [(0.0, {"production"}), (1.0, {"hsa"})])
def test_hsa_ratio_extremes(tmp_path: Path, ratio: float, kinds: set[str]) -> None:
    _, rows = _generate(tmp_path / "d", n_episodes=6, hsa_ratio=ratio)
    assert {r["harness_kind"] for r in rows} == kinds


# -- rejection sampling ---------------------------------------------------------------------------
def test_rejection_drops_trajectories_below_a_threshold(tmp_path: Path) -> None:
    """``memorise`` uses production names whatever the harness: right on production, wrong under HSA."""
    stats, rows = _generate(tmp_path / "d", n_episodes=12, hsa_ratio=0.5, teacher="memorise", comments_per_snapshot=1)
    assert 0 < stats["accepted"] < stats["samples"] == 12
    assert stats["rejected_by"].get("tool_rationality", 0) > 0
    assert stats["by_harness"]["hsa"]["rate"] < stats["by_harness"]["production"]["rate"]
    config = DatagenConfig()
    assert all(r["scores"][d] >= t for r in rows for d, t in config.thresholds.items())
    unfiltered, _ = _generate(tmp_path / "u", n_episodes=12, teacher="memorise", thresholds={}, require_ok=False)
    assert unfiltered["accepted"] == 12


def test_k_samples_keep_distinct_rows_up_to_max_per_episode(tmp_path: Path) -> None:
    stats, rows = _generate(tmp_path / "d", n_episodes=5, k=3, max_per_episode=2, hsa_ratio=0.0)
    assert stats["samples"] == 15
    per_episode: dict[str, list[str]] = {}
    for r in rows:
        per_episode.setdefault(r["episode_id"], []).append(json.dumps(r["messages"]))
    assert all(len(v) <= 2 and len(set(v)) == len(v) for v in per_episode.values())
    limited, rows = _generate(tmp_path / "m", n_episodes=10, max_examples=3)
    assert limited["rows"] == len(rows) == 3


def test_a_model_teacher_is_shared_sampled_k_times_and_deduplicated(tmp_path: Path) -> None:
    output = '<think>Greeting.</think>\n<reply>{"reply": "Welcome to the stream!"}</reply>'
    script = tmp_path / "teacher.jsonl"
    script.write_text("\n".join(json.dumps(output) for _ in range(6)) + "\n")
    spec = f"scripted:{script}"
    stats, rows = _generate(tmp_path / "d", n_episodes=3, teacher=spec, k=2, temperature=0.7, thresholds={})
    assert stats["samples"] == 6 and len(rows) == 3  # identical samples of an episode are kept once
    assert all(r["teacher"] == spec and r["messages"][-1]["content"] == output for r in rows)


# -- conversations --------------------------------------------------------------------------------
def _run(episode_index: int, intent: str | None = None) -> tuple[Any, Any, list[dict[str, str]]]:
    config = DatagenConfig(n_episodes=40, seed=5)
    episodes = datagen_episodes(config)
    episode = next(e for e in episodes if intent is None or e.gold.intent == intent)
    harness = load_harness("livestream")
    registry = ToolRegistry(harness)
    try:
        trace, messages = run_teacher(_Teacher(config), episode, harness, 0, registry)
    finally:
        registry.close()
    return episode, trace, messages


def test_recorded_conversation_matches_the_trace_without_history() -> None:
    episode, trace, messages = _run(0, "product_qa")
    assert not episode.history
    expected = trace.to_messages()
    expected[-1] = {**expected[-1], "content": expected[-1]["content"] + "</reply>"}
    assert messages == expected


def test_recorded_conversation_keeps_the_episode_history() -> None:
    episode, trace, messages = _run(0, "clarification")
    assert episode.history and messages[1 : 1 + len(episode.history)] == list(episode.history)
    assert len(messages) == len(trace.to_messages()) + len(episode.history)


def test_every_row_ends_with_a_closed_reply(mixed: tuple[Path, dict[str, Any], list]) -> None:
    for row in mixed[2]:
        last = row["messages"][-1]
        assert last["role"] == "assistant" and last["content"].endswith("</reply>")


# -- segments and tokens --------------------------------------------------------------------------
def test_message_segments_find_reasoning_tools_and_reply() -> None:
    content = (
        '<think>plan <tool_call>{"name": "x"}</tool_call></think>\n'
        '<tool_call>{"name": "load_skill", "arguments": {"name": "s"}}</tool_call>\n'
        '<tool_call>{"name": "get_price", "arguments": {}}</tool_call>'
    )
    segments = message_segments(content)
    assert [kind for kind, _, _ in segments] == ["reasoning", "tool", "tool"]
    assert [content[s:e].split(">")[0] for _, s, e in segments] == ["<think", "<tool_call", "<tool_call"]
    assert message_segments('<reply>{"reply": "hi"}') == [("reply", 0, len('<reply>{"reply": "hi"}'))]


def test_char_spans_to_token_spans_cover_straddling_tokens() -> None:
    offsets = [(0, 3), (3, 5), (5, 9), (9, 10)]
    assert char_spans_to_token_spans(offsets, [(3, 9), (4, 6), (0, 10), (9, 10)]) == [(1, 3), (1, 3), (0, 4), (3, 4)]


def test_segment_token_spans_decode_to_the_segment_text(
    mixed: tuple[Path, dict[str, Any], list], tokenizer: Any
) -> None:
    for row in mixed[2][:8]:
        chat = tokenize_chat(row["messages"], tokenizer)
        for seg, tok in zip(row["segments"], segment_token_spans(row, tokenizer), strict=True):
            text = row["messages"][seg["message"]]["content"][seg["start"] : seg["end"]]
            assert tokenizer.decode(chat.input_ids[tok["start"] : tok["end"]]) == text
        kinds = {s["kind"] for s in row["segments"]}
        assert "reply" in kinds and "reasoning" in kinds


def test_tokenize_chat_locates_every_message(mixed: tuple[Path, dict[str, Any], list], tokenizer: Any) -> None:
    row = mixed[2][0]
    chat = tokenize_chat(row["messages"], tokenizer)
    assert chat.text == tokenizer.apply_chat_template(row["messages"], tokenize=False)
    for (start, end), (_, turn_end), message in zip(chat.content, chat.turn, row["messages"], strict=True):
        assert chat.text[start:end] == message["content"]
        assert chat.text[end:turn_end] == ("<|im_end|>" if message["role"] == "assistant" else "")


# -- CLI ------------------------------------------------------------------------------------------
def test_datagen_cli_writes_a_dataset_and_prints_stats(tmp_path: Path) -> None:
    from hat.cli.train_cmd import datagen_command

    app = typer.Typer()
    app.command()(datagen_command)
    args = ["--n", "6", "--seed", "4", "--out", str(tmp_path / "d"), "--hsa-ratio", "1", "--json"]
    result = CliRunner().invoke(app, [*args, "--threshold", "accuracy=0.5"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    assert stats["rows"] == 6 and set(stats["by_harness"]) == {"hsa"}
    assert DatagenConfig.load(tmp_path / "d" / "config.yaml").thresholds == {"accuracy": 0.5}
    bad = CliRunner().invoke(app, ["--out", str(tmp_path / "e"), "--threshold", "nope=1"])
    assert bad.exit_code == 2 and "unknown judge dimension" in bad.output
