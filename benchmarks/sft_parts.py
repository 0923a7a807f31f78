"""What each part of the fast SFT path buys: forward + backward of the same rows, path by path.

    python benchmarks/sft_parts.py [--rows 2] [--threads 1]

Paths: the rows one by one with full logits in float32 (the old recipe's computation), packed with
the LM head on trained positions only in float32 and in bf16 autocast, and the literal packed
sequence with a 4D block mask in bf16. Prints seconds, tokens/s and the loss of each (all equal up
to bf16 rounding). The rows come from ``hat datagen`` (one room snapshot, seed 0).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from peft import get_peft_model

    from hat.train import DatagenConfig, generate_dataset, load_rows
    from hat.train.packing import pack_loss, pack_rows, unpacked_loss
    from hat.train.sft import encode_rows, load_base
    from hat.train.sft_config import HatSFTConfig
    from hat.train.trl_configs import lora_config

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        generate_dataset(DatagenConfig(n_episodes=8, seed=0, hsa_ratio=0.0, comments_per_snapshot=8), data)
        rows = load_rows(data)[: args.rows]
    model, tokenizer, _ = load_base("smollm2")
    lora = get_peft_model(model, lora_config(HatSFTConfig(output_dir=tmp, lora_dropout=0.0)))
    encoded, _ = encode_rows(rows, tokenizer, 4096)
    (pack,) = pack_rows(encoded, max_rows=len(encoded))
    paths: list[tuple[str, Any, int]] = [
        ("rows one by one, full logits, fp32", lambda: _sum(unpacked_loss(lora, [e]) for e in encoded),
         sum(len(e.input_ids) for e in encoded)),
        ("packed, trained positions only, fp32", lambda: pack_loss(lora, pack), pack.n_tokens),
        ("packed, trained positions only, bf16", lambda: pack_loss(lora, pack, dtype=torch.bfloat16), pack.n_tokens),
        ("block mask, bf16", lambda: pack_loss(lora, pack, attention="block-mask", dtype=torch.bfloat16),
         pack.n_tokens),
    ]  # fmt: skip
    pack_loss(lora, pack, dtype=torch.bfloat16)  # warm-up
    for name, fn, tokens in paths:
        start = time.perf_counter()
        loss, n = fn()
        (loss / n).backward()
        wall = time.perf_counter() - start
        lora.zero_grad()
        print(json.dumps({"path": name, "tokens": tokens, "s": round(wall, 2), "tokens_per_s": round(tokens / wall),
                          "loss": round(float(loss.detach() / n), 5)}), flush=True)  # fmt: skip


def _sum(parts: Any) -> tuple[Any, int]:
    total, count = 0, 0
    for loss, n in parts:
        total, count = total + loss, count + n
    return total, count


if __name__ == "__main__":
    main()
