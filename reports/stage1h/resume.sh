#!/usr/bin/env bash
# Stage 1, attempt 8, continued on any machine: the HSA seed-0 training (3.2 h of steps) is longer
# than a session, so its last complete checkpoint is committed in reports/stage1h/resume/ (adapter,
# optimizer, scheduler and RNG state, step log, the rows' sha256). This copies it into the run folder
# when that folder has no checkpoint of its own, then runs the attempt's pipeline, which regenerates
# the data and replay rows (seeded; reproduced bit for bit across machines, reports/stage1b.md
# attempt 8), resumes the training exactly (hat train sft --resume checks the rows' sha256) and goes
# on to the evaluations and the other models. From the repo root after `make install`:
#   PYTHONPATH=$PWD/src RUNS=/work/runs/stage1h nohup bash reports/stage1h/resume.sh > /work/runs/stage1h.log 2>&1 &
set -euo pipefail
R=${RUNS:-/work/runs/stage1h}
saved=reports/stage1h/resume/sft-hsa-s0
if [ -d "$saved" ] && ! ls -d "$R"/sft-hsa-s0/checkpoint-* >/dev/null 2>&1; then
  mkdir -p "$R/sft-hsa-s0"
  cp -r "$saved"/. "$R/sft-hsa-s0/"
  echo "resume.sh: copied $(ls -d "$saved"/checkpoint-* | xargs -n1 basename) into $R/sft-hsa-s0"
fi
RUNS=$R exec bash "$(dirname "$0")/pipeline.sh"
