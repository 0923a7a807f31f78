#!/usr/bin/env bash
# Attempt 10 from 2026-12-04 on, in the order that decides the issue soonest. HSA seed 0 and its
# evaluations, and the Fixed-SFT's T1/T2 summaries, are done; the Fixed-SFT's adapter and case logs
# were lost with the machine of a cut-off session, so the Fixed-SFT is trained again as `sft-fixed-b`
# (same rows, settings and seed) and evaluated with case logs. Every step is skipped when its output
# exists, trainings resume from their newest complete checkpoint, evaluations from their finished
# cases. Run through reports/stage1j/resume.sh (which restores the runs saved in stage1j/resume/).
set -euo pipefail
source .venv/bin/activate
R=${RUNS:-/work/runs/stage1j}
A=reports/stage1j
source reports/stage1d/eval_steps.sh
# 1. the second HSA seed: the targets use the mean of the seeds
ATTEMPT=$A RUNS=$R ONLY=sft-hsa-s1 bash reports/stage1d/run.sh
ev "hf:$R/sft-hsa-s1" t1:100 t2:100 ifeval:541
# 2. the base model on the changed-harness suites at evaluation seed 1 (its T1 and IFEval are in stage1b/eval/)
ev smollm2 t2:100
# 3. T3 for the HSA seeds
for m in "hf:$R/sft-hsa-s0" "hf:$R/sft-hsa-s1"; do ev "$m" t3-tool:100 t3-prompt:100; done
# 4. the Fixed-SFT again, with its adapter, loss log and case logs kept
ATTEMPT=$A RUNS=$R FIXED_NAME=sft-fixed-b ONLY=sft-fixed-b bash reports/stage1d/run.sh
ev "hf:$R/sft-fixed-b" t1:100 t2:100 ifeval:541 t3-tool:100 t3-prompt:100
ev smollm2 t3-tool:100 t3-prompt:100
