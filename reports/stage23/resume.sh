#!/usr/bin/env bash
# Issue 14's pipeline (reports/stage23/pipeline.sh), continued on any machine: restore the runs
# saved in reports/stage23/resume/ (reports/stage1h/resume.sh), then run the pipeline. From the repo
# root after `make install`:
#   OPD_START=/work/runs/stage23/opd-hsa-lr2e-5 PYTHONPATH=$PWD/src RUNS=/work/runs/stage23 \
#     nohup bash reports/stage23/resume.sh > /work/runs/stage23.log 2>&1 &
# (OPD_START: the stage-2 run RL continues, chosen in reports/hat.md § Stage 2; without it the
# pipeline stops after stage 2.)
# Each session ends with, per unfinished or finished-but-unevaluated training:
#   ATTEMPT=reports/stage23 RUNS=/work/runs/stage23 bash reports/stage1h/save_run.sh <name>
ATTEMPT=reports/stage23 RUNS=${RUNS:-/work/runs/stage23} PIPELINE=reports/stage23/pipeline.sh \
  exec bash "$(dirname "$0")/../stage1h/resume.sh"
