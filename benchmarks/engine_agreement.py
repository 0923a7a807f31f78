"""Greedy agreement of two engines on the harness's real first-round prompts (issue 15).

The merged llama.cpp export of an adapter cannot be bit-equal to the adapter on transformers: the
base GGUF is Q4_1 (transformers de-quantises it to float32) and llama.cpp quantises activations in
its quantised matmuls. This measures how often they agree where it matters, on the prompts the
agent really sends: the first round of ``--suite`` episodes (system prompt, room, skills, tools and
the viewer comment), captured through the real runtime with a scripted model, then generated greedily
by each engine. Per prompt: identical text, length of the common prefix (characters), and the same
first action (the tool names called, or a reply). Timing is not measured here (see
``hat bench latency``), so the figures hold beside other jobs.

    python benchmarks/engine_agreement.py --n 30 --out reports/serving/agreement.json \\
        --engine 'smollm2-hat?engine=transformers' --engine 'llamacpp:smollm2-hat?quant=q8_0&threads=2' \\
        --engine 'llamacpp:smollm2-hat?quant=f16&threads=2'

The first ``--engine`` is the reference the others are compared with.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hat.env.sim import run_episode
from hat.eval.suites import build_cases
from hat.harness import Agent
from hat.harness.protocol import parse_output
from hat.models import load_model
from hat.models.base import GenerationConfig
from hat.models.scripted import ScriptedModel


def first_round_prompts(suite: str, n: int, seed: int) -> list[dict[str, Any]]:
    """The messages of each case's first model call, as the runtime builds them."""
    prompts = []
    for case in build_cases(suite, n=n, seed=seed):
        recorder = ScriptedModel(['<reply>{"reply": "ok"}</reply>'], loop=True)
        run_episode(Agent(case.harness, recorder), case.episode)
        prompts.append({"episode": case.episode.episode_id, "messages": recorder.calls[0]})
    return prompts


def action(text: str) -> str:
    """The first action of an output: the called tool names, or ``reply``, or ``other``."""
    parsed = parse_output(text)
    if parsed.kind == "tool_calls":
        return "call:" + ",".join(c.name for c in parsed.tool_calls)
    return parsed.kind


def common_prefix(a: str, b: str) -> int:
    """Characters from the start on which ``a`` and ``b`` agree."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", action="append", required=True, help="model spec; the first is the reference")
    ap.add_argument("--suite", default="t1")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if len(args.engine) < 2:
        ap.error("give at least two --engine specs")

    prompts = first_round_prompts(args.suite, args.n, args.seed)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens)
    outputs: dict[str, list[str]] = {}
    for spec in args.engine:
        model = load_model(spec)
        start = time.perf_counter()
        outputs[spec] = []
        for i, p in enumerate(prompts, 1):
            outputs[spec].append(model.generate(p["messages"], config).text)
            print(f"{spec}: {i}/{len(prompts)}", file=sys.stderr, flush=True)
        if hasattr(model, "close"):
            model.close()
        print(f"{spec}: {time.perf_counter() - start:.0f} s", file=sys.stderr)

    ref_spec, ref = args.engine[0], outputs[args.engine[0]]
    result: dict[str, Any] = {
        "suite": args.suite,
        "n": len(prompts),
        "seed": args.seed,
        "reference": ref_spec,
        "max_new_tokens": args.max_new_tokens,
        "command": " ".join(sys.argv),
        "engines": {},
    }
    for spec in args.engine[1:]:
        out = outputs[spec]
        prefix = [common_prefix(a, b) for a, b in zip(ref, out, strict=True)]
        result["engines"][spec] = {
            "identical": sum(a == b for a, b in zip(ref, out, strict=True)),
            "same_first_action": sum(action(a) == action(b) for a, b in zip(ref, out, strict=True)),
            "mean_common_prefix_chars": round(sum(prefix) / len(prefix), 1),
            "mean_reference_chars": round(sum(map(len, ref)) / len(ref), 1),
        }
    result["cases"] = [
        {"episode": p["episode"], **{spec: outputs[spec][i] for spec in args.engine}} for i, p in enumerate(prompts)
    ]
    text = json.dumps(result, indent=2, ensure_ascii=False)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "cases"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
