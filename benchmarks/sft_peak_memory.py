"""Peak memory and time of one packed SFT step at the training's pack limits, LoRA sums in bf16 or float32.

The largest pack that ``hat train sft``'s packing makes from the first rows of a datagen folder
(``--max-rows`` / ``--max-tokens`` as in the attempt's config) goes through forward + backward
once, on SmolLM2 with LoRA r 16 on every linear layer, under bf16 autocast — with each LoRA layer's
sum of base output and delta in bf16 (PEFT's default under autocast) or in float32
(``lora_float32_sum``, the default of ``hat train sft``). Peak resident memory is the process's
(``ru_maxrss``), so run one mode per process, on an otherwise idle machine.

    python benchmarks/sft_peak_memory.py --data /work/runs/stage1l/data --sums float32 [--max-tokens 6144]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from argparse import Namespace
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--sums", choices=("bf16", "float32"), required=True)
    parser.add_argument("--rows", type=int, default=256, help="Rows of the folder to pack (the first N).")
    parser.add_argument("--max-rows", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=6144)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from peft import get_peft_model
    from transformers import set_seed

    from hat.train import load_rows
    from hat.train.lora_precision import lora_sum_in_float32
    from hat.train.packing import pack_loss, pack_rows
    from hat.train.sft import encode_rows, load_base
    from hat.train.trl_configs import lora_config

    model, tokenizer, _ = load_base("smollm2")
    encoded, _ = encode_rows(load_rows(args.data)[: args.rows], tokenizer, 4096)
    packs = pack_rows([e for e in encoded if e.n_trained], max_rows=args.max_rows, max_tokens=args.max_tokens)
    pack = max(packs, key=lambda p: p.n_tokens)
    set_seed(0)
    lora = Namespace(lora_r=16, lora_alpha=32, lora_dropout=0.0, lora_target_modules="all-linear")
    model = get_peft_model(model, lora_config(lora))
    model.train()
    if args.sums == "float32":
        lora_sum_in_float32(model)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        total, n = pack_loss(model, pack, dtype=torch.bfloat16)
        (total / n).backward()
        model.zero_grad(set_to_none=True)
        times.append(round(time.perf_counter() - start, 2))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"sums": args.sums, "pack_rows": pack.n_rows, "pack_tokens": pack.n_tokens,
                      "step_s": times, "peak_rss_gib_before": round(before, 2), "peak_rss_gib": round(peak, 2),
                      "loss": round(float(total / n), 5), "threads": args.threads}))  # fmt: skip


if __name__ == "__main__":
    main()
