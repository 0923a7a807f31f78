#!/usr/bin/env bash
# Evaluate one model on the stage-1 suites (same n and seeds for every model).
# usage: reports/stage1/eval.sh <model spec> [suite:n ...]   (run from the repo root with .venv active)
# Without suites: t1:40 t2:40 t3-tool:24 t3-prompt:24 ifeval:50. Naming suites re-runs only those.
set -euo pipefail
model="$1"; shift
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(t1:40 t2:40 t3-tool:24 t3-prompt:24 ifeval:50)
out=reports/stage1/eval
mkdir -p "$out"
for spec in "${suites[@]}"; do
  suite=${spec%%:*}; n=${spec##*:}
  case "$suite" in
    ifeval) extra=(--max-new-tokens 256) ;;
    *) extra=(--seed 0) ;;
  esac
  /usr/bin/time -f "$suite $model wall %e s" hat eval --suite "$suite" --model "$model" --n "$n" "${extra[@]}" --json --out "$out"
done
