#!/usr/bin/env bash
# Attempt 12 (issue 10), prepared: attempt 11 with the LoRA delta summed in float32 under bf16 autocast
# (reports/stage1m/sft.yaml). Run only if attempt 11 misses the IFEval target; the same order as attempt
# 11 (IFEval first for each seed), the same committed replay rows (reports/stage1l/general). Every step
# is skipped when its output exists; trainings resume from their newest complete checkpoint. Run through
# reports/stage1m/resume.sh from a checkout at or after the commit that added this file (the fused sum).
set -euo pipefail
source .venv/bin/activate
R=${RUNS:-/work/runs/stage1m}
A=reports/stage1m
source reports/stage1d/eval_steps.sh
run() {
  ATTEMPT=$A RUNS=$R REPLAY=$R/general REPLAY_SRC=reports/stage1l/general REPLAY_N=3000 ONLY=$1 bash reports/stage1d/run.sh
}
run sft-hsa-s0
ev "hf:$R/sft-hsa-s0" ifeval:541 t1:100 t2:100
run sft-hsa-s1
ev "hf:$R/sft-hsa-s1" ifeval:541 t1:100 t2:100
run sft-fixed
ev "hf:$R/sft-fixed" t1:100 t2:100 ifeval:541
for m in "hf:$R/sft-hsa-s0" "hf:$R/sft-hsa-s1" "hf:$R/sft-fixed" smollm2; do ev "$m" t3-tool:100 t3-prompt:100; done
