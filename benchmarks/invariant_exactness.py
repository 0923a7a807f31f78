"""Batch-invariant decoding on SmolLM2: N suite episodes decoded together (continuous batching, one
engine per core) and one at a time, every round's raw output compared.

    .venv/bin/python benchmarks/invariant_exactness.py N ROWS [SUITE] [--model smollm2-hat] [--seed 2]

``ROWS``: decode rows per engine (:class:`~hat.models.invariant.InvariantConfig`); with N > ROWS
the batched run uses two engines on a two-core machine. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import logging
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int)
    parser.add_argument("rows", type=int)
    parser.add_argument("suite", nargs="?", default="t1")
    parser.add_argument("--model", default="smollm2-hat")
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("hat.eval").setLevel(logging.INFO)  # decode-slot fill of each engine

    from hat.eval.runner import run_cases
    from hat.eval.suites import build_cases
    from hat.models.invariant import InvariantConfig

    cases = build_cases(args.suite, n=args.n, seed=args.seed)
    load = {"dtype": "bfloat16", "batch_invariant": InvariantConfig(rows=args.rows)}
    runs, walls = {}, {}
    for label, size in (("batched", args.n), ("alone", 1)):
        start = time.perf_counter()
        runs[label] = run_cases(args.suite, cases, args.model, seed=args.seed, batch_size=size, load_options=load)
        walls[label] = round(time.perf_counter() - start, 1)
    different = [
        a.episode_id
        for a, b in zip(runs["alone"].cases, runs["batched"].cases, strict=True)
        if [r.raw_output for r in a.trace.rounds] != [r.raw_output for r in b.trace.rounds]
    ]
    result = {
        "suite": args.suite,
        "n": args.n,
        "rows": args.rows,
        "batched_s": walls["batched"],
        "alone_s": walls["alone"],
        "rounds": sum(len(c.trace.rounds) for c in runs["alone"].cases),
        "different": different,
        "score_b": runs["batched"].score(),
        "score_1": runs["alone"].score(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
