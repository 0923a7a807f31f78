#!/usr/bin/env bash
# Attempt 2's evaluations not yet run at the end of 2026-11-30 (issue 10), in order of what they
# decide; each is resumable (`hat eval` appends finished cases; rerun the line to continue).
# Run from the frozen attempt-2 checkout (commit d584e1a) so the runtime matches the first numbers:
#   git worktree add /work/exp d584e1a && cd /work/exp && ln -s /work/main/.venv .venv
#   PYTHONPATH=$PWD/src bash /work/main/reports/stage1b/remaining.sh
set -euo pipefail
source .venv/bin/activate
R=${RUNS:-/work/runs/stage1b}
E=reports/stage1b/eval.sh
[ -f reports/stage1b/eval/ifeval_hf__work_runs_stage1b_sft-hsa-s0.json ] || $E hf:$R/sft-hsa-s0 ifeval:541
[ -f reports/stage1b/eval/ifeval_smollm2.json ] || $E smollm2 ifeval:541
[ -f reports/stage1b/eval/ifeval_hf__work_runs_stage1b_sft-fixed.json ] || $E hf:$R/sft-fixed ifeval:541
[ -f reports/stage1b/eval/t2_smollm2.json ] || $E smollm2 t2:100
for m in smollm2 hf:$R/sft-fixed hf:$R/sft-hsa-s0; do $E "$m" t3-tool:100 t3-prompt:100; done
