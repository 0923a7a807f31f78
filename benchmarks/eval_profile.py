"""Where batched evaluation spends its time: prefill vs decode steps of ``hat eval``'s fast path.

    python benchmarks/eval_profile.py [--suite t1] [--n 16] [--batch-size 16] [--model smollm2-hat]

Runs the suite's cases through ``run_cases`` (as ``hat eval`` does) with the prefill and the decode
step of :mod:`hat.models.transformers_batch` wrapped by timers, and prints one JSON object: wall
time, seconds in prefill (and the tokens it encoded vs took from caches), seconds in decode steps
(and the row-tokens they produced), and seconds in ``generate_batch`` overall. Nothing else
changes: the outputs are those of a plain run.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections import defaultdict
from typing import Any

import hat.models.transformers_backend as backend
import hat.models.transformers_batch as batch
from hat.eval.runner import run_cases
from hat.eval.suites import build_cases

STATS: defaultdict[str, float] = defaultdict(float)


def _timed_prefill(original: Any) -> Any:
    @functools.wraps(original)
    def prefill(model: Any, row: Any, *, cache_kwarg: str) -> None:
        start = time.perf_counter()
        original(model, row, cache_kwarg=cache_kwarg)
        STATS["prefill_s"] += time.perf_counter() - start
        STATS["prefill_tokens"] += len(row.ids) - row.cached
        STATS["cached_tokens"] += row.cached
        STATS["prefills"] += 1

    return prefill


def _timed_step(original: Any) -> Any:
    @functools.wraps(original)
    def step(self: Any) -> None:
        rows = len(self.rows)
        start = time.perf_counter()
        original(self)
        STATS["decode_s"] += time.perf_counter() - start
        STATS["decode_row_tokens"] += rows
        STATS["decode_steps"] += 1

    return step


def _timed_generate_batch(original: Any) -> Any:
    @functools.wraps(original)  # keeps the signature: the batching scheduler looks for cache_keys
    def generate_batch(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            STATS["generate_batch_s"] += time.perf_counter() - start

    return generate_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="t1")
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--model", default="smollm2-hat")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtype", default=None)
    args = parser.parse_args()
    backend.prefill = _timed_prefill(backend.prefill)  # the backend imported it by name
    batch._Decoder._step = _timed_step(batch._Decoder._step)  # type: ignore[method-assign]
    model_class = backend.TransformersModel
    model_class.generate_batch = _timed_generate_batch(model_class.generate_batch)  # type: ignore[method-assign]
    cases = build_cases(args.suite, n=args.n, seed=args.seed)
    load = {"dtype": args.dtype} if args.dtype else None
    result = run_cases(args.suite, cases, args.model, seed=args.seed, batch_size=args.batch_size, load_options=load)
    out = {"suite": args.suite, "n": args.n, "batch_size": args.batch_size, "model": args.model}
    out |= {"wall_s_with_load": round(result.wall_s, 1), "score": result.score()}
    out |= {k: round(v, 2) if k.endswith("_s") else int(v) for k, v in sorted(STATS.items())}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
