#!/usr/bin/env bash
# Issue 14: one RL step from the RL start (stage-2 attempt 2), TRL's per-row scoring against group
# prompt sharing, on the same 8 rollouts (step 0's seeds), machine otherwise idle. From the repo root:
#   bash reports/stage23/rl_step_ab.sh [start] > reports/stage23/rl_step_ab.txt
set -euo pipefail
source .venv/bin/activate
START=${1:-/work/runs/stage23/opd-hsa-lr2e-5}
run() {  # name, options...
  local name="$1"; shift
  rm -rf "/tmp/rlab-$name"
  /usr/bin/time -v hat train rl --model "$START" --out "/tmp/rlab-$name" --episodes 256 -G 4 --max-steps 1 \
    --threads 2 --save-steps 1 --bf16 "$@" > "/tmp/rlab-$name.log" 2>&1
  python - "$name" "$*" <<'PY'
import json, re, sys
name, opts = sys.argv[1], sys.argv[2]
d = json.loads(open(f"/tmp/rlab-{name}/rl_diagnostics.jsonl").readline())
peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(f"/tmp/rlab-{name}.log").read()).group(1))
keys = ("step_time", "hat/rollout_s", "loss", "grad_norm", "num_tokens", "hat/dropped", "entropy")
print(json.dumps({"run": name, "options": opts, **{k: d.get(k) for k in keys},
                  "training_s": round(d["step_time"] - d["hat/rollout_s"], 1), "peak_gb": round(peak / 2**20, 2)}))
PY
}
lscpu | grep -m1 "Model name"
run rows --no-share-prompts --batch-size 2 --grad-accum 4
run shared --share-prompts --batch-size 4 --grad-accum 2
