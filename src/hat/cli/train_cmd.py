"""``hat datagen``, ``hat datagen-general`` and ``hat train …``: thin shells over :mod:`hat.train`.

Options override a ``--config`` file, which overrides the defaults; every option defaults to
``None`` ("not given") so a config file's value is never silently replaced by a CLI default.

One source of defaults: each option that sets a config field is declared once, in a table
(:class:`OptionTable`) that names the field, holds the help text and builds both the option (its
help ends with the field's default, read from the config, never typed here) and the overrides
passed to the config. ``HatSFTConfig`` imports TRL, so its defaults are read from
:mod:`hat.train.defaults` (stdlib only): ``hat --help`` stays fast. Fields HAT leaves at TRL's
default say "TRL's". ``tests/test_train_options.py`` checks every help text against the dataclass.

``hat train sft``, ``opd`` and ``rl`` (:mod:`hat.cli.opd_cmd`, :mod:`hat.cli.rl_cmd`) share the rest:
:func:`load_training_config` (defaults < ``--config`` < options) and :func:`run_training` (progress,
``--json``, one error line).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from hat.allocator import MALLOC_CONF, prefer_jemalloc
from hat.cli.common import StepProgress, check_text_or_exit, error_exit, fail, simulator_policies, stdout_to_stderr
from hat.errors import HatError
from hat.train.datagen_config import DatagenConfig
from hat.train.defaults import SFT, field_defaults
from hat.train.replay_config import ReplayConfig

err = Console(stderr=True)
out = Console()
train_app = typer.Typer(
    help="Train: stage 1 SFT on datagen rows, stage 2 on-policy distillation, stage 3 HSA-RL; export.",
    no_args_is_help=True,
)

TEACHER_HELP = (
    "oracle | skill-first | skill-scan | skill-scan-args | skill-scan-answer (or another simulator policy)"
    " | openai:<base_url>#<model> | hf:<path> | smollm2"
)


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


# -- options that set config fields ---------------------------------------------------------------
@dataclass(frozen=True)
class ConfigOption:
    """One CLI option that sets one config field.

    ``help``: the text without the default (appended from the config). ``unset``: how to word a
    default of ``None``/empty (what the config then does). ``required``: the command needs a value
    (from the option or ``--config``), so no default is shown. ``convert``: the option's value to the
    field's (default: a path becomes a string, an empty list "not given").
    """

    field: str
    help: str
    unset: str = "none"
    required: bool = False
    convert: Callable[[Any], Any] | None = None


def when_on(value: Any) -> Callable[[bool], Any]:
    """``convert`` for an on-only flag: ``value`` when given, else "not given"."""
    return lambda on: value if on else None


def describe_default(value: Any, spec: ConfigOption, flags: tuple[str, ...] = ()) -> str:
    """A config default as help text: the chosen flag of an ``--on/--off`` pair, on/off for a lone
    flag, ``spec.unset`` for None or empty, ``%g`` for a float, ``k=v, …`` for a mapping."""
    if isinstance(value, bool):
        pair = next((f.split("/") for f in flags if "/" in f), None)
        return (pair[0] if value else pair[1]) if pair else ("on" if value else "off")
    if value is None or (isinstance(value, str | list | tuple | dict) and not value):
        return spec.unset
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={describe_default(v, spec)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


class OptionTable:
    """The options of one command that set fields of one config, keyed by parameter name.

    ``defaults``: the config's field defaults; a field missing there is ``inherited`` (e.g. from
    TRL) and its help says so instead of copying a value.
    """

    def __init__(
        self, config: str, defaults: Mapping[str, Any], options: dict[str, ConfigOption], *, inherited: str = ""
    ) -> None:
        self.config, self.defaults, self.options, self.inherited = config, defaults, options, inherited

    def help(self, name: str, flags: tuple[str, ...] = (), default: Any = None) -> str:
        """``name``'s help text, ending with the default it leaves the field at (``default``: the
        option's own, ``False`` for a lone on-flag such as ``--resume``)."""
        spec = self.options[name]
        if default is False:  # a lone on-flag: not given leaves the field unset
            return f"{spec.help} (default: off)"
        if spec.required:
            return f"{spec.help} (required, or {spec.field} in --config)"
        if spec.field in self.defaults:
            return f"{spec.help} (default: {describe_default(self.defaults[spec.field], spec, flags)})"
        if not self.inherited:
            raise KeyError(f"{self.config} has no default for {spec.field!r} (option {name!r})")
        return f"{spec.help} (default: {self.inherited})"

    def option(self, name: str, *flags: str, default: Any = None, **limits: Any) -> Any:
        """The typer option for ``name`` (``flags``/``limits`` as for ``typer.Option``)."""
        return typer.Option(default, *flags, help=self.help(name, flags, default), **limits)

    def overrides(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``{field: value}`` for the options given (``params``: the command's parsed parameters)."""
        given: dict[str, Any] = {}
        for name, spec in self.options.items():
            value = params[name]
            if spec.convert is not None:
                value = spec.convert(value)
            elif isinstance(value, Path):
                value = str(value)
            if value is not None and value != []:
                given[spec.field] = value
        return given


# -- shared by hat train sft / opd / rl -----------------------------------------------------------
def load_training_config(cls: Any, path: Path | None, overrides: dict[str, Any], *, required: str, hint: str) -> Any:
    """``cls`` (a TRL config subclass) from its defaults < the file at ``path`` < ``overrides``
    (``None``: not given). ``required`` (a field name, or "") must end up set and the output folder
    must come from an option or the file (TRL has a default of its own); else ``HatError(hint)``."""
    given = {k: v for k, v in overrides.items() if v is not None}
    config = cls.from_yaml(path, **given) if path is not None else cls.from_dict(given)
    if (required and not getattr(config, required)) or ("output_dir" not in given and path is None):
        raise HatError(hint)
    return config


def run_training(
    label: str,
    train: Callable[..., Any],
    make_config: Callable[[dict[str, Any]], Any],
    *,
    as_json: bool,
    summary: Callable[[Any], str],
    malloc_conf: str = MALLOC_CONF,
) -> None:
    """Build the config (``make_config(extra)``: ``extra`` holds the overrides this function adds),
    run ``train(config, callbacks=…)`` with progress on stderr and print the result: one JSON object
    on stdout with ``--json``, else ``summary(result)`` on stderr. A bad config or input exits with
    one error line. In a log (stderr not a terminal) the Trainer's tqdm bar is off and plain step
    lines report the progress instead. ``malloc_conf``: jemalloc's options (:mod:`hat.allocator`)."""
    prefer_jemalloc(conf=malloc_conf)  # a long run: re-executed under jemalloc where installed (hat.allocator)
    plain = not err.is_terminal
    try:
        cfg = make_config({"disable_tqdm": True} if plain else {})
        steps = cfg.max_steps if cfg.max_steps > 0 else None
        progress = StepProgress(label, steps)
        with progress, stdout_to_stderr(as_json):
            result = train(cfg, callbacks=[_step_callback(progress)] if plain else [])
    except (HatError, ValueError) as exc:
        fail(exc, error_exit(exc))
    if as_json:
        print(json.dumps(asdict(result), sort_keys=True))
        return
    err.print(summary(result))


def _step_callback(progress: StepProgress) -> Any:
    """A Trainer callback that reports ``global_step`` of ``max_steps`` after every step; a resumed
    run's steps before its checkpoint do not count toward the ETA (the Trainer has loaded the
    checkpoint's state when ``on_train_begin`` runs)."""
    from transformers import TrainerCallback

    class _Steps(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            progress.resume(state.global_step, state.max_steps or None)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            progress.update(state.global_step, state.max_steps or None)

    return _Steps()


# -- hat datagen ----------------------------------------------------------------------------------
DATAGEN_OPTIONS = OptionTable(
    "DatagenConfig",
    field_defaults(DatagenConfig),
    {
        "n": ConfigOption("n_episodes", "Episodes to run"),
        "seed": ConfigOption("seed", "Seed (same config → byte-identical dataset)"),
        "hsa_ratio": ConfigOption("hsa_ratio", "Share of episodes under HSA variants"),
        "teacher": ConfigOption("teacher", TEACHER_HELP),
        "k": ConfigOption("k", "Samples per episode (model teachers need --temperature)"),
        "temperature": ConfigOption("temperature", "Sampling temperature of a model teacher"),
        "envelope": ConfigOption("envelope", "Change envelope: default | tools | prompt | <file.yaml>"),
        "harness": ConfigOption("harness", "Production harness (folder or built-in name)"),
        "fault_rate": ConfigOption("fault_rate", "Tool fault probability per call"),
        "mode": ConfigOption("mode", "single | multi (several comments per request)"),
        "max_examples": ConfigOption("max_examples", "Stop after this many accepted rows", unset="no limit"),
        "comments_per_snapshot": ConfigOption(
            "comments_per_snapshot", "Viewer comments per room snapshot and harness state (packing shares them)"
        ),
        "threshold": ConfigOption(
            "thresholds", "DIM=MIN judge threshold (repeatable; replaces the defaults)", convert=_thresholds
        ),
        "fmt": ConfigOption("formats", "jsonl | parquet | arrow (repeatable)"),
    },
)
_DG = DATAGEN_OPTIONS.option


def datagen_command(
    ctx: typer.Context,
    n: int | None = _DG("n", "--n", min=1),
    seed: int | None = _DG("seed", min=0),
    out_dir: Path = typer.Option(..., "--out", help="New or empty folder for data.jsonl, config.yaml, stats.json."),
    config: Path | None = typer.Option(None, "--config", help="DatagenConfig YAML; options override it."),
    hsa_ratio: float | None = _DG("hsa_ratio", min=0.0, max=1.0),
    teacher: str | None = _DG("teacher"),
    k: int | None = _DG("k", "--k", min=1),
    temperature: float | None = _DG("temperature", min=0.0),
    envelope: str | None = _DG("envelope"),
    harness: str | None = _DG("harness"),
    fault_rate: float | None = _DG("fault_rate", min=0.0, max=1.0),
    mode: str | None = _DG("mode"),
    max_examples: int | None = _DG("max_examples", min=1),
    comments_per_snapshot: int | None = _DG("comments_per_snapshot", min=1),
    threshold: list[str] | None = _DG("threshold"),
    fmt: list[str] | None = _DG("fmt", "--format"),
    as_json: bool = typer.Option(False, "--json", help="Print the stats as one JSON object on stdout."),
) -> None:
    """Generate HSA-SFT data: teacher trajectories under production/HSA harnesses, judge-filtered."""
    from hat.train import generate_dataset

    simulator_policies()  # a teacher may be any simulator policy (rule-reader too)
    check_text_or_exit(config, "datagen config")
    try:
        base = DatagenConfig.load(config) if config else DatagenConfig()
        cfg = base.with_overrides(**DATAGEN_OPTIONS.overrides(ctx.params))  # the options above, through the table
        cfg.validate()
        with StepProgress("datagen", cfg.n_episodes) as advance, stdout_to_stderr(as_json):
            stats = generate_dataset(cfg, out_dir, progress=advance)
    except (HatError, ValueError) as exc:
        fail(exc, error_exit(exc))
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


# -- hat train sft --------------------------------------------------------------------------------
SFT_OPTIONS = OptionTable(
    "HatSFTConfig",
    asdict(SFT),
    {
        "data": ConfigOption("data", "A hat datagen folder", required=True),
        "out_dir": ConfigOption("output_dir", "Output folder (checkpoints, final adapter/model)", required=True),
        "model": ConfigOption("model", "Base model: smollm2 | <checkpoint folder> | hf:<folder>"),
        "lora": ConfigOption("use_lora", "LoRA adapter or full fine-tuning"),
        "max_steps": ConfigOption("max_steps", "Optimizer steps; unset, num_train_epochs decides"),
        "batch_size": ConfigOption(
            "per_device_train_batch_size", "Per-device batch size: packs per step with packing, else rows"
        ),
        "grad_accum": ConfigOption("gradient_accumulation_steps", "Gradient accumulation steps"),
        "lr": ConfigOption("learning_rate", "Learning rate, a LoRA rate by default; pass a smaller one with --full"),
        "max_seq_length": ConfigOption("max_length", "Max tokens per row; longer rows are cut at the end"),
        "lora_r": ConfigOption("lora_r", "LoRA rank"),
        "save_steps": ConfigOption("save_steps", "Checkpoint every N steps"),
        "seed": ConfigOption("seed", "Training seed (also picks --max-examples subsamples)"),
        "max_examples": ConfigOption("max_examples", "Train on exactly N rows (seeded subsample)", unset="every row"),
        "threads": ConfigOption("torch_threads", "torch CPU threads (1 is faster on a busy CPU)", unset="torch's"),
        "packing": ConfigOption("packing", "Shared-prefix packing + trained-positions-only loss"),
        "bf16": ConfigOption(
            "autocast_bf16",
            "bf16 autocast of the decoder, --packing only (without packing TRL's bf16 applies: on with a bf16 GPU)",
            unset="on where the CPU/GPU has native bf16",
        ),
        "replay_data": ConfigOption("replay_data", "A hat datagen-general folder (general replay rows)"),
        "replay_ratio": ConfigOption("replay_ratio", "General rows per livestream row (e.g. 0.25)"),
        "resume": ConfigOption(
            "resume_from_checkpoint", "Continue from the latest checkpoint in --out", convert=when_on("latest")
        ),
        "fixed_harness": ConfigOption(
            "fixed_harness",
            "The baseline: production-harness rows only; pass the HSA run's --max-examples and --max-steps",
            convert=when_on(True),
        ),
    },
    inherited="TRL's",
)
_SO = SFT_OPTIONS.option


@train_app.command("sft")
def sft_command(
    ctx: typer.Context,
    data: Path | None = _SO("data", "--data"),
    out_dir: Path | None = _SO("out_dir", "--out"),
    model: str | None = _SO("model"),
    lora: bool | None = _SO("lora", "--lora/--full"),
    max_steps: int | None = _SO("max_steps", min=1),
    batch_size: int | None = _SO("batch_size", min=1),
    grad_accum: int | None = _SO("grad_accum", min=1),
    lr: float | None = _SO("lr"),
    max_seq_length: int | None = _SO("max_seq_length", min=16),
    lora_r: int | None = _SO("lora_r", min=1),
    save_steps: int | None = _SO("save_steps", min=1),
    seed: int | None = _SO("seed"),
    max_examples: int | None = _SO("max_examples", min=1),
    threads: int | None = _SO("threads", min=1),
    packing: bool | None = _SO("packing", "--packing/--no-packing"),
    bf16: bool | None = _SO("bf16", "--bf16/--fp32"),
    replay_data: Path | None = _SO("replay_data"),
    replay_ratio: float | None = _SO("replay_ratio", min=0.0),
    resume: bool = _SO("resume", "--resume", default=False),
    fixed_harness: bool = _SO("fixed_harness", "--fixed-harness", default=False),
    config: Path | None = typer.Option(None, "--config", help="HatSFTConfig YAML (any TRL field); options override."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object on stdout."),
) -> None:
    """Supervised fine-tuning on datagen rows: packed shared prefixes, assistant-only loss, LoRA or full."""
    from hat.train.sft import train_sft

    check_text_or_exit(config, "SFT config")
    overrides = SFT_OPTIONS.overrides(ctx.params)  # the options above, through the table
    run_training(
        "train sft",
        train_sft,
        lambda extra: _sft_config(config, overrides | extra),
        as_json=as_json,
        summary=_sft_summary,
    )


def _sft_summary(result: Any) -> str:
    kind = "LoRA adapter" if result.adapter else "full model"
    return (
        f"trained {result.global_step} steps on {result.n_examples} rows ({result.n_truncated} truncated, "
        f"{result.n_harness_states} harness states); "
        f"loss {result.train_loss:.4f}; {kind} in {result.output_dir} (load with --model hf:{result.output_dir})"
    )


def _sft_config(path: Path | None, overrides: dict[str, Any]) -> Any:
    """Defaults < ``path`` < the options given; data and output folders are required."""
    from hat.train.sft_config import HatSFTConfig

    hint = "give --data DIR and --out DIR (or data/output_dir in --config)"
    return load_training_config(HatSFTConfig, path, overrides, required="data", hint=hint)


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
        fail(exc, error_exit(exc))
    size = (folder / "adapter_model.safetensors").stat().st_size / 1e6
    err.print(f"exported {src} → {folder} ({size:.1f} MB); load with --model hf:{folder}")


# -- hat datagen-general --------------------------------------------------------------------------
REPLAY_OPTIONS = OptionTable(
    "ReplayConfig",
    field_defaults(ReplayConfig),
    {
        "n": ConfigOption("n", "Prompts to answer"),
        "model": ConfigOption("model", "Model that answers: the base model (self-distillation) or any spec"),
        "batch_size": ConfigOption("batch_size", "Prompts per generate_batch call"),
        "max_new_tokens": ConfigOption("max_new_tokens", "Answer limit; cut answers are dropped"),
        "dtype": ConfigOption(
            "dtype", "Weights of a local model: auto | bfloat16 (~2x faster on CPUs with native bf16) | float32"
        ),
        "seed": ConfigOption("seed", "Seed of the prompt draw"),
        "prompts": ConfigOption("prompts", "Prompts JSONL (relative: the current folder, then the repository)"),
        "keep_truncated": ConfigOption("keep_truncated", "Keep or drop answers cut by --max-new-tokens"),
        "exclude_source": ConfigOption("exclude_sources", "Skip prompts of this source (repeatable)"),
    },
)
_RO = REPLAY_OPTIONS.option


def datagen_general_command(
    ctx: typer.Context,
    n: int | None = _RO("n", "--n", min=1),
    out_dir: Path = typer.Option(..., "--out", help="New folder (or an unfinished run of the same config: resumed)."),
    model: str | None = _RO("model"),
    batch_size: int | None = _RO("batch_size", min=1),
    max_new_tokens: int | None = _RO("max_new_tokens", min=1),
    dtype: str | None = _RO("dtype"),
    seed: int | None = _RO("seed", min=0),
    prompts: str | None = _RO("prompts"),
    keep_truncated: bool | None = _RO("keep_truncated", "--keep-truncated/--drop-truncated"),
    exclude_source: list[str] | None = _RO("exclude_source"),
    config: Path | None = typer.Option(None, "--config", help="ReplayConfig YAML; options override it."),
    as_json: bool = typer.Option(False, "--json", help="Print the stats as one JSON object on stdout."),
) -> None:
    """General-instruction replay rows for SFT: the base model's own answers to general prompts."""
    from hat.train.replay import generate_replay

    prefer_jemalloc()
    check_text_or_exit(config, "replay config")
    try:
        base = ReplayConfig.load(config) if config else ReplayConfig()
        cfg = base.with_overrides(**REPLAY_OPTIONS.overrides(ctx.params))  # the options above, through the table
        cfg.validate()
        bar = StepProgress("datagen-general", cfg.n)
        with bar as advance, stdout_to_stderr(as_json):
            stats = generate_replay(cfg, out_dir, progress=advance, on_resume=bar.resume)
    except (HatError, ValueError) as exc:
        fail(exc, error_exit(exc))
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
