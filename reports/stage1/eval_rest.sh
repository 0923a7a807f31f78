#!/usr/bin/env bash
# Re-run of the suites that the trace-serialisation bug (fixed in the same commit) cut short.
set -euo pipefail
model="$1"; shift
out=reports/stage1/eval
for spec in "$@"; do
  suite=${spec%%:*}; n=${spec##*:}
  if [ "$suite" = ifeval ]; then
    /usr/bin/time -f "$suite $model wall %e s" hat eval --suite ifeval --model "$model" --n "$n" --max-new-tokens 256 --json --out "$out"
  else
    /usr/bin/time -f "$suite $model wall %e s" hat eval --suite "$suite" --model "$model" --n "$n" --seed 0 --json --out "$out"
  fi
done
