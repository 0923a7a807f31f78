"""Merge a PEFT LoRA adapter into a GGUF base model: one GGUF file, no LoRA left to apply at run time.

llama.cpp can apply a LoRA at run time (``llamacpp:<base.gguf>?lora=<adapter.gguf>``), but then
every adapted matmul of every token also computes ``scale·(x·A)·B``: two more small matmuls per
projection and layer, on a model whose decode is dominated by per-operation overhead. Merged, the
adapter costs nothing: ``W' = W + scale·B·A`` once, at export time. This is what ``smollm2-hat``
runs on llama.cpp (:func:`merged_gguf_for`, cached) and what ``hat train export --gguf`` writes.

Why the merge happens in GGUF space and not with PEFT's ``merge_and_unload`` followed by an HF→GGUF
conversion: the bundled base exists only as a GGUF, and going back from transformers' de-quantised
model needs llama.cpp's ``convert_hf_to_gguf.py`` (not in the ``llama-cpp-python`` wheel) and a
re-derivation of the tokenizer and chat-template metadata. Here the base's metadata and every tensor
the adapter does not touch are copied byte for byte, and each adapted tensor is

    de-quantised base weight + scale · lora_b @ lora_a        (scale = alpha / r, or alpha / √r with rsLoRA)

with ``lora_a``/``lora_b`` taken from :func:`hat.models.gguf_lora.convert_peft_lora_to_gguf` - the
same q/k row permutation llama.cpp's runtime LoRA gets. That is PEFT's merge arithmetic; the tests
check the merged file's greedy tokens on llama.cpp against PEFT on transformers.

Weight type of the adapted tensors (``quant``): the LoRA update is small next to a 4-bit
quantisation step, so re-quantising a merged Q4 base to Q4 would round much of the adapter away.
The default is ``q8_0`` (a 16× finer grid; ~1.5× the bundled Q4_1 file); ``f16``/``bf16``/``f32`` keep
it exactly up to float rounding; ``q4_1``/``q4_0``/``q5_0``/``q5_1`` are available for size. All are
written with the ``gguf`` package's own quantisers (numpy), so no llama.cpp tool is needed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from hat.errors import HatError

__all__ = ["DEFAULT_MERGE_QUANT", "MERGE_QUANTS", "merge_lora_into_gguf", "merged_gguf_for"]

MERGE_QUANTS = ("q8_0", "f16", "bf16", "f32", "q5_1", "q5_0", "q4_1", "q4_0")
"""Weight types :func:`merge_lora_into_gguf` writes the adapted tensors in (``gguf`` numpy quantisers)."""
DEFAULT_MERGE_QUANT = "q8_0"
_FORMAT = "1"  # bump when the merged bytes for the same inputs change: invalidates the cache


def _ggml_type(quant: str) -> Any:
    from gguf import GGMLQuantizationType

    if quant not in MERGE_QUANTS:
        raise HatError(f"unknown merged weight type {quant!r}; choose one of {', '.join(MERGE_QUANTS)}")
    return GGMLQuantizationType[quant.upper()]


def _file_type(quant: str) -> int:
    from gguf import LlamaFileType

    return int(LlamaFileType.ALL_F32 if quant == "f32" else LlamaFileType[f"MOSTLY_{quant.upper()}"])


def _lora_scale(adapter_dir: Path, alpha: float, rank: int) -> float:
    config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    return alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)


def _lora_deltas(adapter_dir: Path, base_gguf: Path, scale: float) -> dict[str, Any]:
    """``{gguf tensor name: ΔW (out × in, float32)}`` of the adapter, in GGUF row order."""
    from gguf import GGUFReader

    from hat.models.gguf_lora import convert_peft_lora_to_gguf

    with tempfile.TemporaryDirectory(prefix="hat-merge-") as tmp:
        lora_file = convert_peft_lora_to_gguf(adapter_dir, base_gguf, Path(tmp) / "lora.gguf")
        reader = GGUFReader(str(lora_file))
        alpha = float(reader.fields["adapter.lora.alpha"].contents())
        tensors = {t.name: t.data.reshape(tuple(reversed([int(n) for n in t.shape]))) for t in reader.tensors}
        deltas = {}
        for name in sorted(n for n in tensors if n.endswith(".lora_a")):
            lora_a, lora_b = tensors[name], tensors[name[: -len("a")] + "b"]
            factor = scale * _lora_scale(adapter_dir, alpha, int(lora_a.shape[0]))
            deltas[name[: -len(".lora_a")]] = (factor * (lora_b @ lora_a)).astype("float32")
        del reader, tensors
    return deltas


def _copy_metadata(reader: Any, writer: Any, quant: str, provenance: dict[str, str]) -> None:
    from gguf import GGUFValueType

    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF.") or field.name == "general.file_type":
            continue  # the writer adds the first two; the file type is the merged one
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub_type)
    writer.add_file_type(_file_type(quant))
    for key, value in provenance.items():
        writer.add_string(f"hat.merge.{key}", value)


def merge_lora_into_gguf(
    adapter_dir: str | Path,
    base_gguf: str | Path,
    out: str | Path,
    *,
    quant: str = DEFAULT_MERGE_QUANT,
    scale: float = 1.0,
) -> Path:
    """Write ``base_gguf`` with ``adapter_dir``'s PEFT LoRA merged in to ``out`` (atomically).

    ``quant``: the weight type of the adapted tensors (:data:`MERGE_QUANTS`); the others keep the
    base's bytes. ``scale`` multiplies the adapter (llama.cpp's ``lora_scale``; 1.0 is PEFT's merge)."""
    import numpy as np
    from gguf import GGUFReader, GGUFWriter
    from gguf.quants import dequantize, quantize

    adapter_dir, base_gguf, out = Path(adapter_dir), Path(base_gguf), Path(out)
    qtype = _ggml_type(quant)
    deltas = _lora_deltas(adapter_dir, base_gguf, scale)
    reader = GGUFReader(str(base_gguf))
    names = {t.name for t in reader.tensors}
    if missing := sorted(set(deltas) - names):
        raise HatError(f"{adapter_dir} adapts tensors {missing[:3]} that {base_gguf} does not have; wrong base model?")
    arch = str(reader.fields["general.architecture"].contents())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    writer = GGUFWriter(str(tmp), arch)
    _copy_metadata(reader, writer, quant, {"adapter": adapter_dir.name, "quant": quant, "base": base_gguf.name})
    for tensor in reader.tensors:
        delta = deltas.get(tensor.name)
        if delta is None:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
            continue
        weight = dequantize(tensor.data, tensor.tensor_type).reshape(delta.shape) + delta
        writer.add_tensor(tensor.name, quantize(np.ascontiguousarray(weight, dtype=np.float32), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    del reader
    tmp.replace(out)
    return out


def _cache_key(adapter_dir: Path, base_gguf: Path, quant: str, scale: float) -> str:
    digest = hashlib.sha256(f"{_FORMAT}|{quant}|{scale!r}|".encode())
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        path = adapter_dir / name
        if not path.is_file():
            raise HatError(f"{adapter_dir} is not a PEFT adapter folder: {name} is missing")
        digest.update(path.read_bytes())
    stat = base_gguf.stat()  # the base by identity, not by hashing ~100 MB on every load
    digest.update(f"{base_gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def merged_gguf_for(
    adapter_dir: str | Path,
    base_gguf: str | Path,
    *,
    quant: str = DEFAULT_MERGE_QUANT,
    scale: float = 1.0,
    cache_dir: str | Path | None = None,
    on_build: Any = None,
) -> Path:
    """The merged GGUF of ``adapter_dir`` on ``base_gguf``, built once into a cache keyed by the
    adapter's bytes, the base file's identity, ``quant`` and ``scale``. ``on_build(path)`` is called
    before a build (it takes seconds: say so). Default cache: ``$HAT_CACHE`` or ``~/.cache/hat`` /
    ``gguf-merged``."""
    adapter_dir, base_gguf = Path(adapter_dir), Path(base_gguf)
    _ggml_type(quant)
    root = Path(cache_dir or os.environ.get("HAT_CACHE") or Path.home() / ".cache" / "hat") / "gguf-merged"
    target = root / f"{adapter_dir.name}-{_cache_key(adapter_dir, base_gguf, quant, scale)}-{quant}.gguf"
    if not target.is_file():
        if on_build is not None:
            on_build(target)
        merge_lora_into_gguf(adapter_dir, base_gguf, target, quant=quant, scale=scale)
    return target
