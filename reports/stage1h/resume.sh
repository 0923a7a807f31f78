#!/usr/bin/env bash
# Stage 1, attempt 8, continued on any machine: a training here (~3.2 h of steps per model) is longer
# than a session, so each session ends by committing what its runs need to go on
# (reports/stage1h/save_run.sh <name>: the newest complete checkpoint of a running training, or the
# final adapter of a finished one) in reports/stage1h/resume/<name>/. This copies each saved run into
# the run folder when that folder has no checkpoint or result of its own, then runs the attempt's
# pipeline, which regenerates the data and replay rows (seeded; reproduced bit for bit across
# machines, reports/stage1b.md attempt 8), resumes the training exactly (hat train sft --resume
# checks the rows' sha256), evaluates, and goes on to the other models. From the repo root after
# `make install`:
#   PYTHONPATH=$PWD/src RUNS=/work/runs/stage1h nohup bash reports/stage1h/resume.sh > /work/runs/stage1h.log 2>&1 &
# Later attempts reuse it with their folder: ATTEMPT=reports/stage1i RUNS=/work/runs/stage1i.
set -euo pipefail
A=${ATTEMPT:-reports/stage1h}
R=${RUNS:-/work/runs/stage1h}
for saved in "$A"/resume/*/; do
  [ -d "$saved" ] || continue
  name=$(basename "$saved")
  if ! ls -d "$R/$name"/checkpoint-* >/dev/null 2>&1 && ! ls "$R/$name"/*_result.json >/dev/null 2>&1; then
    mkdir -p "$R/$name"
    cp -r "$saved". "$R/$name/"
    echo "resume.sh: restored $name into $R/$name"
  fi
done
ATTEMPT=$A RUNS=$R exec bash "${PIPELINE:-$(dirname "$0")/../stage1d/pipeline.sh}"  # PIPELINE: an attempt's own order
