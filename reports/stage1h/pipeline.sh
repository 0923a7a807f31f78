#!/usr/bin/env bash
# Stage 1, attempt 8 end to end: attempt 4's pipeline (reports/stage1d/pipeline.sh: HSA s0 -> its T1/T2
# -> Fixed -> T1/T2 -> HSA s1 -> T1/T2 -> IFEval, then T3, for all; every step skipped when done,
# trainings and evaluations resume) with this folder's datagen.yaml and sft.yaml. From a checkout of
# the attempt's commit:
#   PYTHONPATH=$PWD/src RUNS=/work/runs/stage1h nohup bash reports/stage1h/pipeline.sh > /work/runs/stage1h.log 2>&1 &
ATTEMPT=reports/stage1h RUNS=${RUNS:-/work/runs/stage1h} exec bash "$(dirname "$0")/../stage1d/pipeline.sh"
