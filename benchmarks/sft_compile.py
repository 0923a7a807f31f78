"""Does ``torch.compile`` of the decoder layers speed up the packed SFT step? Eager vs compiled, same packs.

The packed step (``hat.train.packing.pack_loss``, bf16 autocast, LoRA sums in float32) spends about
half its time in CPU flash attention and a fifth in small elementwise kernels, casts and copies —
the part a compiler can fuse. This runs forward + backward of the same real training packs (one
datagen folder, packs cut small enough to fit beside a paused training) eagerly and with each
decoder layer compiled (``layer.compile(dynamic=True)``, regional compilation as transformers
recommends for repeated blocks), and reports per-pack seconds, the compile overhead (the first
passes) and the losses of both.

    python benchmarks/sft_compile.py --data /work/runs/stage1l/data [--packs 6] [--max-tokens 2600] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import time
from argparse import Namespace
from pathlib import Path
from typing import Any

import torch


def _packs(data: Path, n: int, max_tokens: int) -> list[Any]:
    from hat.train import load_rows
    from hat.train.packing import pack_rows
    from hat.train.sft import encode_rows, load_base

    _, tokenizer, _ = load_base("smollm2")
    rows = load_rows(data)[: 16 * n]
    encoded, _ = encode_rows(rows, tokenizer, 2048)
    packs = pack_rows([e for e in encoded if e.n_trained], max_rows=16, max_tokens=max_tokens)
    return packs[:n]


def _model(compiled: bool) -> Any:
    from peft import get_peft_model
    from transformers import set_seed

    from hat.train.lora_precision import lora_sum_in_float32
    from hat.train.sft import load_base
    from hat.train.trl_configs import lora_config

    model, _, _ = load_base("smollm2")
    set_seed(0)
    lora = Namespace(lora_r=16, lora_alpha=32, lora_dropout=0.0, lora_target_modules="all-linear")
    model = get_peft_model(model, lora_config(lora))
    model.train()
    lora_sum_in_float32(model)
    if compiled:
        for layer in model.get_base_model().get_decoder().layers:
            layer.compile(dynamic=True)
    return model


def _run(model: Any, packs: list[Any], passes: int) -> list[list[tuple[float, float]]]:
    from hat.train.packing import pack_loss

    out = []
    for _ in range(passes):
        times = []
        for pack in packs:
            start = time.perf_counter()
            total, n = pack_loss(model, pack, dtype=torch.bfloat16)
            (total / n).backward()
            model.zero_grad(set_to_none=True)
            times.append((round(time.perf_counter() - start, 2), round(float(total / n), 5)))
        out.append(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--packs", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=2600)
    parser.add_argument("--passes", type=int, default=2, help="Passes over the packs (the first compiles).")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    packs = _packs(args.data, args.packs, args.max_tokens)
    print(json.dumps({"packs": [[p.n_rows, p.n_tokens] for p in packs], "threads": torch.get_num_threads()}))
    summary = {}
    for name, compiled in (("eager", False), ("compiled", True)):
        passes = _run(_model(compiled), packs, args.passes)
        print(json.dumps({"mode": name, "passes": passes}), flush=True)
        summary[name] = {"first_pass_s": round(sum(t for t, _ in passes[0]), 2),
                         "last_pass_s": round(sum(t for t, _ in passes[-1]), 2)}  # fmt: skip
    summary["speedup_last_pass"] = round(summary["eager"]["last_pass_s"] / summary["compiled"]["last_pass_s"], 3)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
