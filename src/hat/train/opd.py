"""``hat train opd``: stage 2, general on-policy distillation on TRL's ``DistillationTrainer``.

The student (the stage-1 model) samples answers to general prompts, the frozen teacher (by default
the student's base model) scores every sampled token, and the loss is the per-token reverse KL on
the student's own samples (see :mod:`hat.train.opd_config` for why TRL's trainer is exactly that).
TRL does the sampling, scoring, loss and checkpointing; this module is the glue:

- **Prompts**: :func:`hat.train.replay.load_prompts` reads the training-only general prompts;
  ``n_prompts`` are drawn with ``random.Random(f"opd:{seed}")`` — an independent draw from the
  replay rows' (``replay:{seed}``), so OPD is not limited to prompts stage 1 already trained on.
  Each becomes one user message with no system message, so the tokenizer's template adds its own
  default, exactly as replay rows and IFEval render prompts (TRL applies the chat template with
  ``add_generation_prompt``).
- **Student**: an adapter folder is loaded as its dense base plus the adapter, kept trainable (see
  the config's docstring); the base goes through :func:`hat.train.sft.load_base`, so ``smollm2``
  (a GGUF) is dequantized for training exactly as in SFT. Any other spec loads like SFT's model and
  gets a new LoRA adapter from TRL (``peft_config``).
- **Teacher**: :func:`resolve_teacher`; loaded with ``load_base``, in eval mode with every
  parameter frozen (TRL computes its hidden states under ``no_grad`` and only the student's
  parameters reach the optimizer).
- **Outputs** (as ``hat train sft``): the final adapter/model and tokenizer in ``output_dir``, the
  adapter config naming its base as HAT's loader understands it (so ``hf:<output_dir>`` loads it and
  ``hat train export`` ships it), ``opd_config.yaml``, ``trainer_state.json``, ``opd_result.json``
  and ``opd_log.jsonl``: one JSON object per logged step (``step``, ``loss`` = the mean per-token
  reverse KL, ``entropy``, completion lengths, ``grad_norm``, ``learning_rate``, ``step_time``).
- **Resume**: from the newest *complete* checkpoint (``resume_from_checkpoint="latest"``), with the
  same rules as SFT; log lines of steps after that checkpoint (a crashed run's) are dropped first.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from hat.errors import HatError
from hat.harness.state import canonical_json, sha256_text
from hat.train.checkpoints import adapter_base_callback, fix_adapter_base, resume_checkpoint, trim_step_log
from hat.train.opd_config import HatOPDConfig
from hat.train.replay import load_prompts
from hat.train.sft import load_base
from hat.train.trl_configs import lora_config

__all__ = ["OPDResult", "OPDSetup", "build_opd_trainer", "choose_prompts", "resolve_teacher", "train_opd"]

logger = logging.getLogger(__name__)
CONFIG_FILE = "opd_config.yaml"
RESULT_FILE = "opd_result.json"
LOG_FILE = "opd_log.jsonl"


@dataclass(frozen=True)
class OPDResult:
    """What a run produced. ``base``: the model the output adapter applies to (the student itself
    for a full fine-tune); ``adapter``: the output is a LoRA adapter (else a full checkpoint)."""

    output_dir: str
    student: str
    teacher: str
    base: str
    adapter: bool
    global_step: int
    train_loss: float
    n_prompts: int
    prompts_hash: str
    wall_s: float


@dataclass
class OPDSetup:
    """What :func:`build_opd_trainer` built: the TRL ``trainer`` (``trainer.teacher_model`` is the
    teacher), the ``prompts`` it samples from, the teacher spec and the output adapter's base."""

    trainer: Any
    prompts: list[dict[str, Any]]
    teacher: str
    base_ref: str


