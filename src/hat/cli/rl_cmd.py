"""``hat train rl``: stage 3, HSA-RL with the segment-decomposed GDPO advantage (a thin shell over
:mod:`hat.train.rl`).

Options override a ``--config`` file (any :class:`~hat.train.rl_config.HatRLConfig` field, i.e. any
TRL ``GRPOConfig`` field too), which overrides the defaults. Defaults come from
:mod:`hat.train.rl_defaults` (stdlib only), so ``--help`` does not import TRL; fields HAT leaves at
TRL's default say "TRL's".
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from hat.allocator import ON_POLICY_MALLOC_CONF
from hat.cli.common import check_text_or_exit
from hat.cli.train_cmd import ConfigOption, OptionTable, load_training_config, run_training, when_on
from hat.train.rl_defaults import ADVANTAGES, RL

__all__ = ["RL_OPTIONS", "rl_command"]

RL_OPTIONS = OptionTable(
    "HatRLConfig",
    asdict(RL),
    {
        "out_dir": ConfigOption("output_dir", "Output folder (checkpoints, adapter/model, diagnostics)", required=True),
        "model": ConfigOption("model", "Policy to start from: smollm2 | <checkpoint or adapter folder> | hf:<folder>"),
        "harness": ConfigOption("harness", "Production harness (folder or built-in name)"),
        "envelope": ConfigOption("envelope", "HSA change envelope: default | tools | prompt | <file.yaml>"),
        "hsa_prob": ConfigOption("hsa_prob", "Probability that a group runs under a train-split HSA variant"),
        "episodes": ConfigOption("n_episodes", "Simulator episodes to draw groups from"),
        "episode_seed": ConfigOption("episode_seed", "Seed of the episodes (datagen-style; never an eval seed)"),
        "fault_rate": ConfigOption("fault_rate", "Tool fault probability per call"),
        "advantage": ConfigOption("advantage", f"Advantage: {' | '.join(ADVANTAGES)}"),
        "cot_lambda": ConfigOption("cot_lambda", "λ, weight of the CoT-length term q(L)"),
        "group_size": ConfigOption("num_generations", "Rollouts per group G (same episode and harness)"),
        "batch_size": ConfigOption(
            "per_device_train_batch_size", "Rollouts per forward/backward pass and device (a micro-batch)"
        ),
        "grad_accum": ConfigOption(
            "gradient_accumulation_steps",
            "Micro-batches per optimizer step; rollouts per step = batch size × this × devices (a multiple of G)",
        ),
        "max_steps": ConfigOption("max_steps", "Optimizer steps; unset, num_train_epochs decides"),
        "lr": ConfigOption("learning_rate", "Learning rate"),
        "beta": ConfigOption("beta", "KL coefficient to the reference policy (0: no reference)"),
        "temperature": ConfigOption("temperature", "Sampling temperature of the rollouts"),
        "max_new_tokens": ConfigOption("max_new_tokens", "Tokens per model call", unset="the harness's limit"),
        "lora": ConfigOption("use_lora", "LoRA adapter or full fine-tuning (an adapter --model is continued)"),
        "lora_r": ConfigOption("lora_r", "LoRA rank"),
        "save_steps": ConfigOption("save_steps", "Checkpoint every N steps"),
        "seed": ConfigOption("seed", "Training seed (also seeds the coin flips and sampling)"),
        "bf16": ConfigOption(
            "autocast_bf16",
            "bf16 autocast of the loss's forward/backward (rollouts generate in float32)",
            unset="on where the CPU/GPU has native bf16",
        ),
        "share_prompts": ConfigOption(
            "share_group_prompts", "Micro-batches hold whole groups; a group's prompt is encoded once"
        ),
        "threads": ConfigOption("torch_threads", "torch CPU threads (1 is faster on a busy CPU)", unset="torch's"),
        "resume": ConfigOption(
            "resume_from_checkpoint",
            "Continue from the latest complete checkpoint in --out",
            convert=when_on("latest"),
        ),
    },
    inherited="TRL's",
)
_RO = RL_OPTIONS.option


def rl_command(
    ctx: typer.Context,
    out_dir: Path | None = _RO("out_dir", "--out"),
    model: str | None = _RO("model"),
    harness: str | None = _RO("harness"),
    envelope: str | None = _RO("envelope"),
    hsa_prob: float | None = _RO("hsa_prob", min=0.0, max=1.0),
    episodes: int | None = _RO("episodes", min=1),
    episode_seed: int | None = _RO("episode_seed", min=0),
    fault_rate: float | None = _RO("fault_rate", min=0.0, max=1.0),
    advantage: str | None = _RO("advantage"),
    cot_lambda: float | None = _RO("cot_lambda", min=0.0),
    group_size: int | None = _RO("group_size", "--group-size", "-G", min=2),
    batch_size: int | None = _RO("batch_size", min=1),
    grad_accum: int | None = _RO("grad_accum", min=1),
    max_steps: int | None = _RO("max_steps", min=1),
    lr: float | None = _RO("lr"),
    beta: float | None = _RO("beta", min=0.0),
    temperature: float | None = _RO("temperature"),
    max_new_tokens: int | None = _RO("max_new_tokens", min=1),
    lora: bool | None = _RO("lora", "--lora/--full"),
    lora_r: int | None = _RO("lora_r", min=1),
    save_steps: int | None = _RO("save_steps", min=1),
    seed: int | None = _RO("seed"),
    bf16: bool | None = _RO("bf16", "--bf16/--fp32"),
    share_prompts: bool | None = _RO("share_prompts", "--share-prompts/--no-share-prompts"),
    threads: int | None = _RO("threads", min=1),
    resume: bool = _RO("resume", "--resume", default=False),
    config: Path | None = typer.Option(None, "--config", help="HatRLConfig YAML (any TRL field); options override."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object on stdout."),
) -> None:
    """HSA-RL (stage 3): multi-turn simulator rollouts, segment-decomposed GDPO, PPO-clip on TRL."""
    from hat.train.rl import train_rl

    check_text_or_exit(config, "RL config")
    overrides = RL_OPTIONS.overrides(ctx.params)
    run_training(
        "train rl",
        train_rl,
        lambda extra: _rl_config(config, overrides | extra),
        as_json=as_json,
        summary=_summary,
        malloc_conf=ON_POLICY_MALLOC_CONF,  # sampling between forwards: keep the pages (hat.allocator)
    )


def _summary(result: Any) -> str:
    kind = "LoRA adapter" if result.adapter else "full model"
    return (
        f"trained {result.global_step} steps ({result.advantage} advantage) on {result.n_episodes} episodes; "
        f"{kind} in {result.output_dir} (load with --model hf:{result.output_dir}); "
        f"diagnostics {result.diagnostics}" + (f", plot {result.plot}" if result.plot else "")
    )


def _rl_config(path: Path | None, overrides: dict[str, Any]) -> Any:
    """Defaults < ``path`` < the options given; the output folder is required."""
    from hat.train.rl_config import HatRLConfig

    hint = "give --out DIR (or output_dir in --config)"
    return load_training_config(HatRLConfig, path, overrides, required="", hint=hint)
