"""``hat train opd``: config, the on-policy reverse-KL step on TRL, a frozen teacher, resume, the CLI.

The student is a tiny random Llama (``conftest.save_tiny_llama``) plus a LoRA adapter with random
weights, saved as ``hat train sft`` saves one; its base — the default teacher — is the same Llama
without the adapter, so student and teacher differ and the reverse KL starts well above zero. A run
samples 8-token answers to eight prompts per step, well under a second per step on CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hat.errors import HatError
from hat.train.opd import build_opd_trainer, choose_prompts, resolve_teacher, train_opd
from hat.train.opd_config import HatOPDConfig
from test_datagen import build_tokenizer

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = [
    {"id": f"p{i}", "source": "test", "prompt": text}
    for i, text in enumerate(
        [
            "Name three colors of the sky.",
            "Write a short poem about rain.",
            "What is two plus two?",
            "Give me a tip for sleeping well.",
            "Summarize: the cat sat on the mat.",
            "Translate 'hello' into French.",
            "List two fruits that are red.",
            "Why do birds sing in the morning?",
        ]
    )
]


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import save_tiny_llama

    texts = [p["prompt"] for p in PROMPTS] + ["The sky is blue and the rain is soft. Bonjour!"]
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-base"), build_tokenizer(texts, vocab_size=400))


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory: pytest.TempPathFactory, base_dir: Path) -> Path:
    """A stage-1 model as ``hat train sft`` writes it: a LoRA adapter folder naming its base."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("stage1")
    torch.manual_seed(1)
    lora = LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), lora)
    with torch.no_grad():  # random A and B, B scaled so that 3 steps can close much of the gap
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(0.3)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(base_dir)}))
    return folder


def _config(out: Path, student: Path, prompts: Path, **changes: Any) -> HatOPDConfig:
    fields: dict[str, Any] = {
        "output_dir": str(out),
        "model": str(student),
        "prompts": str(prompts),
        "n_prompts": 8,
        "max_steps": 3,
        "per_device_train_batch_size": 8,
        "max_new_tokens": 8,
        "learning_rate": 1e-2,
        "lr_scheduler_type": "constant",
        "save_steps": 1000,
        "disable_tqdm": True,
        "dataloader_pin_memory": False,
        "seed": 0,
    }
    return HatOPDConfig(**{**fields, **changes})


def _params(model: Any, trainable: bool) -> dict[str, Any]:
    return {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad == trainable}


def _reverse_kl(trainer: Any, batch: dict[str, Any]) -> float:
    """The trainer's own loss (mean per-token reverse KL) on a fixed batch of sampled answers."""
    with torch.no_grad():
        return float(trainer.compute_loss(trainer.model, batch))


