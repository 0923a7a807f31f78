#!/usr/bin/env bash
# Issue 14: one RL step from the RL start (stage-2 attempt 2), rollouts sampled through PEFT's adapter
# forward (W·x + s·B(A·x)) against the adapter merged into swapped weights (hat.train.lora_merge), two
# runs each, alternating, on step 0's rollout seeds, machine otherwise idle. From the repo root:
#   bash reports/stage23/rl_merge_ab.sh [start] > reports/stage23/rl_merge_ab.txt
# Ran at commit 5f9fc98, which added --merge-lora; it measured no gain and the option was removed
# in the next commit (reports/hat.md § Sizing), so check out 5f9fc98 to run it again.
set -euo pipefail
source .venv/bin/activate
START=${1:-/work/runs/stage23/opd-hsa-lr2e-5}
run() {  # name, options...
  local name="$1"; shift
  rm -rf "/tmp/rlab-$name"
  hat train rl --model "$START" --out "/tmp/rlab-$name" --episodes 256 -G 4 --max-steps 1 \
    --threads 2 --save-steps 1 --bf16 "$@" > "/tmp/rlab-$name.log" 2>&1
  python - "$name" "$*" <<'PY'
import json, sys
name, opts = sys.argv[1], sys.argv[2]
d = json.loads(open(f"/tmp/rlab-{name}/rl_diagnostics.jsonl").readline())
keys = ("step_time", "hat/rollout_s", "hat/rounds", "completions/mean_length", "loss", "hat/dropped")
tokens = d["completions/mean_length"] * 8  # the step's 8 rollouts: model-written and tool tokens
print(json.dumps({"run": name, "options": opts, **{k: d.get(k) for k in keys},
                  "rollout_completion_tokens_per_s": round(tokens / d["hat/rollout_s"], 2)}))
PY
}
lscpu | grep -m1 "Model name"
run adapter-1 --no-merge-lora
run merged-1 --merge-lora
run adapter-2 --no-merge-lora
run merged-2 --merge-lora
