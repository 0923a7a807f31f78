#!/usr/bin/env bash
# Evaluate one model on the stage-1b suites: n = 100 per livestream suite, IFEval on all 541 prompts,
# evaluation seed 1 (stage 1 used 0; training data uses world seeds >= 10,000), batched float32
# greedy decoding (identical to unbatched, tested; `--dtype float32` pins it since `hat eval`'s default
# became bfloat16 on bf16 CPUs, so every model of an attempt is evaluated alike). Summaries and per-case progress go to
# reports/stage1b/eval/.
# usage: reports/stage1b/eval.sh <model spec> [suite:n ...]   (repo root, .venv active)
set -euo pipefail
model="$1"; shift
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(t1:100 t2:100 t3-tool:100 t3-prompt:100 ifeval:541)
out=${EVAL_OUT:-reports/stage1b/eval}  # stage1c/eval.sh sets its own folder
mkdir -p "$out"
for spec in "${suites[@]}"; do
  suite=${spec%%:*}; n=${spec##*:}
  case "$suite" in
    ifeval) extra=(--max-new-tokens 256) ;;
    *) extra=(--seed 1 --batch-size 16) ;;
  esac
  /usr/bin/time -f "$suite $model wall %e s" hat eval --suite "$suite" --model "$model" --n "$n" "${extra[@]}" --dtype float32 --resume \
    --json --out "$out"
done
