"""Convert a PEFT LoRA adapter of a Llama-architecture model to llama.cpp's GGUF LoRA format.

llama.cpp applies LoRA adapters at run time (``llamacpp:<base.gguf>?lora=<adapter.gguf>``), on top
of the quantised base weights. Its own converter (``convert_lora_to_gguf.py``) lives in the
llama.cpp repository, not in the ``llama-cpp-python`` wheel, and needs the base model as a Hugging
Face folder, which the bundled SmolLM2 is not (it ships only as a GGUF). For the Llama family the
conversion is small enough to do here with the ``gguf`` package (already a dependency of the
transformers GGUF loader), following that script:

- metadata ``general.architecture`` (from the base GGUF), ``general.type = adapter``,
  ``adapter.type = lora``, ``adapter.lora.alpha`` (llama.cpp scales by ``alpha / r``, as PEFT does);
- for each adapted linear layer, tensors ``<gguf base name>.lora_a`` (``r × in``) and
  ``.lora_b`` (``out × r``), float32;
- **the q/k row permutation**: HF Llama checkpoints store ``q_proj``/``k_proj`` rows in the
  rotary-half order and GGUF in the interleaved order (transformers un-permutes them when it loads
  a GGUF). ``ΔW = B·A`` permutes with its rows, so only ``lora_b`` of ``q_proj`` (``n_head``) and
  ``k_proj`` (``n_head_kv``) is permuted — llama.cpp's ``LlamaModel.permute``.

Adapters with ``modules_to_save``, DoRA, bias or rank/alpha patterns are rejected with a clear
error rather than converted wrongly.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from hat.errors import HatError

__all__ = ["convert_peft_lora_to_gguf", "gguf_lora_for"]

_HF_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_KEY = re.compile(r"^(?:base_model\.model\.)?model\.layers\.(\d+)\.(\w+\.\w+)\.lora_([AB])\.weight$")


def _permute(rows: Any, n_head: int) -> Any:
    """llama.cpp's ``LlamaModel.permute`` on the output rows (HF rotary-half → GGUF interleaved)."""
    return rows.reshape(n_head, 2, rows.shape[0] // n_head // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def _base_metadata(base_gguf: Path) -> tuple[str, int, int]:
    from gguf import GGUFReader

    reader = GGUFReader(str(base_gguf))

    def value(key: str) -> Any:
        field = reader.fields.get(key)
        if field is None:
            raise HatError(f"{base_gguf} has no {key!r}; is it a Llama-family GGUF?")
        return field.contents()

    arch = str(value("general.architecture"))
    return arch, int(value(f"{arch}.attention.head_count")), int(value(f"{arch}.attention.head_count_kv"))


def convert_peft_lora_to_gguf(adapter_dir: str | Path, base_gguf: str | Path, out: str | Path) -> Path:
    """Write ``adapter_dir``'s LoRA (``adapter_model.safetensors``) as a GGUF LoRA for ``base_gguf``."""
    import numpy as np
    from gguf import GGUFWriter
    from safetensors.numpy import load_file

    adapter_dir, base_gguf, out = Path(adapter_dir), Path(base_gguf), Path(out)
    config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    if config.get("peft_type") != "LORA":
        raise HatError(f"{adapter_dir}: peft_type {config.get('peft_type')!r} is not LORA")
    unsupported = [
        key
        for key in ("modules_to_save", "use_dora", "rank_pattern", "alpha_pattern", "layers_to_transform")
        if config.get(key)
    ]
    if config.get("bias", "none") != "none" or unsupported:
        raise HatError(f"{adapter_dir}: cannot convert LoRA options {unsupported or ['bias']} to GGUF; plain LoRA only")
    arch, n_head, n_head_kv = _base_metadata(base_gguf)
    if arch != "llama":
        raise HatError(f"{base_gguf}: architecture {arch!r}; only 'llama' adapters are converted here")

    state = load_file(str(adapter_dir / "adapter_model.safetensors"))
    pairs: dict[tuple[int, str], dict[str, Any]] = {}
    for key, tensor in state.items():
        match = _KEY.match(key)
        if match is None or match.group(2) not in _HF_TO_GGUF:
            raise HatError(f"{adapter_dir}: unexpected adapter tensor {key!r}; only Llama linear layers convert")
        pairs.setdefault((int(match.group(1)), match.group(2)), {})[match.group(3)] = tensor.astype(np.float32)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    writer = GGUFWriter(str(tmp), arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(config["lora_alpha"]))
    for (layer, module), ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise HatError(f"{adapter_dir}: layer {layer} {module} lacks lora_A or lora_B")
        lora_b = ab["B"]
        if module == "self_attn.q_proj":
            lora_b = _permute(lora_b, n_head)
        elif module == "self_attn.k_proj":
            lora_b = _permute(lora_b, n_head_kv)
        name = f"blk.{layer}.{_HF_TO_GGUF[module]}.weight"
        writer.add_tensor(f"{name}.lora_a", np.ascontiguousarray(ab["A"]))
        writer.add_tensor(f"{name}.lora_b", np.ascontiguousarray(lora_b))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out


def gguf_lora_for(adapter_dir: str | Path, base_gguf: str | Path, cache_dir: str | Path | None = None) -> Path:
    """The GGUF LoRA of ``adapter_dir``, converted once into a cache keyed by the adapter's bytes.

    Default cache: ``$HAT_CACHE`` or ``~/.cache/hat`` / ``gguf-lora``."""
    adapter_dir = Path(adapter_dir)
    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        path = adapter_dir / name
        if not path.is_file():
            raise HatError(f"{adapter_dir} is not a PEFT adapter folder: {name} is missing")
        digest.update(path.read_bytes())
    root = Path(cache_dir or os.environ.get("HAT_CACHE") or Path.home() / ".cache" / "hat") / "gguf-lora"
    target = root / f"{adapter_dir.name}-{digest.hexdigest()[:16]}.gguf"
    if not target.is_file():
        convert_peft_lora_to_gguf(adapter_dir, base_gguf, target)
    return target
