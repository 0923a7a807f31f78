"""Evaluation throughput: the same suite cases unbatched and batched, in one run.

    .venv/bin/python benchmarks/eval_throughput.py [--suite t1] [--n 100] [--model smollm2-hat]
        [--batch-size 16] [--seed 0] [--threads N] [--dtype bfloat16] [--json] [--out result.json]
        [--batched-dtype bfloat16 --invariant [--check-unbatched]]

Runs ``run_cases`` twice on the same cases: ``batch_size=1`` (one episode after another, the old
path) and ``batch_size=N`` (episodes on N threads, their rounds stepped together through
:class:`~hat.models.batching.BatchingModel`). Each run loads the model afresh and its clock starts
after loading. It then checks that the two runs agree case by case: the per-case scores, and the
raw model output of every round (greedy decoding must not depend on batching). Prints episodes
per minute of each run and the speedup; ``--out`` writes the same JSON to a file. ``--dtype``
loads the model in that dtype for both runs (float32 by default on CPU; in bfloat16, greedy picks
sit much closer to ties, so the two runs may disagree on a few cases).

``--batched-dtype D --invariant``: the batched run loads the model in ``D`` with batch-invariant
decoding (:mod:`hat.models.invariant`) while the unbatched run stays the old path (``--dtype``,
float32 by default): the speedup of the new evaluation path over the old one. Their outputs are
not expected to agree (different precision); ``--check-unbatched`` adds a third run, unbatched in
``D`` with the same invariant decoding, and checks *that* one against the batched run case by case.
"""

from __future__ import annotations

import argparse
import json
import logging
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
    parser.add_argument("--batched-dtype", default=None, help="dtype of the batched run (default: --dtype)")
    parser.add_argument("--invariant", action="store_true", help="batched run: batch-invariant decoding")
    parser.add_argument(
        "--check-unbatched", action="store_true", help="a third run, unbatched like the batched one, compared with it"
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON result here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("hat.eval").setLevel(logging.INFO)  # decode-slot fill of continuous batching
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    cases = build_cases(args.suite, n=args.n, seed=args.seed)
    old = {"dtype": args.dtype} if args.dtype else {}
    new = dict(old)
    if args.batched_dtype:
        new["dtype"] = args.batched_dtype
    if args.invariant:
        new["batch_invariant"] = True
    plan = [("unbatched", 1, old), ("batched", args.batch_size, new)]
    if args.check_unbatched:
        plan.append(("unbatched_same_path", 1, new))
    runs = {}
    for label, size, load in plan:
        runs[label] = run_cases(args.suite, cases, args.model, seed=args.seed, batch_size=size, load_options=load)
        if not args.json:
            print(f"{label:10s} {_rate(runs[label])}", flush=True)
    one, many = _rate(runs["unbatched"]), _rate(runs["batched"])
    same_path = {}
    if args.check_unbatched:
        same_path = {
            "unbatched_same_path": _rate(runs["unbatched_same_path"]),
            "same_path_vs_batched": _compare(runs["unbatched_same_path"], runs["batched"]),
        }
    result = {
        "suite": args.suite,
        "model": args.model,
        "n": args.n,
        "seed": args.seed,
        "batch_size": args.batch_size,
        "dtype": args.dtype or "default",
        "batched_load_options": new,
        "unbatched": one,
        "batched": many,
        "speedup": round(many["episodes_per_min"] / one["episodes_per_min"], 2),
        **_compare(runs["unbatched"], runs["batched"]),
        **same_path,
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
