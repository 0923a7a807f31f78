"""``PackedSFTTrainer``: HAT's fast SFT path on the transformers :class:`~transformers.Trainer`.

Why a ``Trainer`` subclass and not TRL's ``SFTTrainer``: ``SFTTrainer`` prepares a dataset of rows
(tokenize, truncate, pad into ``input_ids``/``labels``) and computes the loss from full logits. The
fast path trains on :class:`~hat.train.packing.Pack` objects — a shared prefix plus continuations —
and runs the LM head only on trained positions (:func:`~hat.train.packing.pack_loss`), so the only
parts it needs are those of ``Trainer``: optimizer, schedule, logging, checkpoints and exact resume.
TRL's ``SFTConfig`` (through :class:`~hat.train.sft_config.HatSFTConfig`) still carries every
option, and ``packing=False`` keeps the plain ``SFTTrainer`` path (the old recipe, for comparison).

What it adds to ``Trainer``:

- ``compute_loss``: the token-mean cross-entropy of a batch of packs (bf16 autocast per config);
- **atomic checkpoints**: a checkpoint is written into a hidden staging folder and renamed into
  place (``os.replace``) only when complete, so ``checkpoint-N`` is whole or absent; a crash
  mid-save leaves only the staging folder, removed at the next save;
- ``steps.jsonl`` in the output folder: one line per optimizer step (``step``, ``wall_s``, ``rows``,
  ``tokens``, ``trained_tokens``, ``loss``) — the per-step wall times the reports quote. On resume,
  lines after the checkpoint's step are dropped first, so the file matches the run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback

from hat.train.lora_precision import lora_sum_in_float32
from hat.train.packing import Pack, autocast_dtype, pack_loss

__all__ = ["STEPS_FILE", "PackedSFTTrainer", "collate_packs"]

STEPS_FILE = "steps.jsonl"
_STAGING = ".staging-checkpoint"


def collate_packs(features: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch is a list of packs (dataset rows with ``prefix``/``continuations``/``labels``)."""
    return {"packs": [Pack.from_dict(f) for f in features]}


def _step(line: str) -> float:
    """A log line's step; a blank or torn line (a crash mid-write) sorts after every step."""
    try:
        return float(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return float("inf")


class _StepLog(TrainerCallback):  # type: ignore[misc]
    """Appends one JSON line per optimizer step to ``steps.jsonl`` (see the module docstring)."""

    def __init__(self, trainer: PackedSFTTrainer) -> None:
        self.trainer = trainer
        self.started = 0.0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = Path(args.output_dir) / STEPS_FILE
        if path.is_file():  # resume: keep only the steps the restored checkpoint has seen
            kept = [line for line in path.read_text(encoding="utf-8").splitlines() if _step(line) <= state.global_step]
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            os.replace(tmp, path)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.perf_counter()
        self.trainer.reset_counters()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        counters = dict(self.trainer.counters)
        loss_sum = counters.pop("loss_sum", 0.0)
        line = {
            "step": state.global_step,
            "wall_s": round(time.perf_counter() - self.started, 4),
            **counters,
            "loss": round(loss_sum / max(1, counters["trained_tokens"]), 6),
        }
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(args.output_dir) / STEPS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, sort_keys=True) + "\n")


class PackedSFTTrainer(Trainer):  # type: ignore[misc]
    """``Trainer`` over packs; ``args`` is a :class:`~hat.train.sft_config.HatSFTConfig`.
    ``base_ref``: how saved adapters name their base (see :mod:`hat.train.sft`)."""

    def __init__(self, *args: Any, base_ref: str = "", pad_id: int = 0, **kwargs: Any) -> None:
        kwargs.setdefault("data_collator", collate_packs)
        super().__init__(*args, **kwargs)
        self.base_ref = base_ref
        self.pad_id = pad_id
        device = str(self.args.device)
        self.autocast = autocast_dtype(device, getattr(self.args, "autocast_bf16", None))
        if self.autocast is not None and getattr(self.args, "lora_float32_sum", True):
            lora_sum_in_float32(self.model)
        self.attention: str = getattr(self.args, "packing_attention", "prefix-cache")
        # compute_loss returns each pack's token mean and ignores num_items_in_batch, so under
        # gradient accumulation the Trainer must divide by the number of micro-batches. Said here rather
        # than left to its guess (a PEFT forward takes **kwargs, which reads as "already scaled" as soon
        # as a batch carries labels to count).
        self.loss_is_scaled_for_ga = False
        self.counters: dict[str, Any] = {}
        self.reset_counters()
        self.add_callback(_StepLog(self))

    def reset_counters(self) -> None:
        self.counters = {"rows": 0, "tokens": 0, "trained_tokens": 0, "loss_sum": 0.0}

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        total: Any = 0.0
        count = 0
        for pack in inputs["packs"]:
            loss, n = pack_loss(model, pack, attention=self.attention, dtype=self.autocast, pad_id=self.pad_id)
            total = total + loss
            count += n
            self.counters["rows"] += pack.n_rows
            self.counters["tokens"] += pack.n_tokens
        self.counters["trained_tokens"] += count
        self.counters["loss_sum"] += float(total.detach()) if count else 0.0
        mean = total / max(count, 1)
        return (mean, {"loss": mean}) if return_outputs else mean

    # -- atomic checkpoints -----------------------------------------------------------------------
    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        run_dir = Path(self._get_output_dir(trial=trial))
        name = f"checkpoint-{self.state.global_step}"
        staging = run_dir / _STAGING
        shutil.rmtree(staging, ignore_errors=True)
        final_output = self.args.output_dir
        self.args.output_dir = str(staging)  # super() writes staging/checkpoint-N
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.output_dir = final_output
        written = staging / name
        if self.base_ref:
            from hat.train.checkpoints import fix_adapter_base

            fix_adapter_base(written, self.base_ref)
        target = run_dir / name
        if target.exists():
            shutil.rmtree(target)
        os.replace(written, target)
        shutil.rmtree(staging, ignore_errors=True)
        self._rotate(run_dir)

    def _rotate(self, run_dir: Path) -> None:
        limit = self.args.save_total_limit
        if not limit:
            return
        found = sorted(
            (p for p in run_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
            key=lambda p: int(p.name.split("-")[-1]),
        )
        for old in found[: max(0, len(found) - limit)]:
            shutil.rmtree(old, ignore_errors=True)
