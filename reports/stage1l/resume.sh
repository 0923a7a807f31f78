#!/usr/bin/env bash
# Stage 1, attempt 11 end to end, continued on any machine: attempt 8's resume script
# (reports/stage1h/resume.sh: restore the runs saved in reports/stage1l/resume/) with this folder's
# order (reports/stage1l/pipeline.sh). From the repo root after `make install`:
#   PYTHONPATH=$PWD/src RUNS=/work/runs/stage1l nohup bash reports/stage1l/resume.sh > /work/runs/stage1l.log 2>&1 &
# Each session ends with, per unfinished or finished-but-unevaluated training:
#   ATTEMPT=reports/stage1l RUNS=/work/runs/stage1l bash reports/stage1h/save_run.sh <name>
# and, once generated, the replay rows are committed: cp /work/runs/stage1l/general/{data.jsonl,config.yaml} reports/stage1l/general/
ATTEMPT=reports/stage1l RUNS=${RUNS:-/work/runs/stage1l} PIPELINE=reports/stage1l/pipeline.sh \
  exec bash "$(dirname "$0")/../stage1h/resume.sh"
