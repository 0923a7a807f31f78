#!/usr/bin/env bash
# Stage 1, attempt 13 end to end, continued on any machine: attempt 8's resume script
# (reports/stage1h/resume.sh: restore the runs saved in reports/stage1n/resume/) with attempt 12's
# order (reports/stage1m/pipeline.sh) on this folder's configs. From the repo root after `make install`:
#   PYTHONPATH=$PWD/src RUNS=/work/runs/stage1n nohup bash reports/stage1n/resume.sh > /work/runs/stage1n.log 2>&1 &
# Each session ends with, per unfinished or finished training:
#   ATTEMPT=reports/stage1n RUNS=/work/runs/stage1n bash reports/stage1h/save_run.sh <name>
ATTEMPT=reports/stage1n RUNS=${RUNS:-/work/runs/stage1n} PIPELINE=reports/stage1m/pipeline.sh \
  exec bash "$(dirname "$0")/../stage1h/resume.sh"
