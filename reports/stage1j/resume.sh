#!/usr/bin/env bash
# Stage 1, attempt 10 end to end, continued on any machine: attempt 8's resume script
# (reports/stage1h/resume.sh: restore the runs saved in reports/stage1j/resume/) with this folder's
# datagen.yaml (teacher skill-scan), sft.yaml and, since 2026-12-04, its own order
# (reports/stage1j/pipeline.sh: HSA seed 1 -> its T1/T2/IFEval -> base T2 -> T3 for the HSA seeds ->
# the Fixed-SFT trained again as sft-fixed-b -> its evaluations -> base T3; every step skipped when
# done, trainings and evaluations resumed). From the repo root after `make install`:
#   PYTHONPATH=$PWD/src RUNS=/work/runs/stage1j nohup bash reports/stage1j/resume.sh > /work/runs/stage1j.log 2>&1 &
# Each session ends with, per unfinished or finished-but-unevaluated training:
#   ATTEMPT=reports/stage1j RUNS=/work/runs/stage1j bash reports/stage1h/save_run.sh <name>
ATTEMPT=reports/stage1j RUNS=${RUNS:-/work/runs/stage1j} PIPELINE=reports/stage1j/pipeline.sh \
  exec bash "$(dirname "$0")/../stage1h/resume.sh"