# -- prompts --------------------------------------------------------------------------------------
def choose_prompts(prompts: Sequence[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` prompts drawn with ``seed`` (in draw order), or an error naming how many there are."""
    if len(prompts) < n:
        raise HatError(f"n_prompts={n} but the prompts file has {len(prompts)}; lower --n-prompts")
    return random.Random(f"opd:{seed}").sample(list(prompts), n)


def _prompt_dataset(prompts: Sequence[dict[str, Any]]) -> Any:
    from datasets import Dataset

    return Dataset.from_list(
        [{"id": str(p["id"]), "prompt": [{"role": "user", "content": str(p["prompt"])}]} for p in prompts]
    )


# -- models ---------------------------------------------------------------------------------------
def _adapter_base(folder: Path) -> str:
    """The base of an adapter folder as a spec that works from anywhere (relative paths are read
    against the adapter folder, as HAT's loader does)."""
    base = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base:
        raise HatError(f"{folder}/adapter_config.json has no base_model_name_or_path; pass the base as --teacher")
    path = Path(base).expanduser()
    if base == "smollm2" or path.is_absolute():
        return str(base)
    for candidate in (path, folder / path):
        if candidate.exists():
            return str(candidate.resolve())
    return str(base)


def resolve_teacher(student: str, teacher: str = "") -> str:
    """``teacher`` if given; else the student's base model: an adapter's base, the ``model`` of a
    ``hat train sft`` folder's ``sft_config.yaml`` or the ``teacher`` of an ``opd_config.yaml``;
    a bare spec (``smollm2``) is its own base."""
    if teacher:
        return teacher[3:] if teacher.startswith("hf:") else teacher
    folder = Path(student).expanduser()
    if (folder / "adapter_config.json").is_file():
        return _adapter_base(folder)
    for name, key in (("sft_config.yaml", "model"), (CONFIG_FILE, "teacher")):
        if (folder / name).is_file():
            recorded = (yaml.safe_load((folder / name).read_text(encoding="utf-8")) or {}).get(key)
            if recorded:
                return str(recorded)
    if folder.is_dir():
        raise HatError(f"cannot tell the base model of {student} (no adapter or training config); pass --teacher")
    return student


def _load_student(config: HatOPDConfig) -> tuple[Any, Any, str, Any]:
    """``(model, tokenizer, base_ref, peft_config)``: an adapter folder as its dense base + the
    adapter (trainable with ``use_lora``, merged without); anything else as SFT loads its model,
    with a new LoRA config for TRL when ``use_lora``."""
    folder = Path(config.model).expanduser()
    if not (folder / "adapter_config.json").is_file():
        model, tokenizer, ref = load_base(config.model)
        return model, tokenizer, ref, lora_config(config) if config.use_lora else None
    from peft import PeftModel

    base_ref = _adapter_base(folder)
    model, tokenizer, _ = load_base(base_ref)
    if any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = PeftModel.from_pretrained(model, str(folder), is_trainable=config.use_lora)
    if not config.use_lora:  # PEFT froze the base; a full fine-tune trains every weight of the merged model
        return model.merge_and_unload().requires_grad_(True), tokenizer, str(folder.resolve()), None
    return model, tokenizer, base_ref, None


def _load_teacher(spec: str) -> Any:
    model, _, _ = load_base(spec)
    model.requires_grad_(False)
    return model.eval()


# -- the per-step log -----------------------------------------------------------------------------
def _log_callback(path: Path) -> Any:
    from transformers import TrainerCallback

    class _JsonlLog(TrainerCallback):  # type: ignore[misc]
        """Appends every Trainer log record, with its step, to ``opd_log.jsonl`` (one flushed line)."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and state.is_world_process_zero:
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": int(state.global_step), **logs}, sort_keys=True) + "\n")

    return _JsonlLog()


# -- training -------------------------------------------------------------------------------------
def build_opd_trainer(
    config: HatOPDConfig, prompts: Sequence[dict[str, Any]] | None = None, *, callbacks: Sequence[Any] = ()
) -> OPDSetup:
    """The TRL ``DistillationTrainer`` for ``config`` (prompts from ``config.prompts`` unless given),
    not yet trained."""
    from trl import DistillationTrainer

    if not config.model:
        raise HatError("give the student: --model <hat train sft output folder> (or model in --config)")
    chosen = choose_prompts(load_prompts(config.prompts) if prompts is None else prompts, config.n_prompts, config.seed)
    teacher = resolve_teacher(config.model, config.teacher)
    student, tokenizer, base_ref, peft_config = _load_student(config)
    adapter = config.use_lora
    trainer = DistillationTrainer(
        model=student,
        teacher_model=_load_teacher(teacher),
        args=config,
        train_dataset=_prompt_dataset(chosen),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[*callbacks, *([adapter_base_callback(base_ref)] if adapter else [])],
    )
    return OPDSetup(trainer, chosen, teacher, base_ref)


def train_opd(
    config: HatOPDConfig, prompts: Sequence[dict[str, Any]] | None = None, *, callbacks: Sequence[Any] = ()
) -> OPDResult:
    """Train, then save the final adapter/model + tokenizer to ``output_dir`` with the resolved config
    (``opd_config.yaml``), the trainer state (``trainer_state.json``), the per-step log
    (``opd_log.jsonl``) and the result (``opd_result.json``); return the result."""
    if not config.output_dir:
        raise HatError("HatOPDConfig.output_dir is required")
    start = time.perf_counter()
    resume = resume_checkpoint(config)  # the same rules as SFT
    if config.torch_threads:
        import torch

        torch.set_num_threads(config.torch_threads)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    trim_step_log(out / LOG_FILE, resume)
    setup = build_opd_trainer(config, prompts, callbacks=[*callbacks, _log_callback(out / LOG_FILE)])
    config.save_yaml(out / CONFIG_FILE)
    output = setup.trainer.train(resume_from_checkpoint=resume)
    setup.trainer.save_model(str(out))
    setup.trainer.save_state()
    setup.trainer.processing_class.save_pretrained(str(out))
    if config.use_lora:
        fix_adapter_base(out, setup.base_ref)
    result = OPDResult(
        output_dir=str(out),
        student=config.model,
        teacher=setup.teacher,
        base=setup.base_ref,
        adapter=config.use_lora,
        global_step=int(setup.trainer.state.global_step),
        train_loss=float(output.training_loss),
        n_prompts=len(setup.prompts),
        prompts_hash=sha256_text("".join(canonical_json(p) + "\n" for p in setup.prompts)),
        wall_s=round(time.perf_counter() - start, 2),
    )
    (out / RESULT_FILE).write_text(json.dumps(asdict(result), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return result
