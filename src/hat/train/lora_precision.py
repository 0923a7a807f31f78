"""LoRA under bf16 autocast without losing the adapter's update: the sum in the matmul's accumulator.

The problem. PEFT's LoRA ``Linear`` computes ``base_layer(x) + lora_B(lora_A(x)) * scaling``. Under
bf16 autocast the base output is already rounded to bf16 — a value *on* the bf16 grid — and a young
adapter's delta is far below one grid step (2⁻⁸ relative), so ``round(b + d) = b``: the delta is
lost, and it stays lost (a dead zone, not noise) for every output where it is below half a step.
The model does not see its own update; on SmolLM2 the bf16 loss curve lags float32's by about one
step (``benchmarks/bf16_lora_curve.py``, reports/stage1b.md §1).

The fix, two ways (:func:`lora_sum_in_float32` picks per layer):

- **fused** (dropout 0, one plain LoRA adapter — the training configs'): one bf16 matmul over the
  concatenation ``[x, A·x] @ [W, s·B]ᵀ``; the base product and the delta meet in the matmul's
  float32 accumulator and are rounded once, so the delta survives as it would in a merged weight
  (unbiased rounding of an off-grid sum). Memory and time as PEFT's bf16 path: the output stays
  bf16, the saved activations are ``[x, A·x]`` in bf16. A ``torch.autograd.Function`` whose
  backward computes only the adapter's gradients (``W`` is frozen) and the input's.
- **float32 output** (any other LoRA layer): a forward hook returns the base output in float32, so
  PEFT adds the delta in float32; correct, but the layer's output and what is saved from it are
  float32 (+22 % step time, +1.7 GB at a 5,423-token pack; ``benchmarks/sft_peak_memory.py``).

Outside autocast, or for a merged/disabled adapter, each layer runs PEFT's own forward.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["lora_sum_in_float32"]


class _FusedLoraLinear(torch.autograd.Function):
    """``y = [x, x·Aᵀ] @ [W, s·B]ᵀ + bias`` in ``dtype`` with float32 accumulation; gradients for
    ``x``, ``A`` and ``B`` only (the base weight and bias are frozen)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: Any, weight: Any, bias: Any, lora_a: Any, lora_b: Any, scaling: float, dtype: Any
    ) -> Any:
        with torch.autocast(device_type=x.device.type, enabled=False):
            n_in, rank = weight.shape[1], lora_a.shape[0]
            flat = x.reshape(-1, n_in)
            xin = torch.empty(flat.shape[0], n_in + rank, dtype=dtype, device=x.device)
            xin[:, :n_in] = flat
            a = lora_a.to(dtype)
            xin[:, n_in:] = xin[:, :n_in] @ a.t()
            wcat = torch.cat([weight.to(dtype), (lora_b * scaling).to(dtype)], dim=1)
            y = torch.nn.functional.linear(xin, wcat, None if bias is None else bias.to(dtype))
        ctx.save_for_backward(xin, wcat, a)
        ctx.scaling, ctx.n_in, ctx.x_dtype, ctx.x_shape = scaling, n_in, x.dtype, x.shape
        ctx.a_dtype, ctx.b_dtype = lora_a.dtype, lora_b.dtype
        return y.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:  # type: ignore[override]
        xin, wcat, a = ctx.saved_tensors
        n_in = ctx.n_in
        with torch.autocast(device_type=grad.device.type, enabled=False):
            g = grad.reshape(-1, wcat.shape[0]).to(xin.dtype)
            gin = g @ wcat  # [tokens, in + r]: the input's gradient through W and the adapter's through s·B
            gh = gin[:, n_in:]
            grad_x = grad_a = grad_b = None
            if ctx.needs_input_grad[0]:
                grad_x = (gin[:, :n_in].to(ctx.x_dtype) + (gh @ a).to(ctx.x_dtype)).reshape(ctx.x_shape)
            if ctx.needs_input_grad[3]:
                grad_a = (gh.t() @ xin[:, :n_in]).to(ctx.a_dtype)
            if ctx.needs_input_grad[4]:
                grad_b = ((g.t() @ xin[:, n_in:]).float() * ctx.scaling).to(ctx.b_dtype)
        return grad_x, None, None, grad_a, grad_b, None, None


def _fusable(module: Any) -> bool:
    """A plain single-adapter LoRA ``Linear`` over an ``nn.Linear`` with dropout 0 and a frozen base."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    if not isinstance(module, LoraLinear) or not isinstance(module.base_layer, torch.nn.Linear):
        return False
    if getattr(module, "fan_in_fan_out", False) or len(module.lora_A) != 1 or getattr(module, "lora_variant", None):
        return False
    name = next(iter(module.lora_A))
    plain = module.lora_A[name].bias is None and module.lora_B[name].bias is None  # no lora_bias
    dropout = module.lora_dropout[name]
    return plain and isinstance(dropout, torch.nn.Identity) and not module.base_layer.weight.requires_grad


def _fused_forward(module: Any, peft_forward: Any) -> Any:
    def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
        device = x.device.type
        active = module.active_adapters
        if (
            args
            or kwargs
            or not torch.is_autocast_enabled(device)
            or module.disable_adapters
            or module.merged
            or len(active) != 1
            or active[0] not in module.lora_A
        ):
            return peft_forward(x, *args, **kwargs)
        name = active[0]
        base = module.base_layer
        return _FusedLoraLinear.apply(
            x,
            base.weight,
            base.bias,
            module.lora_A[name].weight,
            module.lora_B[name].weight,
            float(module.scaling[name]),
            torch.get_autocast_dtype(device),
        )

    return forward


def _float32_output(module: Any, args: Any, output: Any) -> Any:
    return output.float() if output.dtype in (torch.bfloat16, torch.float16) else output


def lora_sum_in_float32(model: Any) -> dict[str, int]:
    """Make every LoRA layer of ``model`` add its delta to the base output at float32 precision under
    autocast (the module docstring says how). Returns ``{"fused": n, "float32_output": m}``."""
    from peft.tuners.lora import LoraLayer

    counts = {"fused": 0, "float32_output": 0}
    for module in model.modules():
        if not isinstance(module, LoraLayer) or not hasattr(module, "base_layer"):
            continue
        if getattr(module, "_hat_float32_sum", False):
            continue
        layer: Any = module
        layer._hat_float32_sum = True
        if _fusable(layer):
            layer.forward = _fused_forward(layer, layer.forward)
            counts["fused"] += 1
        else:
            layer.base_layer.register_forward_hook(_float32_output)
            counts["float32_output"] += 1
    return counts
