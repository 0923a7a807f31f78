"""``hat train sft``: assistant-only masks, learning (LoRA and full), resume, adapters HAT can load.

A tiny random Llama (hidden 32, 2 layers) and a byte-level BPE tokenizer trained here (as in
``test_models.py``) make every training run take a second or two on CPU. Training tests use short
synthetic conversations; masking tests use real datagen rows. Only ``slow`` tests load SmolLM2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hat.errors import HatError
from hat.provenance import code_version
from hat.train import DatagenConfig, generate_dataset, load_rows
from hat.train.sft import build_trainer, encode_row, match_example_counts, select_rows, train_sft
from hat.train.sft_config import HatSFTConfig
from test_datagen import build_tokenizer

torch = pytest.importorskip("torch")


CALL = '<tool_call>{"name": "get_price", "arguments": {}}</tool_call>'


def _row(i: int, kind: str = "production") -> dict[str, Any]:
    price = f"{10 + i}.9"
    return {
        "harness_kind": kind,
        "messages": [
            {"role": "system", "content": "You are Ava, a live host. Tools: get_price."},
            {"role": "user", "content": f"Viewer comment: how much is item {i}?"},
            {"role": "assistant", "content": "<think>A price question.</think>\n" + CALL},
            {"role": "tool", "content": f'<tool_response>{{"price": {price}}}</tool_response>'},
            {"role": "assistant", "content": f'<reply>{{"reply": "It is {price} today!"}}</reply>'},
        ],
    }


SHORT = [_row(i) for i in range(4)]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def real_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sft-data") / "data"
    generate_dataset(DatagenConfig(n_episodes=6, seed=7, hsa_ratio=0.5), folder)
    return folder


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, real_dir: Path) -> Path:
    from conftest import save_tiny_llama

    texts = [m["content"] for r in [*SHORT, *load_rows(real_dir)] for m in r["messages"]]
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), build_tokenizer(texts, vocab_size=2000))


def _config(out: Path, model: Path | str, **changes: Any) -> HatSFTConfig:
    fields: dict[str, Any] = {
        "output_dir": str(out),
        "model": str(model),
        "max_steps": 8,
        "per_device_train_batch_size": 4,
        "learning_rate": 3e-2,
        "lora_dropout": 0.0,
        "logging_steps": 1,
        "save_steps": 1000,
        "max_length": None,
        "disable_tqdm": True,
        "dataloader_pin_memory": False,
        "seed": 0,
    }
    return HatSFTConfig(**{**fields, **changes})


def _weights(folder: Path) -> dict[str, Any]:
    from hat.models import load_model

    model = load_model(f"hf:{folder}")
    return {k: v.detach().clone() for k, v in model.model.state_dict().items()}  # type: ignore[attr-defined]


class _Losses:
    """A trainer callback keeping every logged loss and counting the steps it saw run."""

    def __new__(cls) -> Any:
        from transformers import TrainerCallback

        class Callback(TrainerCallback):  # type: ignore[misc]
            def __init__(self) -> None:
                self.losses: list[float] = []
                self.steps = 0

            def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
                if logs and "loss" in logs:
                    self.losses.append(float(logs["loss"]))

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.steps += 1

        return Callback()


# -- config and data selection --------------------------------------------------------------------
def test_config_defaults_and_yaml_roundtrip(tmp_path: Path) -> None:
    config = HatSFTConfig(output_dir=str(tmp_path / "o"), model="hf:/some/base", max_steps=3, lora_r=8)
    assert config.model == "/some/base" and config.bf16 is False  # no CUDA here: bf16 resolved off
    assert config.activation_checkpointing is False and config.assistant_only_loss is False
    loaded = HatSFTConfig.from_yaml(config.save_yaml(tmp_path / "c.yaml"), max_steps=5)
    assert loaded.to_yaml_dict() == {**config.to_yaml_dict(), "max_steps": 5}
    with pytest.raises(HatError, match="unknown SFT config key"):
        HatSFTConfig.from_dict({"lora_rank": 8})


def test_select_rows_fixed_harness_and_exact_counts() -> None:
    rows = [_row(i, "production" if i % 3 == 0 else "hsa") for i in range(12)]
    fixed = select_rows(rows, fixed_harness=True)
    assert len(fixed) == 4 and {r["harness_kind"] for r in fixed} == {"production"}
    picked = select_rows(rows, max_examples=5, seed=1)
    assert len(picked) == 5 and picked == select_rows(rows, max_examples=5, seed=1)
    assert picked != select_rows(rows, max_examples=5, seed=2)
    with pytest.raises(HatError, match="only 4 rows"):
        select_rows(rows, fixed_harness=True, max_examples=5)
    with pytest.raises(HatError, match="hsa-ratio 0"):
        select_rows(rows[1:3], fixed_harness=True)
    a, b = match_example_counts(rows, fixed, seed=0)
    assert len(a) == len(b) == 4


# -- assistant-only masks -------------------------------------------------------------------------
def _assistant_text(row: dict[str, Any]) -> str:
    return "".join(m["content"] + "<|im_end|>" for m in row["messages"] if m["role"] == "assistant")


def test_encode_row_masks_everything_but_assistant_turns(real_dir: Path, tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    for row in load_rows(real_dir):
        encoded = encode_row(row, tokenizer)
        kept = [t for t, m in zip(encoded["input_ids"], encoded["assistant_masks"], strict=True) if m]
        assert tokenizer.decode(kept) == _assistant_text(row)


def _prompt_is_a_token_prefix(row: dict[str, Any], tokenizer: Any) -> None:
    """What the runtime encodes before each assistant turn is a token prefix of the training row."""
    ids = encode_row(row, tokenizer)["input_ids"]
    for i, message in enumerate(row["messages"]):
        if message["role"] == "assistant":
            prompt = tokenizer.apply_chat_template(row["messages"][:i], tokenize=False, add_generation_prompt=True)
            prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            assert ids[: len(prompt_ids)] == prompt_ids


def test_training_tokens_extend_the_inference_prompts(real_dir: Path, tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    for row in load_rows(real_dir):
        _prompt_is_a_token_prefix(row, tokenizer)


def test_collated_labels_mask_system_user_and_tool_tokens(real_dir: Path, tiny_dir: Path, tmp_path: Path) -> None:
    rows = load_rows(real_dir)[:3]
    setup = build_trainer(_config(tmp_path / "o", tiny_dir, packing=False), rows)  # TRL's collator
    trainer = setup.trainer
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(rows))])
    tokenizer = trainer.processing_class
    for row, ids, labels in zip(rows, batch["input_ids"], batch["labels"], strict=True):
        trained = tokenizer.decode([int(t) for t, label in zip(ids, labels, strict=True) if label != -100])
        assert trained == _assistant_text(row)
        assert all(labels[i] == ids[i] for i in range(len(ids)) if labels[i] != -100)
        for m in row["messages"]:
            if m["role"] != "assistant":
                assert m["content"][:40] not in trained
    assert "<tool_response>" in tokenizer.decode(batch["input_ids"][0])


# -- learning -------------------------------------------------------------------------------------
def test_lora_sft_lowers_the_loss_and_saves_a_loadable_adapter(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "lora"
    callback = _Losses()
    result = train_sft(_config(out, tiny_dir), SHORT, callbacks=[callback])
    assert result.adapter and result.global_step == 8 and result.n_examples == 4
    assert result.n_harness_states == 0  # these rows carry no harness hash
    assert json.loads((out / "sft_result.json").read_text())["code"] == code_version() == result.code
    assert callback.losses[-1] < 0.8 * callback.losses[0]
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(tiny_dir.resolve())
    before, after = _weights(tiny_dir), _weights(out)  # hf:<out> loads base + merged adapter
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and all("proj" in k for k in changed)  # only LoRA-targeted linear layers moved
    saved = HatSFTConfig.from_yaml(out / "sft_config.yaml")
    assert saved.max_steps == 8 and saved.use_lora
    logged = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [h["loss"] for h in logged if "loss" in h] == pytest.approx(callback.losses)


def test_gradient_accumulation_averages_the_packs_of_a_step(tiny_dir: Path, tmp_path: Path) -> None:
    """At learning rate 0 the weights never move, so a step over 2 accumulated packs must log the
    mean of the two losses that 2 one-pack steps log (not their sum), and count both packs' rows."""
    rows = [_row(i) for i in range(8)]  # distinct prompts: one row per pack
    common = {"learning_rate": 0.0, "per_device_train_batch_size": 1, "pack_max_rows": 1}
    one, two = _Losses(), _Losses()
    train_sft(_config(tmp_path / "ga1", tiny_dir, max_steps=4, **common), rows, callbacks=[one])
    train_sft(
        _config(tmp_path / "ga2", tiny_dir, max_steps=2, gradient_accumulation_steps=2, **common), rows, callbacks=[two]
    )
    assert two.losses == pytest.approx(
        [(one.losses[0] + one.losses[1]) / 2, (one.losses[2] + one.losses[3]) / 2], rel=1e-4
    )
    steps = [json.loads(line) for line in (tmp_path / "ga2" / "steps.jsonl").read_text().splitlines()]
    assert [s["rows"] for s in steps] == [2, 2]


