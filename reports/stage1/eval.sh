#!/usr/bin/env bash
# Evaluate one model on the stage-1 suites (same n and seeds for every model).
# usage: reports/stage1/eval.sh <model spec>    (run from the repo root with .venv active)
set -euo pipefail
model="$1"
out=reports/stage1/eval
mkdir -p "$out"
for spec in t1:40 t2:40 t3-tool:24 t3-prompt:24; do
  suite=${spec%%:*}; n=${spec##*:}
  /usr/bin/time -f "$suite $model wall %e s" hat eval --suite "$suite" --model "$model" --n "$n" --seed 0 --json --out "$out"
done
/usr/bin/time -f "ifeval $model wall %e s" hat eval --suite ifeval --model "$model" --n 50 --max-new-tokens 256 --json --out "$out"
