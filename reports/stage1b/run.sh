#!/usr/bin/env bash
# Stage 1, attempt 2 (issue 10): Fixed-SFT vs HSA-SFT at 2,000 livestream rows each plus the same
# general replay, on the fast SFT path; then base / Fixed / HSA on the suites at n = 100 and IFEval
# on all 541 prompts. Run from the repo root after `make install`. Every step resumes: rerunning
# this script after an interruption continues where it stopped (datagen folders are kept, training
# resumes from its last complete checkpoint, bit for bit).
# RUNS: where data and checkpoints live (outside the work tree, so a fresh checkout keeps them).
set -euo pipefail
source .venv/bin/activate
RUNS=${RUNS:-/work/runs/stage1b}
mkdir -p "$RUNS"

# 1. teacher data: 6,400 oracle episodes, 16 comments per room snapshot, half the snapshots under
#    train-split HSA variants, judge-filtered (25 s)
[ -f "$RUNS/data/data.jsonl" ] || hat datagen --config reports/stage1b/datagen.yaml --out "$RUNS/data" --json \
  > "$RUNS/datagen.json"

# 2. general replay: the base model's own answers (bf16 weights) to 720 general prompts (training only), batched
[ -f "$RUNS/general/data.jsonl" ] || hat datagen-general --n 720 --batch-size 64 --max-new-tokens 384 --dtype bfloat16 --seed 0 \
  --out "$RUNS/general" --json > "$RUNS/general.json"

# 3. equal data: 2,000 livestream rows + 500 replay rows (ratio 0.25) each, one epoch of packs (one
#    pack per step: 282 steps for Fixed, 318 for HSA, whose variants share shorter prefixes); one
#    training at a time on both cores (two side by side need ~2 x 9 GB and run slower in total)
train() {  # name, extra args...
  local out="$RUNS/$1"; shift
  [ -f "$out/sft_result.json" ] && return 0
  local resume=(); [ -d "$out" ] && ls -d "$out"/checkpoint-* >/dev/null 2>&1 && resume=(--resume)
  hat train sft --config reports/stage1b/sft.yaml --data "$RUNS/data" --replay-data "$RUNS/general" \
    --threads 2 --out "$out" "${resume[@]}" "$@" --json > "$out.result.json"
}
train sft-hsa-s0 --seed 0
train sft-fixed --seed 0 --fixed-harness
train sft-hsa-s1 --seed 1
