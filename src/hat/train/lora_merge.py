"""Sample from a LoRA policy at the cost of a plain model: its adapters merged into swapped weights.

Why. PEFT's LoRA ``Linear`` computes ``W·x + s·B(A·x)``: two extra small matmuls, a scale and an
add per adapted layer and token. At a rollout's decode step (a few sequences, one token each) those
launches cost as much as the base matmul itself — on SmolLM2 with ``all-linear`` rank-16 adapters,
py-spy puts the adapter at ~25 % of a decode step (reports/hat.md § RL step cost). An inference
engine samples from the merged weights ``W + s·B·A`` instead (TRL's vLLM path merges the adapter and
pushes the weights); :func:`merged_lora` does the same in place for the duration of a ``with``:

- each adapted ``nn.Linear``'s weight *data* is swapped for a new tensor ``W + ΔW`` (PEFT's own
  :meth:`get_delta_weight`, so scaling and ``fan_in_fan_out`` are PEFT's), and the adapters are
  disabled, so the forward is the base layer's one matmul;
- on exit the original tensors are put back — by reference, not by subtracting ``ΔW`` again, so the
  frozen weights come back bit for bit (PEFT's ``merge_adapter``/``unmerge_adapter`` round trip
  drifts by float rounding every time) — and the adapters are enabled as they were.

The sampled distribution equals the adapter's up to float rounding of the merge (the same order as
the matmul's own); the log-probabilities that enter the loss are recomputed by the training forward
through the adapter, as always. Memory: one extra copy of the adapted weights while sampling.
Models without a plain LoRA adapter on ``nn.Linear`` layers (other tuners, variants such as DoRA,
several active adapters) are left as they are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["mergeable_lora_layers", "merged_lora"]


def mergeable_lora_layers(model: Any) -> list[tuple[Any, str]] | None:
    """``[(layer, adapter name)]`` for every LoRA layer of ``model`` when all of them are plain
    single-adapter LoRA over ``nn.Linear`` (what :func:`merged_lora` can merge exactly); None if
    there is none or any is not."""
    try:
        from peft.tuners.lora import LoraLayer
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:  # pragma: no cover - peft is a training dependency
        return None
    found: list[tuple[Any, str]] = []
    for module in model.modules():
        if not isinstance(module, LoraLayer):
            continue
        layer: Any = module
        active = [a for a in layer.active_adapters if a in layer.lora_A]
        plain = (
            isinstance(layer, LoraLinear)
            and isinstance(layer.base_layer, torch.nn.Linear)
            and len(active) == 1
            and not getattr(layer, "lora_variant", None)
            and not layer.merged
            and not layer.disable_adapters
            and layer.lora_A[active[0]].bias is None
            and layer.lora_B[active[0]].bias is None
        )
        if not plain:
            return None
        found.append((layer, active[0]))
    return found or None


@contextlib.contextmanager
def merged_lora(model: Any) -> Iterator[bool]:
    """Within the block, ``model``'s LoRA layers run as single matmuls over ``W + ΔW`` (the module
    docstring); yields whether it merged. Gradients are off for the merge; the block is for
    inference (the swapped weights are not parameters an optimiser knows)."""
    layers = mergeable_lora_layers(model)
    if layers is None:
        yield False
        return
    saved: list[tuple[Any, Any]] = []
    try:
        with torch.no_grad():
            for layer, name in layers:
                weight = layer.base_layer.weight
                delta = layer.get_delta_weight(name)
                saved.append((weight, weight.data))
                weight.data = weight.data + delta.to(weight.dtype)
                layer._disable_adapters = True  # PEFT's flag; set directly so requires_grad is untouched
        yield True
    finally:
        for (weight, data), (layer, _) in zip(saved, layers, strict=False):
            weight.data = data
            layer._disable_adapters = False