def test_full_sft_changes_every_trained_parameter(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "full"
    callback = _Losses()
    result = train_sft(_config(out, tiny_dir, use_lora=False, learning_rate=1e-2), SHORT, callbacks=[callback])
    assert not result.adapter and not (out / "adapter_config.json").exists()
    assert callback.losses[-1] < 0.8 * callback.losses[0]
    before, after = _weights(tiny_dir), _weights(out)
    assert all(not torch.equal(before[k], after[k]) for k in before if "embed" not in k and "rotary" not in k)


def test_resume_continues_from_the_last_checkpoint(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "resume"
    with pytest.raises(HatError, match="no checkpoint"):
        train_sft(_config(out, tiny_dir, resume_from_checkpoint="latest"), SHORT)
    first = train_sft(_config(out, tiny_dir, max_steps=2, save_steps=2, per_device_train_batch_size=2), SHORT)
    assert first.global_step == 2 and (out / "checkpoint-2").is_dir()
    checkpoint = json.loads((out / "checkpoint-2" / "adapter_config.json").read_text())
    assert checkpoint["base_model_name_or_path"] == str(tiny_dir.resolve())
    callback = _Losses()
    config = _config(out, tiny_dir, max_steps=4, save_steps=2, per_device_train_batch_size=2)
    config.resume_from_checkpoint = "latest"
    second = train_sft(config, SHORT, callbacks=[callback])
    assert second.global_step == 4 and callback.steps == 2  # steps 3 and 4 only
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "loss" in h] == [1, 2, 3, 4]
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]  # both legs, each step once
    assert second.steps_wall_s == round(sum(s["wall_s"] for s in steps), 2) > 0


