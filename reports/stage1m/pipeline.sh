#!/usr/bin/env bash
# Attempt 12 (issue 10): attempt 11 with the skill-scan-args teacher (reports/stage1m/datagen.yaml), in
# the order that decides the issue soonest: the target attempt 11 is closest to missing (the T1 - T2
# gap against half of Fixed-SFT's) needs one HSA seed and the Fixed-SFT, so those come first, each with
# T2, T1 and IFEval; then the second seed; then T3 for all three and the base. Every step is skipped when
# its output exists; trainings resume from their newest complete checkpoint, evaluations from their
# finished cases. The replay set is attempt 11's (3,000 prompts answered by the base; committed in
# reports/stage1l/general/). Run through reports/stage1m/resume.sh.
set -euo pipefail
source .venv/bin/activate
R=${RUNS:-/work/runs/stage1m}
A=${ATTEMPT:-reports/stage1m}  # attempt 13 (reports/stage1n/resume.sh) runs this order on its own folder
source reports/stage1d/eval_steps.sh
run() {  # the attempt's data, attempt 11's replay set, then one training
  ATTEMPT=$A RUNS=$R REPLAY=$R/general REPLAY_SRC=reports/stage1l/general REPLAY_N=3000 ONLY=$1 bash reports/stage1d/run.sh
}
run sft-hsa-s0
ev "hf:$R/sft-hsa-s0" t2:100 t1:100 ifeval:541
run sft-fixed
ev "hf:$R/sft-fixed" t2:100 t1:100 ifeval:541
run sft-hsa-s1
ev "hf:$R/sft-hsa-s1" t2:100 t1:100 ifeval:541
for m in "hf:$R/sft-hsa-s0" "hf:$R/sft-hsa-s1" "hf:$R/sft-fixed" smollm2; do ev "$m" t3-tool:100 t3-prompt:100; done
# The base model's T2 (never measured in attempts 2-12; base falls back on every episode, so this is the
# floor the table's T2 column lacks). Added 2026-12-06 after the T3 runs started.
ev smollm2 t2:100
