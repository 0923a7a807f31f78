#!/usr/bin/env bash
# Attempt 4 end to end, in the order that decides it soonest; every step is skipped when its output
# exists and resumes when interrupted (trainings from their last complete checkpoint, evaluations
# from their finished cases). Run from a checkout of the attempt's commit (repo root, .venv present):
#   RUNS=/work/runs/stage1d nohup reports/stage1d/pipeline.sh > /work/runs/stage1d.log 2>&1 &
set -euo pipefail
source .venv/bin/activate
R=${RUNS:-/work/runs/stage1d}
A=${ATTEMPT:-reports/stage1d}  # the attempt's folder (later attempts reuse this script)
source reports/stage1d/eval_steps.sh
ATTEMPT=$A RUNS=$R ONLY=sft-hsa-s0 bash reports/stage1d/run.sh
ev "hf:$R/sft-hsa-s0" t1:100 t2:100
ATTEMPT=$A RUNS=$R ONLY=sft-fixed bash reports/stage1d/run.sh
ev "hf:$R/sft-fixed" t1:100 t2:100
ATTEMPT=$A RUNS=$R ONLY=sft-hsa-s1 bash reports/stage1d/run.sh
ev "hf:$R/sft-hsa-s1" t1:100 t2:100
for m in "hf:$R/sft-hsa-s0" "hf:$R/sft-fixed" "hf:$R/sft-hsa-s1"; do ev "$m" ifeval:541; done  # a target first
for m in "hf:$R/sft-hsa-s0" "hf:$R/sft-fixed" "hf:$R/sft-hsa-s1"; do ev "$m" t3-tool:100 t3-prompt:100; done