def test_resume_refuses_other_training_rows(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "resume-rows"
    first = train_sft(_config(out, tiny_dir, max_steps=1, save_steps=1), SHORT)
    assert (out / "examples.sha256").read_text().strip() == first.examples_hash
    config = _config(out, tiny_dir, max_steps=2, save_steps=1)
    config.resume_from_checkpoint = "latest"
    with pytest.raises(HatError, match="rows differ"):
        train_sft(config, [_row(i) for i in range(1, 5)])  # one row changed: not the run's data
    assert not (out / "checkpoint-2").exists()
    assert train_sft(config, SHORT).global_step == 2  # the same rows resume


def test_sft_cli_trains_from_a_datagen_folder(real_dir: Path, tiny_dir: Path, tmp_path: Path) -> None:
    from hat.cli.train_cmd import train_app

    app = typer.Typer()
    app.add_typer(train_app, name="train")  # as main.py registers it
    args = ["train", "sft", "--data", str(real_dir), "--out", str(tmp_path / "o"), "--model", f"hf:{tiny_dir}"]
    args += ["--max-steps", "1", "--batch-size", "2", "--max-examples", "2", "--fixed-harness", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["global_step"] == 1 and summary["n_examples"] == 2 and summary["adapter"]
    assert summary["n_harness_states"] == 1  # production rows only: one harness
    missing = CliRunner().invoke(app, ["train", "sft", "--out", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "--data" in missing.output


# -- the bundled model ----------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_template_segments_and_masks_line_up(real_dir: Path) -> None:
    from transformers import AutoTokenizer

    from hat.models.transformers_backend import smollm2_gguf_path
    from hat.train import segment_token_spans, tokenize_chat

    path = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    for row in load_rows(real_dir):
        chat = tokenize_chat(row["messages"], tokenizer)
        assert chat.input_ids == tokenizer(chat.text, add_special_tokens=False)["input_ids"]
        for seg, tok in zip(row["segments"], segment_token_spans(row, tokenizer), strict=True):
            text = row["messages"][seg["message"]]["content"][seg["start"] : seg["end"]]
            assert tokenizer.decode(chat.input_ids[tok["start"] : tok["end"]]) == text
        encoded = encode_row(row, tokenizer)
        kept = [t for t, m in zip(encoded["input_ids"], encoded["assistant_masks"], strict=True) if m]
        assert tokenizer.decode(kept) == _assistant_text(row)
        _prompt_is_a_token_prefix(row, tokenizer)


@pytest.mark.slow
def test_smollm2_lora_step_saves_an_adapter_hat_loads(real_dir: Path, tmp_path: Path) -> None:
    from hat.models import GenerationConfig, load_model

    out = tmp_path / "smol"
    config = _config(out, "smollm2", max_steps=1, per_device_train_batch_size=1, learning_rate=1e-4, max_length=1024)
    result = train_sft(config, load_rows(real_dir)[:1])
    assert result.global_step == 1 and result.base == "smollm2"
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "smollm2"
    model = load_model(f"hf:{out}")
    assert model.generate([{"role": "user", "content": "hi"}], GenerationConfig(max_new_tokens=2)).completion_tokens
