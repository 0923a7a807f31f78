"""``hat datagen-general``: replay rows in the datagen format, seeded selection, drops, resume, CLI.

Generation runs on a tiny random Llama whose tokenizer has a SmolLM2-like template (it adds a
default system prompt when the conversation has none), through the real ``generate_batch`` path.
Drop and resume logic use a small fake model whose finish reasons and failures are scripted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hat.errors import HatError, ModelError
from hat.models.base import Generation, GenerationConfig, Message
from hat.train import load_rows
from hat.train.replay import PART_FILE, ReplayConfig, generate_replay, load_prompts, select_prompts
from hat.train.replay_config import DEFAULT_PROMPTS, resolve_prompts_path
from test_datagen import build_tokenizer

torch = pytest.importorskip("torch")

SMOL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
PROMPTS = [
    {"id": f"p{i}", "source": "seed" if i % 3 else "t0", "prompt": f"Write {i} words about cats." * (1 + i % 4)}
    for i in range(12)
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-replay")
    tokenizer = build_tokenizer([p["prompt"] for p in PROMPTS], vocab_size=300)
    tokenizer.chat_template = SMOL_TEMPLATE
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture
def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS), encoding="utf-8")
    return path


class FakeModel:
    """Answers ``answer:<id>``; prompts containing 3 words are cut by the length limit, 7 give a
    blank answer. ``fail_at``: the batch (1-based) that raises, as a crash would."""

    name = "fake"

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.batches: list[list[str]] = []

    def generate(self, messages: Sequence[Message], config: GenerationConfig | None = None, **kw: Any) -> Generation:
        return self.generate_batch([messages], config)[0]

    def generate_batch(
        self, chats: Sequence[Sequence[Message]], config: GenerationConfig | None = None
    ) -> list[Generation]:
        self.batches.append([c[-1]["content"] for c in chats])
        if self.fail_at == len(self.batches):
            raise ModelError("fake: the machine fell over")
        return [self._one(c[-1]["content"]) for c in chats]

    @staticmethod
    def _one(prompt: str) -> Generation:
        if "Write 7 " in prompt:
            return Generation(text="  \n", completion_tokens=1)
        reason = "length" if "Write 3 " in prompt else "stop"
        return Generation(text=f"answer:{prompt[:12]}", completion_tokens=4, finish_reason=reason)


def _config(prompts: Path, **changes: Any) -> ReplayConfig:
    return ReplayConfig(prompts=str(prompts), **{"n": 6, "seed": 1, "model": "fake", "batch_size": 2, **changes})


# -- rows -----------------------------------------------------------------------------------------
def test_rows_load_with_load_rows_and_train_on_the_answer_only(
    tiny_dir: Path, prompts_file: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    from hat.train.sft import encode_row

    config = _config(prompts_file, n=3, model=f"hf:{tiny_dir}", max_new_tokens=6, keep_truncated=True)
    stats = generate_replay(config, tmp_path / "out")
    rows = load_rows(tmp_path / "out")
    assert stats["rows"] == len(rows) == 3 and stats["truncated"] <= 3
    assert not (tmp_path / "out" / PART_FILE).exists()
    assert ReplayConfig.load(tmp_path / "out" / "config.yaml") == config
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    chosen = {p["id"]: p for p in select_prompts(PROMPTS, config)}
    for row in rows:
        prompt, answer = row["messages"][0]["content"], row["messages"][1]["content"]
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"]  # no system message of ours
        assert prompt == chosen[row["episode_id"]]["prompt"] and answer
        assert row["segments"] == [{"message": 1, "kind": "reply", "start": 0, "end": len(answer)}]
        assert (row["harness_kind"], row["intent"], row["status"], row["teacher"]) == (
            "general", "general", "ok", config.model,
        )  # fmt: skip
        assert (row["tools"], row["harness_hash"], row["augmentation"], row["world_seed"]) == ("[]", "", "{}", -1)
        encoded = encode_row(row, tokenizer)
        ids, mask = encoded["input_ids"], encoded["assistant_masks"]
        first = mask.index(1)
        # The trained prompt is the generation prompt, with the template's default system prompt.
        generation_prompt = tokenizer.apply_chat_template(
            [row["messages"][0]], tokenize=False, add_generation_prompt=True
        )
        assert tokenizer.decode(ids[:first]) == generation_prompt
        assert "You are a helpful assistant." in generation_prompt
        # A kept answer cut by max_new_tokens is trained without the end-of-turn: not taught to stop there.
        end = "" if row.get("truncated") else "<|im_end|>"
        assert tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m]) == answer + end
    assert sum(bool(r.get("truncated")) for r in rows) == stats["truncated"] > 0


def test_truncated_and_empty_answers_are_dropped_unless_kept(prompts_file: Path, tmp_path: Path) -> None:
    config = _config(prompts_file, n=12)
    stats = generate_replay(config, tmp_path / "drop", model=FakeModel())
    assert stats["dropped"] == {"truncated": 1, "empty": 1} and stats["rows"] == 10
    assert {r["episode_id"] for r in load_rows(tmp_path / "drop")}.isdisjoint({"p3", "p7"})
    kept = generate_replay(
        ReplayConfig(**{**config.to_dict(), "keep_truncated": True}), tmp_path / "keep", model=FakeModel()
    )
    assert kept["rows"] == 11 and kept["truncated"] == 1 and kept["dropped"] == {"truncated": 0, "empty": 1}
    marked = {r["episode_id"]: r.get("truncated") for r in load_rows(tmp_path / "keep")}
    assert marked.pop("p3") is True and not any(marked.values())  # only the cut answer is marked


# -- selection ------------------------------------------------------------------------------------
def test_selection_is_seeded_and_honours_exclusions(prompts_file: Path) -> None:
    ids = [p["id"] for p in select_prompts(PROMPTS, _config(prompts_file, seed=3))]
    assert ids == [p["id"] for p in select_prompts(PROMPTS, _config(prompts_file, seed=3))]
    assert ids != [p["id"] for p in select_prompts(PROMPTS, _config(prompts_file, seed=4))]
    seeds = select_prompts(PROMPTS, _config(prompts_file, n=8, exclude_sources=["t0"]))
    assert {p["source"] for p in seeds} == {"seed"}
    with pytest.raises(HatError, match="only 8 prompts"):
        select_prompts(PROMPTS, _config(prompts_file, n=9, exclude_sources=["t0"]))


def test_same_seed_gives_the_same_bytes_and_batches_are_length_sorted(prompts_file: Path, tmp_path: Path) -> None:
    model = FakeModel()
    generate_replay(_config(prompts_file), tmp_path / "a", model=model)
    generate_replay(_config(prompts_file), tmp_path / "b", model=FakeModel())
    assert (tmp_path / "a" / "data.jsonl").read_bytes() == (tmp_path / "b" / "data.jsonl").read_bytes()
    lengths = [len(p) for batch in model.batches for p in batch]
    assert lengths == sorted(lengths) and [len(b) for b in model.batches] == [2, 2, 2]
    drawn = [p["id"] for p in select_prompts(PROMPTS, _config(prompts_file))]
    assert [r["episode_id"] for r in load_rows(tmp_path / "a")] == [i for i in drawn if i not in {"p3", "p7"}]


# -- resume ---------------------------------------------------------------------------------------
def test_a_crashed_run_resumes_and_skips_finished_ids(prompts_file: Path, tmp_path: Path) -> None:
    out, config = tmp_path / "run", _config(prompts_file)
    with pytest.raises(ModelError, match="fell over"):
        generate_replay(config, out, model=FakeModel(fail_at=2))
    finished = [json.loads(line)["id"] for line in (out / PART_FILE).read_text().splitlines()]
    assert len(finished) == 2 and not (out / "data.jsonl").exists()
    with pytest.raises(HatError, match=r"different config.*seed"):
        generate_replay(ReplayConfig(**{**config.to_dict(), "seed": 2}), out, model=FakeModel())
    again, calls = FakeModel(), []
    stats = generate_replay(
        ReplayConfig(**{**config.to_dict(), "batch_size": 4}),
        out,
        model=again,
        progress=lambda d, t: calls.append(("progress", d, t)),
        on_resume=lambda d, t: calls.append(("resume", d, t)),
    )
    asked = [p for batch in again.batches for p in batch]
    assert stats["resumed"] == 2 and stats["generated"] == 4 == len(asked)
    assert calls == [("resume", 2, 6), ("progress", 6, 6)]  # the ETA's rate starts after the resumed rows
    assert not {p["prompt"] for p in PROMPTS if p["id"] in finished} & set(asked)
    generate_replay(config, tmp_path / "whole", model=FakeModel())
    assert (out / "data.jsonl").read_bytes() == (tmp_path / "whole" / "data.jsonl").read_bytes()
    assert not (out / PART_FILE).exists()
    with pytest.raises(HatError, match="already holds a finished dataset"):
        generate_replay(config, out, model=FakeModel())


def test_a_torn_last_line_of_the_part_file_is_ignored(prompts_file: Path, tmp_path: Path) -> None:
    out, config = tmp_path / "run", _config(prompts_file)
    with pytest.raises(ModelError):
        generate_replay(config, out, model=FakeModel(fail_at=2))
    with open(out / PART_FILE, "a", encoding="utf-8") as fh:
        fh.write('{"id": "p1", "trunc')
    assert generate_replay(config, out, model=FakeModel())["resumed"] == 2


# -- errors and files -----------------------------------------------------------------------------
def test_missing_prompts_file_is_a_clear_error_before_any_model_loads(tmp_path: Path) -> None:
    config = ReplayConfig(prompts=str(tmp_path / "nope.jsonl"), model="hf:/no/such/model")
    with pytest.raises(HatError, match=r"no general prompts file at .*nope\.jsonl.*--prompts"):
        generate_replay(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_config_validates_and_round_trips(tmp_path: Path) -> None:
    with pytest.raises(HatError, match=r"n must be >= 1.*batch_size must be >= 1"):
        ReplayConfig(n=0, batch_size=0)
    with pytest.raises(HatError, match="unknown replay config key"):
        ReplayConfig.from_dict({"temperature": 1.0})
    config = ReplayConfig(n=5, exclude_sources=["t0"], keep_truncated=True)
    assert ReplayConfig.load(config.save(tmp_path / "c.yaml")) == config
    assert config.with_overrides(n=None, seed=3).seed == 3


def test_default_prompts_resolve_from_any_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    try:
        path = resolve_prompts_path(DEFAULT_PROMPTS).resolve()
    except HatError:
        pytest.skip("../shared/data/general/prompts.jsonl is not present")
    monkeypatch.chdir(tmp_path)
    assert resolve_prompts_path(DEFAULT_PROMPTS).resolve() == path
    prompts = load_prompts(DEFAULT_PROMPTS)
    assert len(prompts) == 4112 and len({p["id"] for p in prompts}) == 4112


# -- CLI ------------------------------------------------------------------------------------------
def test_cli_writes_a_dataset_and_reports_errors(tiny_dir: Path, prompts_file: Path, tmp_path: Path) -> None:
    from hat.cli.main import app as hat_app
    from hat.cli.train_cmd import datagen_general_command

    app = typer.Typer()
    app.command()(datagen_general_command)
    args = ["--n", "2", "--out", str(tmp_path / "g"), "--model", f"hf:{tiny_dir}", "--prompts", str(prompts_file)]
    result = CliRunner().invoke(
        app, [*args, "--max-new-tokens", "3", "--keep-truncated", "--batch-size", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    assert stats["rows"] == len(load_rows(tmp_path / "g")) == 2 and stats["model"] == f"hf:{tiny_dir}"
    assert ReplayConfig.load(tmp_path / "g" / "config.yaml").max_new_tokens == 3
    bad = CliRunner().invoke(app, ["--out", str(tmp_path / "e"), "--prompts", str(tmp_path / "missing.jsonl")])
    assert bad.exit_code == 2 and "no general prompts file" in bad.output
    assert CliRunner().invoke(hat_app, ["datagen-general", "--help"]).exit_code == 0