def _kl_by_hand(trainer: Any, batch: dict[str, Any]) -> float:
    """Mean over sampled answer tokens of KL(student || teacher), from both models' full logits."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    n = batch["completion_ids"].size(1)
    with torch.no_grad():
        student = trainer.model(input_ids=ids, attention_mask=mask).logits[:, -n - 1 : -1].log_softmax(-1)
        teacher = trainer.teacher_model(input_ids=ids, attention_mask=mask).logits[:, -n - 1 : -1].log_softmax(-1)
    kl = (student.exp() * (student - teacher)).sum(-1)
    return float(kl[batch["completion_mask"].bool()].mean())


# -- config and prompts ---------------------------------------------------------------------------
def test_config_defaults_yaml_roundtrip_and_validation(tmp_path: Path) -> None:
    config = HatOPDConfig(output_dir=str(tmp_path / "o"), model="hf:/stage1", max_steps=3, max_new_tokens=64)
    assert config.model == "/stage1" and config.teacher == "" and config.bf16 is False  # no CUDA: bf16 off
    assert config.beta == 1.0 and config.temperature == 1.0  # reverse KL on samples at temperature 1
    assert config.max_completion_length == 64 and config.disable_dropout and config.logging_steps == 1
    loaded = HatOPDConfig.from_yaml(config.save_yaml(tmp_path / "c.yaml"), max_steps=5, max_new_tokens=32)
    assert loaded.to_yaml_dict() == {**config.to_yaml_dict(), "max_steps": 5, "max_new_tokens": 32,
                                     "max_completion_length": 32}  # fmt: skip
    assert HatOPDConfig.from_dict({"max_completion_length": 100}).max_new_tokens == 100
    with pytest.raises(HatError, match="unknown OPD config key"):
        HatOPDConfig.from_dict({"lmbda": 1.0})
    with pytest.raises(HatError, match="n_prompts must be >= 1"):
        HatOPDConfig(n_prompts=0)


def test_prompts_are_a_seeded_draw(prompts_file: Path) -> None:
    from hat.train.replay import load_prompts

    prompts = load_prompts(prompts_file)
    picked = choose_prompts(prompts, 5, seed=1)
    assert len({p["id"] for p in picked}) == 5 and picked == choose_prompts(prompts, 5, seed=1)
    assert picked != choose_prompts(prompts, 5, seed=2)
    with pytest.raises(HatError, match="has 8"):
        choose_prompts(prompts, 9, seed=0)


def test_teacher_defaults_to_the_students_base(student_dir: Path, base_dir: Path, tmp_path: Path) -> None:
    assert resolve_teacher(str(student_dir)) == str(base_dir)
    assert resolve_teacher(str(student_dir), "hf:/other") == "/other"
    assert resolve_teacher("smollm2") == "smollm2"
    full = tmp_path / "full"
    full.mkdir()
    (full / "sft_config.yaml").write_text("model: smollm2\n")
    assert resolve_teacher(str(full)) == "smollm2"
    with pytest.raises(HatError, match="--teacher"):
        resolve_teacher(str(tmp_path))


# -- learning -------------------------------------------------------------------------------------
def test_opd_lowers_the_reverse_kl_and_keeps_the_teacher_frozen(
    student_dir: Path, base_dir: Path, prompts_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "opd"
    setup = build_opd_trainer(_config(out, student_dir, prompts_file))
    trainer = setup.trainer
    assert setup.teacher == str(base_dir) and setup.base_ref == str(base_dir)
    fixed = trainer._generate_and_score_completions([{"prompt": [{"role": "user", "content": p["prompt"]}]}
                                                     for p in PROMPTS[:4]])  # fmt: skip
    assert int(fixed["completion_mask"].sum()) > 0
    teacher_before, lora_before = _params(trainer.teacher_model, False), _params(trainer.model, True)
    assert lora_before and all("lora_" in k for k in lora_before)
    assert not any(p.requires_grad for p in trainer.teacher_model.parameters())
    kl_before = _reverse_kl(trainer, fixed)
    assert kl_before == pytest.approx(_kl_by_hand(trainer, fixed), rel=1e-4)  # TRL's beta=1 is the reverse KL
    trainer.train()
    kl_after = _reverse_kl(trainer, fixed)
    assert kl_before > 0.2 and kl_after < 0.8 * kl_before, (kl_before, kl_after)
    lora_after = _params(trainer.model, True)
    assert all(not torch.equal(lora_before[k], lora_after[k]) for k in lora_before if "lora_B" in k)
    teacher_after = _params(trainer.teacher_model, False)
    assert teacher_before.keys() == teacher_after.keys()
    assert all(torch.equal(teacher_before[k], teacher_after[k]) for k in teacher_before)


def test_train_opd_saves_an_adapter_log_and_resumes(student_dir: Path, base_dir: Path, prompts_file: Path,
                                                    tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "resume"
    with pytest.raises(HatError, match="no checkpoint"):
        train_opd(_config(out, student_dir, prompts_file, resume_from_checkpoint="latest"))
    first = train_opd(_config(out, student_dir, prompts_file, max_steps=2, save_steps=2))
    assert first.global_step == 2 and first.adapter and first.teacher == str(base_dir)
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base_dir)
    assert json.loads((out / "checkpoint-2" / "adapter_config.json").read_text())["base_model_name_or_path"] == str(
        base_dir
    )
    log = [json.loads(line) for line in (out / "opd_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2] and all(r["loss"] >= 0 for r in log if "loss" in r)
    assert HatOPDConfig.from_yaml(out / "opd_config.yaml").max_steps == 2
    steps: list[int] = []
    second = train_opd(
        _config(out, student_dir, prompts_file, max_steps=3, save_steps=2, resume_from_checkpoint="latest"),
        callbacks=[_StepRecorder(steps)],
    )
    assert second.global_step == 3 and steps == [3]  # step 3 only
    log = [json.loads(line) for line in (out / "opd_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3]


def test_a_full_checkpoint_student_gets_a_new_adapter_and_full_opd_merges(
    base_dir: Path, student_dir: Path, prompts_file: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    from conftest import save_tiny_llama

    other = save_tiny_llama(tmp_path / "other", AutoTokenizer.from_pretrained(base_dir), seed=1)
    with pytest.raises(HatError, match="--teacher"):  # a bare checkpoint does not name its base
        train_opd(_config(tmp_path / "x", base_dir, prompts_file, max_steps=1))
    out = tmp_path / "new-lora"
    result = train_opd(_config(out, base_dir, prompts_file, max_steps=1, teacher=str(other), lora_r=2))
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert result.adapter and result.teacher == str(other) and adapter["r"] == 2
    assert adapter["base_model_name_or_path"] == str(base_dir.resolve())
    full = tmp_path / "full"
    result = train_opd(_config(full, student_dir, prompts_file, max_steps=1, use_lora=False, learning_rate=1e-3))
    assert not result.adapter and result.teacher == str(base_dir)
    assert (full / "model.safetensors").is_file() and not (full / "adapter_config.json").exists()
    before, after = _weights(student_dir), _weights(full)  # the merged stage-1 model vs the distilled one
    assert all(not torch.equal(before[k], after[k]) for k in before if "proj" in k)  # every layer trained


def _weights(folder: Path) -> dict[str, Any]:
    from hat.models import load_model

    model = load_model(f"hf:{folder}")
    return {k: v.detach().clone() for k, v in model.model.state_dict().items()}  # type: ignore[attr-defined]


class _StepRecorder:
    def __new__(cls, steps: list[int]) -> Any:
        from transformers import TrainerCallback

        class Callback(TrainerCallback):  # type: ignore[misc]
            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                steps.append(int(state.global_step))

        return Callback()


def _opd_app() -> typer.Typer:
    from hat.cli.opd_cmd import opd_command

    app, train = typer.Typer(), typer.Typer()
    train.command("opd")(opd_command)
    train.command("noop")(lambda: None)  # two commands: typer keeps "opd" as a subcommand name
    app.add_typer(train, name="train")
    return app


def test_opd_options_state_the_config_defaults() -> None:
    import dataclasses

    from trl import DistillationConfig

    from hat.cli.opd_cmd import OPD_OPTIONS
    from hat.train.opd_defaults import OPD
    from test_train_options import STATED, _assert_states, _defaults

    ours, trl_defaults = _defaults(HatOPDConfig), _defaults(DistillationConfig)
    changed = {k for k, v in ours.items() if k not in trl_defaults or trl_defaults[k] != v}
    hat_defaults = dataclasses.asdict(OPD)
    assert changed <= set(hat_defaults) and {k: ours[k] for k in hat_defaults} == hat_defaults
    command: Any = typer.main.get_command(_opd_app()).commands["train"].commands["opd"]  # type: ignore[attr-defined]
    assert {p.name for p in command.params} - {"config", "as_json"} == set(OPD_OPTIONS.options)
    for param in command.params:
        if param.name in OPD_OPTIONS.options:
            spec, stated = OPD_OPTIONS.options[param.name], STATED.search(param.help or "")
            assert stated and spec.field in ours, param.help
            if stated["value"] == "TRL's":
                assert spec.field not in hat_defaults and ours[spec.field] == trl_defaults[spec.field]
            elif stated["value"] is not None:
                _assert_states(stated["value"], ours[spec.field], param, spec.unset)
    code = (
        "import sys, hat.cli.opd_cmd; print([m for m in ('trl', 'transformers', 'torch', 'peft') if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_opd_cli_trains_and_prints_the_result(student_dir: Path, prompts_file: Path, tmp_path: Path) -> None:
    app = _opd_app()
    args = [
        "train",
        "opd",
        "--model",
        f"hf:{student_dir}",
        "--out",
        str(tmp_path / "o"),
        "--prompts",
        str(prompts_file),
    ]
    args += ["--n-prompts", "2", "--max-steps", "1", "--batch-size", "2", "--max-new-tokens", "4", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["global_step"] == 1 and summary["n_prompts"] == 2 and summary["adapter"]
    missing = CliRunner().invoke(app, ["train", "opd", "--out", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "--model" in missing.output
