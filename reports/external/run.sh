#!/usr/bin/env bash
# Base SmolLM2 on the external suites, sized for a 2-core CPU session (see reports/external.md).
set -u
cd "$(dirname "$0")/../.."
H=.venv/bin/hat
for hsa in "" "--hsa"; do
  /usr/bin/time -f "rotbench $hsa wall %e s" $H eval --suite rotbench --model smollm2 --n 3 --max-new-tokens 128 $hsa --json --out reports/external
  /usr/bin/time -f "bfcl $hsa wall %e s" $H eval --suite bfcl --model smollm2 --n 3 --max-new-tokens 128 $hsa --json --out reports/external
done
/usr/bin/time -f "ifeval wall %e s" $H eval --suite ifeval --model smollm2 --n 100 --max-new-tokens 256 --json --out reports/external
