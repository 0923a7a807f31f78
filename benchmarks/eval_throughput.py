"""Evaluation throughput: the same suite cases unbatched and batched, in one run.

    .venv/bin/python benchmarks/eval_throughput.py [--suite t1] [--n 100] [--model smollm2-hat]
        [--batch-size 16] [--seed 0] [--threads N] [--dtype bfloat16] [--json] [--out result.json]

Runs ``run_cases`` twice on the same cases: ``batch_size=1`` (one episode after another, the old
path) and ``batch_size=N`` (episodes on N threads, their rounds stepped together through
:class:`~hat.models.batching.BatchingModel`). Each run loads the model afresh and its clock starts
after loading. It then checks that the two runs agree case by case: the per-case scores, and the
raw model output of every round (greedy decoding must not depend on batching). Prints episodes
per minute of each run and the speedup; ``--out`` writes the same JSON to a file. ``--dtype``
loads the model in that dtype for both runs (float32 by default on CPU; in bfloat16, greedy picks
sit much closer to ties, so the two runs may disagree on a few cases).
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any

from hat.eval.runner import SuiteResult, run_cases
from hat.eval.suites import build_cases


def _rate(result: SuiteResult) -> dict[str, Any]:
    return {
        "wall_s": round(result.wall_s, 2),
        "episodes_per_min": round(60 * len(result.cases) / result.wall_s, 3) if result.wall_s else None,
        "score": result.score(),
    }


def _compare(unbatched: SuiteResult, batched: SuiteResult) -> dict[str, Any]:
    """Case ids whose scores, or whose rounds' raw outputs, differ between the two runs."""
    score_diff, output_diff = [], []
    for a, b in zip(unbatched.cases, batched.cases, strict=True):
        assert a.episode_id == b.episode_id, "the runs returned cases in different orders"
        if a.scores != b.scores:
            score_diff.append(a.episode_id)
        if [r.raw_output for r in a.trace.rounds] != [r.raw_output for r in b.trace.rounds]:
            output_diff.append(a.episode_id)
    return {
        "scores_identical": not score_diff,
        "outputs_identical": not output_diff,
        "cases_with_different_scores": score_diff,
        "cases_with_different_outputs": output_diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="t1")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--model", default="smollm2-hat")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument(
        "--dtype", default=None, help="model dtype for both runs (default: the backend's, float32 on CPU)"
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON result here")
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    cases = build_cases(args.suite, n=args.n, seed=args.seed)
    runs = {}
    for label, size in (("unbatched", 1), ("batched", args.batch_size)):
        load = {"dtype": args.dtype} if args.dtype else None
        runs[label] = run_cases(args.suite, cases, args.model, seed=args.seed, batch_size=size, load_options=load)
        if not args.json:
            print(f"{label:10s} {_rate(runs[label])}", flush=True)
    one, many = _rate(runs["unbatched"]), _rate(runs["batched"])
    result = {
        "suite": args.suite,
        "model": args.model,
        "n": args.n,
        "seed": args.seed,
        "batch_size": args.batch_size,
        "dtype": args.dtype or "default",
        "unbatched": one,
        "batched": many,
        "speedup": round(many["episodes_per_min"] / one["episodes_per_min"], 2),
        **_compare(runs["unbatched"], runs["batched"]),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}".strip(),
    }
    text = json.dumps(result)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    else:
        for key, value in result.items():
            print(f"{key:30s} {value}")


if __name__ == "__main__":
    main()
