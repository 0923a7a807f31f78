"""Issue 14: how often do RL's sampled rollouts earn any reward, per sampling temperature?

RL learns only from groups whose rollouts differ in reward. This runs the rollouts of ``hat train
rl`` (the same runner, episodes, coin flip and per-rollout seeds as its first steps) with a model
and several temperatures, without training, and prints per temperature: the share of episodes that
end ``ok``, the mean reward per judge dimension, and the share of groups whose advantages are all
zero (the rollouts TRL would still compute but learn nothing from).

    python reports/stage23/rollout_probe.py hf:/work/runs/stage23/opd-hsa-lr2e-5 --groups 4 -G 4 \
        --temperature 1.0 0.7 0.4
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from hat.augment import load_envelope
from hat.harness.loader import load_harness
from hat.models import load_model
from hat.train.datagen import datagen_episodes
from hat.train.datagen_config import DatagenConfig
from hat.train.gdpo import segment_advantages
from hat.train.rollouts import RolloutRunner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("-G", type=int, default=4)
    parser.add_argument("--temperature", type=float, nargs="+", default=[1.0])
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--episodes", type=int, default=256, help="the pool RL draws from (hat train rl --episodes)")
    parser.add_argument("--episode-seed", type=int, default=1)
    parser.add_argument("--hsa-prob", type=float, default=0.5)
    parser.add_argument("--out", help="JSONL of one line per temperature")
    parser.add_argument("--show", action="store_true", help="also print each rollout's harness, status and rewards")
    args = parser.parse_args()

    model = load_model(args.model)
    tokenizer = model.tokenizer  # type: ignore[attr-defined]
    pool = datagen_episodes(DatagenConfig(n_episodes=args.episodes, seed=args.episode_seed))
    episodes = [e for e in pool[: args.groups] for _ in range(args.G)]
    rows = []
    for temperature in args.temperature:
        runner = RolloutRunner(
            production=load_harness("livestream"),
            envelope=load_envelope("default"),
            hsa_prob=args.hsa_prob,
            temperature=temperature,
            top_p=args.top_p,
        )
        jobs = runner.plan(episodes, args.G, step=0)
        start = time.perf_counter()
        rollouts = runner.run(jobs, lambda job: model, tokenizer)
        wall = time.perf_counter() - start
        dims = runner.dims
        if args.show:
            for r in rollouts:
                variant = ",".join(r.job.variant.applied) if r.job.variant is not None else "production"
                print(r.job.episode.episode_id, r.job.group, variant, r.trace.status, r.rewards, flush=True)
        groups = [j.group for j in jobs]
        values = segment_advantages(
            "segments",
            {d: [r.rewards[d] for r in rollouts] for d in dims},
            {s: [r.cot_q[s] for r in rollouts] for s in runner.segment_dims},
            [r.q_total for r in rollouts],
            groups,
            runner.segment_dims,
            0.1,
            1e-6,
        )
        reward_groups = {
            g for g in set(groups) if len({tuple(r.rewards[d] for d in dims) for r in rollouts if r.job.group == g}) > 1
        }
        row = {
            "model": args.model,
            "temperature": temperature,
            "top_p": args.top_p,
            "rollouts": len(rollouts),
            "wall_s": round(wall, 1),
            "ok": sum(r.trace.status == "ok" for r in rollouts) / len(rollouts),
            "status": dict(Counter(r.trace.status for r in rollouts)),
            "reward": {d: round(sum(r.rewards[d] for r in rollouts) / len(rollouts), 3) for d in dims},
            "groups_with_reward_spread": len(reward_groups) / len(set(groups)),
            "segment_advantage_nonzero": {
                s: float(sum(abs(float(x)) > 1e-9 for x in v)) / len(rollouts) for s, v in values.items()
            },
            "cot_tokens": sum(r.cot_tokens for r in rollouts) / len(rollouts),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
