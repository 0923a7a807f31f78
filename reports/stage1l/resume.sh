#!/usr/bin/env bash
# Stage 1, attempt 11 end to end, continued on any machine: attempt 8's resume script
# (reports/stage1h/resume.sh: restore the runs saved in reports/stage1l/resume/) with this folder's
# order (reports/stage1l/pipeline.sh). Run it from a checkout at bf95a2c, the code attempt 11 started
# with (later commits sum LoRA deltas in float32 under bf16 autocast; attempt 11's seeds and Fixed-SFT
# must all train with PEFT's bf16 sum to stay comparable), after `make install` in the main checkout:
#   git worktree add --detach /work/pipe bf95a2c && ln -s /work/main/.venv /work/pipe/.venv
#   cp -r /work/main/reports/stage1l/{eval,resume} /work/pipe/reports/stage1l/   # saved runs, finished evaluations
#   cd /work/pipe && PYTHONPATH=$PWD/src RUNS=/work/runs/stage1l nohup bash reports/stage1l/resume.sh > /work/runs/stage1l.log 2>&1 &
# and copy new results back: cp /work/pipe/reports/stage1l/eval/* /work/main/reports/stage1l/eval/
# Each session ends with, per unfinished or finished-but-unevaluated training:
#   ATTEMPT=reports/stage1l RUNS=/work/runs/stage1l bash reports/stage1h/save_run.sh <name>
# and, once generated, the replay rows are committed: cp /work/runs/stage1l/general/{data.jsonl,config.yaml} reports/stage1l/general/
ATTEMPT=reports/stage1l RUNS=${RUNS:-/work/runs/stage1l} PIPELINE=reports/stage1l/pipeline.sh \
  exec bash "$(dirname "$0")/../stage1h/resume.sh"
