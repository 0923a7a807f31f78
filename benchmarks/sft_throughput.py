"""SFT throughput: the old recipe and the fast path on the same rows, side by side in one run.

- **old**: TRL's ``SFTTrainer`` row by row (batch 1), full logits, float32 (``packing=False``,
  ``autocast_bf16=False``) — the recipe of the first stage-1 run;
- **new**: :class:`~hat.train.sft_trainer.PackedSFTTrainer` — rows of one room snapshot packed
  behind their shared prompt prefix, LM head on trained positions only, bf16 autocast where the CPU
  has native bf16 (one pack per step), each LoRA layer's delta added in float32; and the same path
  with those sums in bf16 (``lora_float32_sum`` off), to show what the float32 sums cost.

Both train LoRA (r 16, every linear layer) on the bundled SmolLM2 from the same initial weights
with learning rate 0, so every step's loss is the loss of the same model on its rows: both recipes'
mean losses over all rows must agree with the reference — the base model's loss on each row alone,
full logits, float32 (bf16 within ~1 %). A third short run trains the new
path for real on one fixed pack in float32 and in bf16 and prints both loss curves.

    python benchmarks/sft_throughput.py [--rows 24] [--data DIR] [--out reports/sft_throughput.json]

Prints one JSON object: rows/s and trained tokens/s of each recipe, the speedup, the losses.
Run it on an otherwise idle machine (two cores shared with anything else give noise).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from hat.allocator import allocator_name
from hat.cpu import cpu_description
from hat.train import DatagenConfig, generate_dataset, load_rows
from hat.train.packing import autocast_dtype
from hat.train.sft import train_sft
from hat.train.sft_config import HatSFTConfig


class _Steps(TrainerCallback):  # type: ignore[misc]
    def __init__(self) -> None:
        self.times: list[float] = []
        self.losses: list[float] = []
        self._t = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._t = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.times.append(time.perf_counter() - self._t)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def _config(out: Path, data: Path, **changes: Any) -> HatSFTConfig:
    fields: dict[str, Any] = {
        "output_dir": str(out),
        "data": str(data),
        "model": "smollm2",
        "learning_rate": 0.0,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "lora_dropout": 0.0,
        "logging_steps": 1,
        "save_strategy": "no",
        "max_length": 4096,
        "disable_tqdm": True,
        "dataloader_pin_memory": False,
        "seed": 0,
        "num_train_epochs": 1,
    }
    return HatSFTConfig(**{**fields, **changes})


def _encoded(rows: list[dict[str, Any]]) -> list[Any]:
    from transformers import AutoTokenizer

    from hat.models.transformers_backend import smollm2_gguf_path
    from hat.train.sft import encode_rows

    path = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    return encode_rows(rows, tokenizer, 4096)[0]


def _run(name: str, config: HatSFTConfig, rows: list[dict[str, Any]], trained: int) -> dict[str, Any]:
    steps = _Steps()
    start = time.perf_counter()
    result = train_sft(config, rows, callbacks=[steps])
    wall = time.perf_counter() - start
    train_s = sum(steps.times)
    if config.packing:  # the packed trainer logs exact per-step losses
        lines = [json.loads(x) for x in (Path(config.output_dir) / "steps.jsonl").read_text().splitlines()]
        mean_loss = sum(x["loss"] * x["trained_tokens"] for x in lines) / sum(x["trained_tokens"] for x in lines)
    else:  # one row per step: token-weighted mean needs each row's count; the plain mean is reported too
        mean_loss = sum(steps.losses) / len(steps.losses)
    return {
        "recipe": name,
        "steps": result.global_step,
        "rows": len(rows),
        "train_s": round(train_s, 2),
        "wall_s_incl_load": round(wall, 2),
        "rows_per_s": round(len(rows) / train_s, 4),
        "trained_tokens_per_s": round(trained / train_s, 2),
        "mean_step_s": round(train_s / max(1, result.global_step), 3),
        "mean_loss": round(mean_loss, 5),
    }


def _reference_loss(encoded: list[Any]) -> tuple[float, float]:
    """The rows' loss under the initial weights (LoRA's B starts at zero, so: the base model), computed
    the plain way — each row alone, full logits, float32 — as ``(token mean, mean of row means)``:
    the packed recipe logs the first (exact sums per pack), the row-by-row recipe one row mean per
    step in shuffled order, which only the second is independent of."""
    from hat.train.packing import unpacked_loss
    from hat.train.sft import load_base

    model, _, _ = load_base("smollm2")
    total, count, means = 0.0, 0, []
    with torch.no_grad():
        for row in encoded:
            loss, n = unpacked_loss(model, [row])
            total, count = total + float(loss), count + n
            means.append(float(loss) / n)
    return total / count, sum(means) / len(means)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=24, help="Rows to train on (whole snapshots of 8).")
    parser.add_argument("--data", type=Path, help="A hat datagen folder (default: generated, seed 0).")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's).")
    parser.add_argument("--curve-steps", type=int, default=8, help="Steps of the fp32-vs-bf16 curve run.")
    parser.add_argument("--out", type=Path, help="Also write the JSON here.")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = args.data
        if data is None:
            data = work / "data"
            generate_dataset(DatagenConfig(n_episodes=args.rows, seed=0, hsa_ratio=0.5, comments_per_snapshot=8), data)
        rows = load_rows(data)[: args.rows]
        encoded = _encoded(rows)
        counts = [e.n_trained for e in encoded]
        trained, total = sum(counts), sum(len(e.input_ids) for e in encoded)
        reference, reference_rows = _reference_loss(encoded)
        line = {"reference_loss": reference, "reference_row_mean": reference_rows}
        print(json.dumps(line), file=sys.stderr, flush=True)

        old_steps = _Steps()
        old_cfg = _config(work / "old", data, packing=False, autocast_bf16=False, per_device_train_batch_size=1)
        start = time.perf_counter()
        train_sft(old_cfg, rows, callbacks=[old_steps])
        old_wall = time.perf_counter() - start
        old_train = sum(old_steps.times)
        old = {
            "recipe": "old: TRL SFTTrainer, 1 row/step, full logits, fp32",
            "steps": len(old_steps.times),
            "train_s": round(old_train, 2),
            "wall_s_incl_load": round(old_wall, 2),
            "rows_per_s": round(len(rows) / old_train, 4),
            "trained_tokens_per_s": round(trained / old_train, 2),
            "mean_step_s": round(old_train / len(old_steps.times), 3),
            "mean_row_loss": round(sum(old_steps.losses) / len(old_steps.losses), 5),
        }
        print(json.dumps({"old": old}), file=sys.stderr, flush=True)
        dtype = autocast_dtype("cpu", None)
        new = _run(
            f"new: packed (prefix-cache), trained positions only, {'bf16' if dtype else 'fp32'} autocast",
            _config(work / "new", data),
            rows,
            trained,
        )
        print(json.dumps({"new": new}), file=sys.stderr, flush=True)
        plain = None
        if dtype is not None:  # what the float32 LoRA sums cost: the same path with bf16 sums
            plain = _run("new, LoRA sums in bf16 (lora_float32_sum off)",
                         _config(work / "new-plain", data, lora_float32_sum=False), rows, trained)  # fmt: skip
            print(json.dumps({"new_bf16_sums": plain}), file=sys.stderr, flush=True)
        curves = _curves(work, data, rows, args.curve_steps)
    report = {
        "machine": f"{cpu_description()}, {torch.get_num_threads()} torch threads",
        "allocator": allocator_name(),  # glibc, or jemalloc where preloaded (what `hat train` uses)
        "rows": len(rows),
        "tokens": total,
        "trained_tokens": trained,
        "old": old,
        "new": new,
        "speedup_rows_per_s": round(new["rows_per_s"] / old["rows_per_s"], 2),
        "speedup_trained_tokens_per_s": round(new["trained_tokens_per_s"] / old["trained_tokens_per_s"], 2),
        "new_bf16_sums": plain,
        "speedup_rows_per_s_bf16_sums": round(plain["rows_per_s"] / old["rows_per_s"], 2) if plain else None,
        "reference_loss_fp32_unpacked": round(reference, 5),
        "reference_row_mean_fp32_unpacked": round(reference_rows, 5),
        "old_loss_rel_diff": round(abs(old["mean_row_loss"] - reference_rows) / reference_rows, 5),
        "new_loss_rel_diff": round(abs(new["mean_loss"] - reference) / reference, 5),
        "fp32_vs_bf16_curve": curves,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


def _curves(work: Path, data: Path, rows: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """The new path trained for real (lr 2e-4) on one fixed pack, float32 vs bf16 autocast."""
    first = rows[0].get("snapshot")
    fixed = ([r for r in rows if r.get("snapshot") == first] or rows)[:4]  # 4 rows: float32 activations fit
    out: dict[str, Any] = {}
    for name, flag in (("fp32", False), ("bf16", True)):
        cfg = _config(work / f"curve-{name}", data, learning_rate=2e-4, max_steps=steps, autocast_bf16=flag)
        train_sft(cfg, fixed)
        lines = [json.loads(x) for x in (Path(cfg.output_dir) / "steps.jsonl").read_text().splitlines()]
        out[name] = [round(x["loss"], 5) for x in lines]
    out["max_abs_diff"] = round(max(abs(a - b) for a, b in zip(out["fp32"], out["bf16"], strict=True)), 5)
    return out


if __name__ == "__main__":
    main()
