#!/usr/bin/env bash
# Base SmolLM2 (bundled Q4_1 GGUF on the llama.cpp backend, one thread) on the external suites.
# Sized for a 2-core CPU session: RoTBench/BFCL 3 items per level/category, plain and HSA-renamed;
# IFEval all 541 prompts at 256 new tokens.
set -u
cd "$(dirname "$0")/../.."
H=.venv/bin/hat
M="llamacpp:smollm2?threads=1"
for hsa in "" "--hsa"; do
  /usr/bin/time -f "rotbench $hsa wall %e s" $H eval --suite rotbench --model "$M" --n 3 --max-new-tokens 128 $hsa --json --out reports/external
  /usr/bin/time -f "bfcl $hsa wall %e s" $H eval --suite bfcl --model "$M" --n 3 --max-new-tokens 128 $hsa --json --out reports/external
done
/usr/bin/time -f "ifeval wall %e s" $H eval --suite ifeval --model "$M" --n 541 --max-new-tokens 256 --json --out reports/external
