#!/usr/bin/env bash
# Stage 1, attempt 3 (issue 10): as attempt 2 (reports/stage1b/run.sh) but with the teacher data of
# reports/stage1c/datagen.yaml (rare intents raised, 80 % of snapshots under train-split HSA
# variants; 12,480 episodes so Fixed-SFT still has >= 2,000 production rows). The same 525 general
# replay rows as attempt 2 (/work/runs/stage1b/general), the same SFT settings. Every step resumes.
# Run from the repo root after `make install`.
set -euo pipefail
source .venv/bin/activate
RUNS=${RUNS:-/work/runs/stage1c}
REPLAY=${REPLAY:-/work/runs/stage1b/general}
mkdir -p "$RUNS"

[ -f "$RUNS/data/data.jsonl" ] || hat datagen --config reports/stage1c/datagen.yaml --out "$RUNS/data" --json \
  > "$RUNS/datagen.json"
[ -f "$REPLAY/data.jsonl" ] || hat datagen-general --n 720 --batch-size 64 --max-new-tokens 384 --dtype bfloat16 \
  --seed 0 --out "$REPLAY" --json > "$RUNS/general.json"

train() {  # name, extra args...
  local out="$RUNS/$1"; shift
  [ -f "$out/sft_result.json" ] && return 0
  local resume=(); [ -d "$out" ] && ls -d "$out"/checkpoint-* >/dev/null 2>&1 && resume=(--resume)
  hat train sft --config reports/stage1c/sft.yaml --data "$RUNS/data" --replay-data "$REPLAY" \
    --threads 2 --out "$out" "${resume[@]}" "$@" --json > "$out.result.json"
}
train sft-hsa-s0 --seed 0
train sft-fixed --seed 0 --fixed-harness
train sft-hsa-s1 --seed 1
