#!/usr/bin/env bash
# Stage 1, attempt 12 end to end, continued on any machine: attempt 8's resume script
# (reports/stage1h/resume.sh: restore the runs saved in reports/stage1m/resume/) with this folder's
# order (reports/stage1m/pipeline.sh). From the repo root after `make install`:
#   PYTHONPATH=$PWD/src RUNS=/work/runs/stage1m nohup bash reports/stage1m/resume.sh > /work/runs/stage1m.log 2>&1 &
# Each session ends with, per unfinished or finished training:
#   ATTEMPT=reports/stage1m RUNS=/work/runs/stage1m bash reports/stage1h/save_run.sh <name>
ATTEMPT=reports/stage1m RUNS=${RUNS:-/work/runs/stage1m} PIPELINE=reports/stage1m/pipeline.sh \
  exec bash "$(dirname "$0")/../stage1h/resume.sh"
