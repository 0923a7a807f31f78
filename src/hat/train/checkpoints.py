"""Checkpoints and adapters of every training stage (SFT, OPD, RL): which checkpoint a run resumes
from, and how a saved LoRA adapter names its base.

Why one module: the three stages save through the transformers ``Trainer`` and must follow the same
rules, so that ``--resume`` means the same thing for ``hat train sft``, ``opd`` and ``rl``, and so
that every adapter they write (final or ``checkpoint-N``) loads with ``hf:<folder>`` in every HAT
command.

- **Resume** (:func:`resume_checkpoint`): ``latest`` is the newest *complete* ``checkpoint-N``; a
  half-written newer one (a crash mid-save) is skipped with a warning. The ``Trainer`` writes
  ``trainer_state.json`` last, so a checkpoint is complete when that file parses and a weights file
  is there (:func:`checkpoint_problem`).
- **Adapter base** (:func:`fix_adapter_base`): PEFT writes the loaded model's internal path into
  ``adapter_config.json``; HAT rewrites it to the base as its loader understands it (``smollm2``,
  or the base folder's absolute path), in the output folder and, through
  :func:`adapter_base_callback`, in every checkpoint.
- **Step logs** (:func:`trim_step_log`): a stage's own JSONL log of steps (OPD's ``opd_log.jsonl``,
  RL's ``rl_diagnostics.jsonl``) keeps, on resume, only the steps up to the resumed checkpoint's
  (the later ones, a crashed run's, are redone); a fresh run starts it empty.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Protocol

from hat.errors import HatError

__all__ = [
    "adapter_base_callback",
    "checkpoint_problem",
    "fix_adapter_base",
    "latest_complete_checkpoint",
    "resume_checkpoint",
    "trim_step_log",
]

logger = logging.getLogger(__name__)

_WEIGHT_FILES = (
    "adapter_model.safetensors",
    "adapter_model.bin",
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


class Resumable(Protocol):
    """What :func:`resume_checkpoint` reads of a training config (any stage's)."""

    @property
    def resume_from_checkpoint(self) -> str | None: ...

    @property
    def output_dir(self) -> str | None: ...


def checkpoint_problem(folder: Path) -> str | None:
    """Why ``folder`` is not a complete checkpoint, or None. The transformers ``Trainer`` writes
    ``trainer_state.json`` last (after weights, optimizer, scheduler and RNG state), so a checkpoint
    is complete when that file parses and a weights file is there. The packed trainer renames whole
    checkpoints into place; TRL's trainers write in place, and a crash mid-save leaves a newest
    ``checkpoint-N`` without these."""
    try:
        json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no readable trainer_state.json"
    if not any((folder / name).is_file() for name in _WEIGHT_FILES):
        return "no model or adapter weights"
    return None


def latest_complete_checkpoint(output_dir: str | Path) -> tuple[Path | None, list[str]]:
    """The newest complete ``checkpoint-N`` in ``output_dir`` and the newer ones skipped (why)."""
    folder = Path(output_dir)
    found = sorted(
        (p for p in folder.glob("checkpoint-*") if p.is_dir() and p.name.split("-", 1)[1].isdigit()),
        key=lambda p: int(p.name.split("-", 1)[1]),
        reverse=True,
    )
    skipped: list[str] = []
    for path in found:
        problem = checkpoint_problem(path)
        if problem is None:
            return path, skipped
        skipped.append(f"{path.name} ({problem})")
    return None, skipped


def resume_checkpoint(config: Resumable) -> str | None:
    """The checkpoint to resume from (None: a fresh run): for ``latest`` the newest *complete* one
    (a half-written newer one is skipped with a warning), or the named folder, which must be complete."""
    value = config.resume_from_checkpoint
    if value in (None, "", "false", "False"):
        return None
    if value in ("latest", "last", "true", "True"):
        latest, skipped = latest_complete_checkpoint(config.output_dir or "")
        if skipped:
            logger.warning("--resume skips incomplete checkpoints: %s", ", ".join(skipped))
        if latest is None and not skipped:
            raise HatError(f"--resume: no checkpoint-* folder in {config.output_dir}; train without --resume first")
        if latest is None:
            raise HatError(
                f"--resume: no complete checkpoint in {config.output_dir} (incomplete: {', '.join(skipped)}); "
                "delete them and train without --resume"
            )
        return str(latest)
    if not Path(value).is_dir():
        raise HatError(f"resume_from_checkpoint: {value} is not a checkpoint folder")
    problem = checkpoint_problem(Path(value))
    if problem is not None:
        raise HatError(f"resume_from_checkpoint: {value} is incomplete ({problem}); pick an earlier checkpoint")
    return value


def fix_adapter_base(folder: Path, base_ref: str) -> None:
    """Point ``adapter_config.json`` at ``base_ref`` (PEFT writes the loaded model's internal path);
    a folder without an adapter config (a full checkpoint) is left alone."""
    path = folder / "adapter_config.json"
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        data["base_model_name_or_path"] = base_ref
        path.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")


def adapter_base_callback(base_ref: str) -> Any:
    """A ``Trainer`` callback that applies :func:`fix_adapter_base` to every checkpoint it saves."""
    from transformers import TrainerCallback

    class _FixCheckpointBase(TrainerCallback):  # type: ignore[misc]
        """Every saved checkpoint's adapter names the base as HAT's loader understands it."""

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            fix_adapter_base(Path(args.output_dir) / f"checkpoint-{state.global_step}", base_ref)

    return _FixCheckpointBase()


def trim_step_log(path: Path, resume: str | None) -> None:
    """Keep the lines of ``path`` (JSON objects with a ``step``) up to the step of the checkpoint
    ``resume`` (every later step is redone after it); without ``resume`` the log is removed, so a
    fresh run starts an empty one. A torn line (a crash mid-write) is dropped."""
    if resume is None or not path.is_file():
        path.unlink(missing_ok=True)
        return
    step = int(json.loads((Path(resume) / "trainer_state.json").read_text(encoding="utf-8"))["global_step"])
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if int(record.get("step", 0)) <= step:
            kept.append(line + "\n")
    path.write_text("".join(kept), encoding="utf-8")
