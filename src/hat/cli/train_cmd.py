"""``hat datagen``, ``hat datagen-general`` and ``hat train …``: thin shells over :mod:`hat.train`.

Options override a ``--config`` file, which overrides the defaults; every option defaults to
``None`` ("not given") so a config file's value is never silently replaced by a CLI default.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from hat.cli.common import StepProgress, check_text_or_exit, error_exit, simulator_policies, stdout_to_stderr
from hat.errors import HatError

err = Console(stderr=True)
out = Console()
train_app = typer.Typer(help="Train models on datagen rows (SFT).", no_args_is_help=True)

TEACHER_HELP = "oracle (or another simulator policy) | openai:<base_url>#<model> | hf:<path> | smollm2"


def _fail(exc: Exception) -> typer.Exit:
    err.print(f"error: {exc}", markup=False, soft_wrap=True, highlight=False)
    return typer.Exit(error_exit(exc))


def _thresholds(items: list[str] | None) -> dict[str, float] | None:
    if not items:
        return None
    parsed: dict[str, float] = {}
    for item in items:
        dim, sep, value = item.partition("=")
        if not sep:
            raise HatError(f"--threshold takes DIM=VALUE (e.g. accuracy=0.9), not {item!r}")
        parsed[dim.strip()] = float(value)
    return parsed


def datagen_command(
    n: int | None = typer.Option(None, "--n", min=1, help="Episodes to run (default 100)."),
    seed: int | None = typer.Option(None, min=0, help="Seed (same config → byte-identical dataset)."),
    out_dir: Path = typer.Option(..., "--out", help="New or empty folder for data.jsonl, config.yaml, stats.json."),
    config: Path | None = typer.Option(None, "--config", help="DatagenConfig YAML; options override it."),
    hsa_ratio: float | None = typer.Option(None, min=0.0, max=1.0, help="Share of episodes under HSA variants."),
    teacher: str | None = typer.Option(None, help=TEACHER_HELP),
    k: int | None = typer.Option(None, "--k", min=1, help="Samples per episode (model teachers need --temperature)."),
    temperature: float | None = typer.Option(None, min=0.0, help="Sampling temperature of a model teacher."),
    envelope: str | None = typer.Option(None, help="Change envelope: default | tools | prompt | <file.yaml>."),
    harness: str | None = typer.Option(None, help="Production harness (folder or built-in name)."),
    fault_rate: float | None = typer.Option(None, min=0.0, max=1.0, help="Tool fault probability per call."),
    mode: str | None = typer.Option(None, help="single | multi (several comments per request)."),
    max_examples: int | None = typer.Option(None, min=1, help="Stop after this many accepted rows."),
    comments_per_snapshot: int | None = typer.Option(
        None, min=1, help="Viewer comments per room snapshot and harness state (default 8; packing shares them)."
    ),
    threshold: list[str] | None = typer.Option(None, help="DIM=MIN judge threshold (repeatable; replaces defaults)."),
    fmt: list[str] | None = typer.Option(None, "--format", help="jsonl | parquet | arrow (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the stats as one JSON object on stdout."),
) -> None:
    """Generate HSA-SFT data: teacher trajectories under production/HSA harnesses, judge-filtered."""
    from hat.train import DatagenConfig, generate_dataset

    simulator_policies()  # a teacher may be any simulator policy (rule-reader too)
    check_text_or_exit(config, "datagen config")
    try:
        base = DatagenConfig.load(config) if config else DatagenConfig()
        cfg = base.with_overrides(
            n_episodes=n, seed=seed, hsa_ratio=hsa_ratio, teacher=teacher, k=k, temperature=temperature,
            envelope=envelope, harness=harness, fault_rate=fault_rate, mode=mode, max_examples=max_examples,
            comments_per_snapshot=comments_per_snapshot, thresholds=_thresholds(threshold), formats=fmt or None,
        )  # fmt: skip
        cfg.validate()
        with StepProgress("datagen", cfg.n_episodes) as advance, stdout_to_stderr(as_json):
            stats = generate_dataset(cfg, out_dir, progress=advance)
    except (HatError, ValueError) as exc:
        raise _fail(exc) from exc
    if as_json:
        print(json.dumps(stats, sort_keys=True))
        return
    _show_stats(stats)
    err.print(f"wrote {stats['rows']} rows to {out_dir} (sha256 {stats['dataset_hash'][:16]}, {stats['wall_s']} s)")


def _show_stats(stats: dict[str, Any]) -> None:
    out.print(f"accepted {stats['accepted']}/{stats['samples']} trajectories ({100 * stats['accept_rate']:.1f}%)")
    dims = Table("dimension", "mean", "pass rate", title="judges")
    for dim, row in stats["dims"].items():
        rate = "—" if row["pass_rate"] is None else f"{100 * row['pass_rate']:.1f}%"
        dims.add_row(dim, f"{row['mean']:.3f}", rate)
    out.print(dims)
    groups = Table("group", "samples", "accepted", "rate", title="acceptance")
    for key in ("by_harness", "by_intent"):
        for name, row in stats[key].items():
            groups.add_row(f"{key[3:]}: {name}", str(row["samples"]), str(row["accepted"]), f"{100 * row['rate']:.1f}%")
    out.print(groups)
    if stats["rejected_by"]:
        out.print("rejected by: " + ", ".join(f"{k} {v}" for k, v in stats["rejected_by"].items()))


@train_app.command("sft")
def sft_command(
    data: Path | None = typer.Option(None, "--data", help="A hat datagen folder."),
    out_dir: Path | None = typer.Option(None, "--out", help="Output folder (checkpoints, final adapter/model)."),
    model: str | None = typer.Option(None, help="Base model: smollm2 | <checkpoint folder> | hf:<folder>."),
    lora: bool | None = typer.Option(None, "--lora/--full", help="LoRA adapter (default) or full fine-tuning."),
    max_steps: int | None = typer.Option(None, min=1, help="Optimizer steps."),
    batch_size: int | None = typer.Option(
        None, min=1, help="Per-device batch size: packs per step with packing (default 1), else rows."
    ),
    grad_accum: int | None = typer.Option(None, min=1, help="Gradient accumulation steps."),
    lr: float | None = typer.Option(None, help="Learning rate (default 2e-4, a LoRA rate)."),
    max_seq_length: int | None = typer.Option(None, min=16, help="Max tokens per row (default 2048)."),
    lora_r: int | None = typer.Option(None, min=1, help="LoRA rank (default 16)."),
    save_steps: int | None = typer.Option(None, min=1, help="Checkpoint every N steps (default 50)."),
    seed: int | None = typer.Option(None, help="Training seed (also picks --max-examples subsamples)."),
    max_examples: int | None = typer.Option(None, min=1, help="Train on exactly N rows (seeded subsample)."),
    threads: int | None = typer.Option(None, min=1, help="torch CPU threads (1 is faster on a busy CPU)."),
    packing: bool | None = typer.Option(
        None, "--packing/--no-packing", help="Shared-prefix packing + trained-positions-only loss (default on)."
    ),
    bf16: bool | None = typer.Option(
        None, "--bf16/--fp32", help="bf16 autocast of the decoder (default: on where the CPU/GPU has native bf16)."
    ),
    replay_data: Path | None = typer.Option(None, help="A hat datagen-general folder (general replay rows)."),
    replay_ratio: float | None = typer.Option(None, min=0.0, help="General rows per livestream row (e.g. 0.25)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint in --out."),
    fixed_harness: bool = typer.Option(
        False,
        "--fixed-harness",
        help="The baseline: production-harness rows only; pass the HSA run's --max-examples and --max-steps.",
    ),
    config: Path | None = typer.Option(None, "--config", help="HatSFTConfig YAML (any TRL field); options override."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object on stdout."),
) -> None:
    """Supervised fine-tuning on datagen rows: packed shared prefixes, assistant-only loss, LoRA or full."""
    from hat.train.sft import train_sft

    check_text_or_exit(config, "SFT config")
    overrides = {
        "data": None if data is None else str(data),
        "output_dir": None if out_dir is None else str(out_dir),
        "model": model, "use_lora": lora, "max_steps": max_steps, "per_device_train_batch_size": batch_size,
        "gradient_accumulation_steps": grad_accum, "learning_rate": lr, "max_length": max_seq_length,
        "lora_r": lora_r, "save_steps": save_steps, "seed": seed, "max_examples": max_examples,
        "resume_from_checkpoint": "latest" if resume else None, "fixed_harness": fixed_harness or None,
        "torch_threads": threads, "packing": packing, "autocast_bf16": bf16,
        "replay_data": None if replay_data is None else str(replay_data), "replay_ratio": replay_ratio,
    }  # fmt: skip
    plain = not err.is_terminal  # a log: plain step lines instead of the Trainer's tqdm bar
    try:
        cfg = _sft_config(config, overrides | ({"disable_tqdm": True} if plain else {}))
        steps = cfg.max_steps if cfg.max_steps > 0 else None
        with StepProgress("train sft", steps) as update, stdout_to_stderr(as_json):
            result = train_sft(cfg, callbacks=[_step_callback(update)] if plain else [])
    except (HatError, ValueError) as exc:
        raise _fail(exc) from exc
    if as_json:
        print(json.dumps(asdict(result), sort_keys=True))
        return
    kind = "LoRA adapter" if result.adapter else "full model"
    err.print(
        f"trained {result.global_step} steps on {result.n_examples} rows ({result.n_truncated} truncated); "
        f"loss {result.train_loss:.4f}; {kind} in {result.output_dir} (load with --model hf:{result.output_dir})"
    )


def _step_callback(update: Any) -> Any:
    """A Trainer callback that reports ``update(global_step, max_steps)`` after every step."""
    from transformers import TrainerCallback

    class _Steps(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            update(state.global_step, state.max_steps or None)

    return _Steps()


def _sft_config(path: Path | None, overrides: dict[str, Any]) -> Any:
    """Defaults < ``path`` < the options given; data and output folders are required."""
    from hat.train.sft_config import HatSFTConfig

    given = {k: v for k, v in overrides.items() if v is not None}
    config = HatSFTConfig.from_yaml(path, **given) if path is not None else HatSFTConfig.from_dict(given)
    if not config.data or ("output_dir" not in given and path is None):
        raise HatError("give --data DIR and --out DIR (or data/output_dir in --config)")
    return config


@train_app.command("export")
def export_command(
    src: Path = typer.Argument(..., help="A `hat train sft --lora` output folder."),
    dst: Path = typer.Argument(..., help="Folder to write (adapter, configs, loss log, model card)."),
    dtype: str = typer.Option("float16", help="Weight dtype: float16 | bfloat16 | float32."),
    notes: Path | None = typer.Option(None, help="Markdown file appended to the model card (measured results)."),
) -> None:
    """Export a LoRA adapter for shipping: weights in fp16, configs, loss log and a model card."""
    from hat.train.export import export_adapter

    try:
        folder = export_adapter(src, dst, dtype=dtype, card_notes=notes.read_text(encoding="utf-8") if notes else "")
    except (HatError, OSError) as exc:
        raise _fail(exc) from exc
    size = (folder / "adapter_model.safetensors").stat().st_size / 1e6
    err.print(f"exported {src} → {folder} ({size:.1f} MB); load with --model hf:{folder}")


# -- hat datagen-general --------------------------------------------------------------------------
def datagen_general_command(
    n: int | None = typer.Option(None, "--n", min=1, help="Prompts to answer (default 600)."),
    out_dir: Path = typer.Option(..., "--out", help="New folder (or an unfinished run of the same config: resumed)."),
    model: str | None = typer.Option(None, help="Model that answers: the base model smollm2 (default) or any spec."),
    batch_size: int | None = typer.Option(None, min=1, help="Prompts per generate_batch call (default 16)."),
    max_new_tokens: int | None = typer.Option(None, min=1, help="Answer limit; cut answers are dropped (default 384)."),
    dtype: str | None = typer.Option(
        None, help="Weights of a local model: auto | bfloat16 (~2x faster on CPUs with native bf16) | float32."
    ),
    seed: int | None = typer.Option(None, min=0, help="Seed of the prompt draw (default 0)."),
    prompts: str | None = typer.Option(None, help="Prompts JSONL (default ../shared/data/general/prompts.jsonl)."),
    keep_truncated: bool | None = typer.Option(
        None, "--keep-truncated/--drop-truncated", help="Keep answers cut by --max-new-tokens (default: drop)."
    ),
    exclude_source: list[str] | None = typer.Option(None, help="Skip prompts of this source (repeatable)."),
    config: Path | None = typer.Option(None, "--config", help="ReplayConfig YAML; options override it."),
    as_json: bool = typer.Option(False, "--json", help="Print the stats as one JSON object on stdout."),
) -> None:
    """General-instruction replay rows for SFT: the base model's own answers to general prompts."""
    from hat.train.replay import ReplayConfig, generate_replay

    check_text_or_exit(config, "replay config")
    try:
        base = ReplayConfig.load(config) if config else ReplayConfig()
        cfg = base.with_overrides(
            n=n, model=model, dtype=dtype, batch_size=batch_size, max_new_tokens=max_new_tokens, seed=seed,
            prompts=prompts,
            keep_truncated=keep_truncated, exclude_sources=exclude_source or None,
        )  # fmt: skip
        cfg.validate()
        with StepProgress("datagen-general", cfg.n) as advance, stdout_to_stderr(as_json):
            stats = generate_replay(cfg, out_dir, progress=advance)
    except (HatError, ValueError) as exc:
        raise _fail(exc) from exc
    if as_json:
        print(json.dumps(stats, sort_keys=True))
        return
    dropped = stats["dropped"]
    out.print(
        f"kept {stats['rows']}/{stats['prompts']} answers (dropped {dropped['truncated']} truncated, "
        f"{dropped['empty']} empty); median {stats['answer_chars']['median']:.0f} chars; "
        f"{stats['answers_per_min'] or 0:.1f} answers/min"
    )
    err.print(f"wrote {stats['rows']} rows to {out_dir} (sha256 {stats['dataset_hash'][:16]}, {stats['wall_s']} s)")
