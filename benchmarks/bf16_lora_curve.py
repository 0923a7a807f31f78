"""Why does bf16 autocast training descend more slowly than float32? One fixed pack, trained for real.

On SmolLM2 the packed step's loss curve under bf16 autocast fell behind float32 after the first
step (reports/stage1b.md §1: 2.3175, 2.1727, 2.0421, 1.9308 vs 2.3177, 2.2733, 2.1726, 2.0510).
Suspect: PEFT's LoRA ``Linear`` adds the adapter's output to the base layer's output in the base
layer's dtype (``result = result + lora_B(lora_A(x)) * scaling``), which autocast makes bf16, so a
young adapter's small delta is rounded into the bf16 grid of the base output (8 bits of mantissa)
and the model does not yet see most of its own update.

Variants, same initial adapter, same pack, AdamW at SFT's default learning rate (2e-4):

- ``fp32``: no autocast;
- ``bf16``: autocast as ``hat train sft`` ran it until now;
- ``bf16-fp32-add``: autocast with :func:`hat.train.lora_precision.lora_sum_in_float32` — the base
  product and the adapter's delta summed in float32 (inside one bf16 matmul's float32 accumulator
  where the layer allows, else a float32 base output), what ``hat train sft`` now does.

    python benchmarks/bf16_lora_curve.py --data /work/runs/stage1l/data [--rows 2] [--steps 6] [--threads 1]

Prints one JSON line per variant (its loss per step and seconds per step) and a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch


def _pack(data: Path, n_rows: int) -> Any:
    from hat.train import load_rows
    from hat.train.packing import pack_rows
    from hat.train.sft import encode_rows, load_base

    rows = load_rows(data)
    first = rows[0].get("snapshot")
    chosen = [r for r in rows if r.get("snapshot") == first][:n_rows]
    _, tokenizer, _ = load_base("smollm2")
    encoded, _ = encode_rows(chosen, tokenizer, 2048)
    return pack_rows([e for e in encoded if e.n_trained], max_rows=n_rows)[0], tokenizer


def _curve(variant: str, pack: Any, steps: int, lr: float, seed: int) -> dict[str, Any]:
    from peft import get_peft_model
    from transformers import set_seed

    from hat.train.lora_precision import lora_sum_in_float32
    from hat.train.packing import pack_loss
    from hat.train.sft import load_base
    from hat.train.trl_configs import lora_config

    model, _, _ = load_base("smollm2")
    set_seed(seed)
    cfg = argparse.Namespace(lora_r=16, lora_alpha=32, lora_dropout=0.0, lora_target_modules="all-linear")
    model = get_peft_model(model, lora_config(cfg))
    model.train()
    if variant == "bf16-fp32-add":
        lora_sum_in_float32(model)
    dtype = None if variant == "fp32" else torch.bfloat16
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    losses, times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        loss_sum, n = pack_loss(model, pack, dtype=dtype)
        loss = loss_sum / n
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
        losses.append(round(float(loss), 5))
    return {"variant": variant, "losses": losses, "step_s": [round(t, 2) for t in times]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="A hat datagen folder.")
    parser.add_argument("--rows", type=int, default=2, help="Rows of one snapshot in the pack.")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--variants", default="fp32,bf16,bf16-fp32-add")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pack, _ = _pack(args.data, args.rows)
    print(json.dumps({"pack_tokens": pack.n_tokens, "rows": args.rows}), flush=True)
    out = {}
    for variant in args.variants.split(","):
        result = _curve(variant, pack, args.steps, args.lr, seed=0)
        out[variant] = result["losses"]
        print(json.dumps(result), flush=True)
    if "fp32" in out:
        summary = {
            v: round(max(abs(a - b) for a, b in zip(out["fp32"], losses, strict=True)), 5)
            for v, losses in out.items()
            if v != "fp32"
        }
        print(json.dumps({"max_abs_diff_vs_fp32": summary}), file=sys.stdout, flush=True)


if __name__ == "__main__":
    main()
