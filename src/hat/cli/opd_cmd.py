"""``hat train opd``: stage 2, on-policy distillation (a thin shell over :func:`hat.train.opd.train_opd`).

Options override a ``--config`` file (any :class:`~hat.train.opd_config.HatOPDConfig` field, i.e.
any TRL ``DistillationConfig`` field too), which overrides the defaults. As for ``hat train sft``,
each option is declared once in :data:`OPD_OPTIONS`, whose help ends with the field's default read
from :mod:`hat.train.opd_defaults` (no TRL import for ``--help``); fields HAT leaves at TRL's
default say "TRL's".
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from hat.allocator import ON_POLICY_MALLOC_CONF
from hat.cli.common import check_text_or_exit
from hat.cli.train_cmd import ConfigOption, OptionTable, load_training_config, run_training, when_on
from hat.train.opd_defaults import OPD

__all__ = ["OPD_OPTIONS", "opd_command"]

OPD_OPTIONS = OptionTable(
    "HatOPDConfig",
    asdict(OPD),
    {
        "model": ConfigOption(
            "model",
            "The student: a `hat train sft` output folder (adapter or full checkpoint) or a spec",
            required=True,
        ),
        "out_dir": ConfigOption("output_dir", "Output folder (checkpoints, final adapter/model, log)", required=True),
        "teacher": ConfigOption("teacher", "Teacher model spec", unset="the student's base model"),
        "prompts": ConfigOption("prompts", "General prompts JSONL (training only; id, source, prompt)"),
        "n_prompts": ConfigOption("n_prompts", "Prompts drawn with --seed, each sampled once per epoch"),
        "lora": ConfigOption("use_lora", "LoRA (an adapter student keeps training its adapter) or full fine-tuning"),
        "max_steps": ConfigOption("max_steps", "Optimizer steps; unset, num_train_epochs decides"),
        "batch_size": ConfigOption("per_device_train_batch_size", "Prompts sampled per step and device"),
        "grad_accum": ConfigOption("gradient_accumulation_steps", "Gradient accumulation steps"),
        "lr": ConfigOption("learning_rate", "Learning rate, a LoRA rate by default; pass a smaller one with --full"),
        "max_new_tokens": ConfigOption(
            "max_new_tokens", "Sampled answer limit", unset=f"max_completion_length, {OPD.max_completion_length}"
        ),
        "temperature": ConfigOption("temperature", "Sampling and loss temperature"),
        "lora_r": ConfigOption("lora_r", "Rank of a new LoRA adapter (full-checkpoint student)"),
        "save_steps": ConfigOption("save_steps", "Checkpoint every N steps"),
        "seed": ConfigOption("seed", "Seed of the prompt draw, the sampling and a new adapter"),
        "threads": ConfigOption("torch_threads", "torch CPU threads (1 is faster on a busy CPU)", unset="torch's"),
        "resume": ConfigOption(
            "resume_from_checkpoint",
            "Continue from the latest complete checkpoint in --out",
            convert=when_on("latest"),
        ),
    },
    inherited="TRL's",
)
_OO = OPD_OPTIONS.option


def opd_command(
    ctx: typer.Context,
    model: str | None = _OO("model"),
    out_dir: Path | None = _OO("out_dir", "--out"),
    teacher: str | None = _OO("teacher"),
    prompts: str | None = _OO("prompts"),
    n_prompts: int | None = _OO("n_prompts", min=1),
    lora: bool | None = _OO("lora", "--lora/--full"),
    max_steps: int | None = _OO("max_steps", min=1),
    batch_size: int | None = _OO("batch_size", min=1),
    grad_accum: int | None = _OO("grad_accum", min=1),
    lr: float | None = _OO("lr"),
    max_new_tokens: int | None = _OO("max_new_tokens", min=1),
    temperature: float | None = _OO("temperature"),
    lora_r: int | None = _OO("lora_r", min=1),
    save_steps: int | None = _OO("save_steps", min=1),
    seed: int | None = _OO("seed"),
    threads: int | None = _OO("threads", min=1),
    resume: bool = _OO("resume", "--resume", default=False),
    config: Path | None = typer.Option(None, "--config", help="HatOPDConfig YAML (any TRL field); options override."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object on stdout."),
) -> None:
    """On-policy distillation (stage 2): the student samples general prompts, the frozen base model
    scores every token, the loss is the per-token reverse KL."""
    from hat.train.opd import train_opd

    check_text_or_exit(config, "OPD config")
    overrides = OPD_OPTIONS.overrides(ctx.params)
    run_training(
        "train opd",
        train_opd,
        lambda extra: _opd_config(config, overrides | extra),
        as_json=as_json,
        summary=_summary,
        malloc_conf=ON_POLICY_MALLOC_CONF,  # sampling between forwards: keep the pages (hat.allocator)
    )


def _summary(result: Any) -> str:
    kind = "LoRA adapter" if result.adapter else "full model"
    return (
        f"distilled {result.global_step} steps on {result.n_prompts} prompts toward {result.teacher}; "
        f"mean reverse KL {result.train_loss:.4f}; {kind} in {result.output_dir} "
        f"(load with --model hf:{result.output_dir}; per-step log {result.output_dir}/opd_log.jsonl)"
    )


def _opd_config(path: Path | None, overrides: dict[str, Any]) -> Any:
    """Defaults < ``path`` < the options given; the student and the output folder are required."""
    from hat.train.opd_config import HatOPDConfig

    hint = "give --model DIR (the stage-1 model) and --out DIR (or model/output_dir in --config)"
    return load_training_config(HatOPDConfig, path, overrides, required="model", hint=hint)
