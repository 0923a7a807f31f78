#!/usr/bin/env bash
# Stage 1, attempt 11 end to end, continued on any machine: attempt 8's resume script
# (reports/stage1h/resume.sh: restore the runs saved in reports/stage1k/resume/, then attempt 4's
# pipeline, reports/stage1d/pipeline.sh: HSA s0 -> T1/T2 -> Fixed -> T1/T2 -> HSA s1 -> T1/T2 ->
# IFEval -> T3, every step skipped when done, trainings and evaluations resumed) with this folder's
# datagen.yaml (richer train-split skill descriptions and decoys) and sft.yaml. From the repo root
# after `make install`:
#   PYTHONPATH=$PWD/src RUNS=/work/runs/stage1k nohup bash reports/stage1k/resume.sh > /work/runs/stage1k.log 2>&1 &
# Each session ends with, per unfinished or finished-but-unevaluated training:
#   ATTEMPT=reports/stage1k RUNS=/work/runs/stage1k bash reports/stage1h/save_run.sh <name>
ATTEMPT=reports/stage1k RUNS=${RUNS:-/work/runs/stage1k} exec bash "$(dirname "$0")/../stage1h/resume.sh"
