#!/usr/bin/env bash
# Stage 1, attempt 10 end to end, continued on any machine: attempt 8's resume script
# (reports/stage1h/resume.sh: restore the runs saved in reports/stage1j/resume/, then attempt 4's
# pipeline, reports/stage1d/pipeline.sh: HSA s0 -> T1/T2 -> Fixed -> T1/T2 -> HSA s1 -> T1/T2 ->
# IFEval -> T3, every step skipped when done, trainings and evaluations resumed) with this folder's
# datagen.yaml (teacher skill-scan) and sft.yaml. From the repo root after `make install`:
#   PYTHONPATH=$PWD/src RUNS=/work/runs/stage1j nohup bash reports/stage1j/resume.sh > /work/runs/stage1j.log 2>&1 &
# Each session ends with, per unfinished or finished-but-unevaluated training:
#   ATTEMPT=reports/stage1j RUNS=/work/runs/stage1j bash reports/stage1h/save_run.sh <name>
ATTEMPT=reports/stage1j RUNS=${RUNS:-/work/runs/stage1j} exec bash "$(dirname "$0")/../stage1h/resume.sh"
