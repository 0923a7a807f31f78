"""One batch-invariant decode step on SmolLM2 (bf16): its cost on one and two threads, two
single-threaded engines stepping at once, prefill per token, and (``--profile``) where a step's
time goes (torch profiler).

    .venv/bin/python benchmarks/decode_step.py [--rows 16] [--context 900] [--steps 30] [--profile]

Rows are random token prompts of ``context`` to ``context + 10 * rows`` tokens, prefilled in
64-token chunks, then decoded ``steps`` tokens each with no stop. Run it on an idle machine: the
figures are wall times.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--context", type=int, default=900)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--profile", action="store_true", help="also print the torch profiler table of one run")
    args = parser.parse_args()
    import torch

    from hat.models.transformers_backend import TransformersModel
    from hat.models.transformers_batch import BatchRow, Stopper, decode_invariant, prefill_chunks

    model = TransformersModel.smollm2(dtype=torch.bfloat16, batch_invariant=True)
    generator = torch.Generator().manual_seed(0)

    def rows() -> list[BatchRow]:
        out = []
        for i in range(args.rows):
            ids = torch.randint(100, 40000, (args.context + 10 * i,), generator=generator).tolist()
            row = BatchRow(ids, model._new_cache(), 0)
            prefill_chunks(model.model, row, cache_kwarg=model._cache_kwarg, chunk=64, pad_id=0)
            out.append(row)
        return out

    def decode(batch: list[BatchRow]) -> None:
        stopper = Stopper(set(), args.steps + 1)  # prefill gave each row its first token
        decode_invariant(model.model, batch, stopper, group=args.rows, new_cache=model._new_cache)

    result: dict[str, Any] = {"rows": args.rows, "context": args.context, "steps": args.steps}
    for threads in (2, 1):
        torch.set_num_threads(threads)
        batch = rows()
        start = time.perf_counter()
        decode(batch)
        result[f"step_ms_{threads}_threads"] = round((time.perf_counter() - start) / args.steps * 1000, 1)
    torch.set_num_threads(1)
    pair = [rows(), rows()]
    start = time.perf_counter()
    workers = [threading.Thread(target=decode, args=(b,)) for b in pair]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    result["two_engines_ms_per_step_each"] = round((time.perf_counter() - start) / args.steps / 2 * 1000, 1)
    for threads in (2, 1):
        torch.set_num_threads(threads)
        ids = torch.randint(100, 40000, (1024,), generator=generator).tolist()
        row = BatchRow(ids, model._new_cache(), 0)
        start = time.perf_counter()
        prefill_chunks(model.model, row, cache_kwarg=model._cache_kwarg, chunk=64, pad_id=0)
        result[f"prefill_ms_per_token_{threads}_threads"] = round((time.perf_counter() - start) * 1000 / 1024, 2)
    print(json.dumps(result))
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        torch.set_num_threads(2)
        batch = rows()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            decode(batch)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
