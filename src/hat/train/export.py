"""Export a trained PEFT adapter as a small, self-describing folder (what ``smollm2-hat`` ships as).

``hat train sft`` leaves an output folder with checkpoints, optimizer state and float32 weights.
What a user loads needs much less: ``adapter_config.json`` (base ``smollm2`` or a path),
``adapter_model.safetensors`` (cast to float16 by default: half the size, and PEFT casts back
into the base model's dtype when it loads), the resolved training config and result, the loss log,
and a model card (``README.md``, Hugging Face style front matter) naming the data and the
training run. Evaluation figures are not invented here; pass ``card_notes`` with measured ones.

``gguf=<type>`` also writes the adapter merged into its base model as one GGUF for llama.cpp
(:mod:`hat.models.gguf_merge`: ``W + scale·B·A`` in the base's GGUF, the adapted tensors in
``<type>``, q8_0 by default), so a deployment serves it with ``llamacpp:<file>`` and pays nothing
per token for the adapter. It is merged from the exported (cast) weights, so it is exactly what
the folder holds. The base must be a GGUF: ``smollm2`` (the bundled one) or a ``.gguf`` path.
The shipped ``smollm2-hat`` does not carry this file (it would add ~140 MB to the package): its
merged GGUF is built on first use into ``~/.cache/hat/gguf-merged``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hat.errors import HatError
from hat.train.sft_trainer import STEPS_FILE

__all__ = ["export_adapter", "export_merged_gguf"]

_KEEP = ("adapter_config.json", "sft_config.yaml", "sft_result.json", "trainer_state.json", STEPS_FILE)
_DTYPES = ("float16", "bfloat16", "float32")


def export_adapter(
    src: str | Path, dst: str | Path, *, dtype: str = "float16", card_notes: str = "", gguf: str | None = None
) -> Path:
    """Copy the adapter in ``src`` (a ``hat train sft --lora`` output) to ``dst`` with weights in
    ``dtype``; replaces ``dst``'s files, keeps nothing else from ``src``. ``gguf``: also write the
    merged GGUF in that weight type (:func:`export_merged_gguf`)."""
    import torch
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    if not (src / "adapter_config.json").is_file() or not (src / "adapter_model.safetensors").is_file():
        raise HatError(f"{src} is not a PEFT adapter folder (train with --lora; full fine-tunes are not exported)")
    if dtype not in _DTYPES:
        raise HatError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    dst.mkdir(parents=True, exist_ok=True)
    for name in _KEEP:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
        else:  # a file left by an earlier export would describe another training
            (dst / name).unlink(missing_ok=True)
    weights = load_file(src / "adapter_model.safetensors")
    weights = {k: v.to(getattr(torch, dtype)).contiguous() for k, v in weights.items()}
    save_file(weights, dst / "adapter_model.safetensors", metadata={"format": "pt"})
    merged = export_merged_gguf(dst, dst, quant=gguf) if gguf is not None else None
    (dst / "README.md").write_text(_card(src, dst, dtype, card_notes, merged), encoding="utf-8")
    return dst


def export_merged_gguf(adapter_dir: str | Path, dst: str | Path, *, quant: str = "q8_0") -> Path:
    """Write ``<dst>/<adapter folder name>-<quant>.gguf``: the adapter in ``adapter_dir`` merged into
    its base GGUF (see the module docstring); returns the file."""
    from hat.models.gguf_merge import merge_lora_into_gguf

    adapter_dir, dst = Path(adapter_dir), Path(dst)
    return merge_lora_into_gguf(
        adapter_dir, _base_gguf(adapter_dir), dst / f"{adapter_dir.name}-{quant}.gguf", quant=quant
    )


def _base_gguf(adapter_dir: Path) -> Path:
    """The GGUF the adapter's ``base_model_name_or_path`` names (relative paths: to the adapter folder)."""
    from hat.models.transformers_backend import smollm2_gguf_path

    config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    base = str(config.get("base_model_name_or_path") or "")
    if base == "smollm2":
        return smollm2_gguf_path()
    for path in (Path(base).expanduser(), adapter_dir / base):
        if base and path.suffix == ".gguf" and path.is_file():
            return path
    raise HatError(
        f"{adapter_dir}: base {base!r} is not a GGUF file, so the merged GGUF cannot be written here; convert "
        "the base with llama.cpp's convert_hf_to_gguf.py and point base_model_name_or_path at the .gguf"
    )


def _card(src: Path, dst: Path, dtype: str, notes: str, merged: Path | None = None) -> str:
    config = json.loads((src / "adapter_config.json").read_text(encoding="utf-8"))
    result_file = src / "sft_result.json"
    result = json.loads(result_file.read_text(encoding="utf-8")) if result_file.is_file() else {}
    base = config.get("base_model_name_or_path", "?")
    modules = config.get("target_modules") or []
    lines = [
        "---",
        "library_name: peft",
        "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" if base == "smollm2" else f"base_model: {base}",
        "tags: [hat, lora, sft, trl]",
        "---",
        "",
        f"# {dst.name}",
        "",
        f"A LoRA adapter (r = {config.get('r')}, alpha = {config.get('lora_alpha')}, modules: "
        f"{', '.join(sorted(modules)) if isinstance(modules, list) else modules}) for "
        + ("the bundled SmolLM2-135M-Instruct (`smollm2`)" if base == "smollm2" else f"`{base}`")
        + f", trained with `hat train sft`; weights stored as {dtype}.",
        "",
    ]
    if result:
        logs = [name for name in ("trainer_state.json", STEPS_FILE) if (dst / name).is_file()]
        # steps_wall_s sums every step across resumed sessions; wall_s is the last session's process only
        seconds = result.get("steps_wall_s", result.get("wall_s"))
        lines += [
            f"Training: {result.get('n_examples')} rows, {result.get('global_step')} optimizer steps, "
            f"final mean training loss {result.get('train_loss', 0):.3f}, {seconds} s of steps "
            f"(examples hash `{str(result.get('examples_hash', ''))[:16]}`). The full resolved config is in "
            "`sft_config.yaml`" + (f", the loss log in {' and '.join(f'`{name}`' for name in logs)}." if logs else "."),
            "",
        ]
    lines += [
        "Load it with `hat run --model hf:<this folder>` (transformers + PEFT, merged) or, with llama.cpp, "
        "`--model 'llamacpp:smollm2?lora=<this folder>'` (merged into the base once, cached).",
        "",
    ]
    if merged is not None:
        lines += [
            f"`{merged.name}` is this adapter merged into its base model, for llama.cpp with no run-time "
            f"adapter cost: `--model llamacpp:<this folder>/{merged.name}`.",
            "",
        ]
    if notes:
        lines += [notes.strip(), ""]
    return "\n".join(lines)
