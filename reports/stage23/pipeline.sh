#!/usr/bin/env bash
# Issue 14: stages 2 and 3 on the stage-1 models, then the full HAT table — in the order that gives
# the main rows first. Every step is skipped when its output exists; trainings resume from their
# newest complete checkpoint (--resume), evaluations from their finished cases. Run through
# reports/stage23/resume.sh (restores runs saved in reports/stage23/resume/ on a fresh machine).
#
# Inputs: the stage-1 models of attempt 12 (reports/stage1m/): HSA-SFT seed 1 (shipped as
# smollm2-hat) and Fixed-SFT, their final adapters restored from reports/stage1m/resume/ when the run
# folder lacks them. Their rows of the table (and base's) are attempt 12's evaluations (same suites,
# n and evaluation seed).
#
# Sizes (2 cores; override by environment): OPD 512 general prompts, 8 per step (64 steps; two
# learning rates, stage 3 continues the one OPD_START names);
# RL 256 training episodes (datagen seed, never an evaluation seed), G = 4 rollouts per group,
# 8 rollouts per step (2 groups, trained as 2 micro-batches of one group each, its prompt encoded once
# (--share-prompts, the default): 8 rows at once were OOM-killed at 23 GB), RL_STEPS = 100 steps = 200 groups per RL run.
set -euo pipefail
source .venv/bin/activate
R=${RUNS:-/work/runs/stage23}
S1=${STAGE1_RUNS:-/work/runs/stage1m}
A=reports/stage23
RL_STEPS=${RL_STEPS:-100}
RL_LR=${RL_LR:-1e-5}    # hat train rl's default: 10× TRL's full fine-tuning rate, for LoRA
source reports/stage1d/eval_steps.sh
mkdir -p "$R"

finished() { ls "$1"/*_result.json >/dev/null 2>&1; }
resume_flag() { ls -d "$1"/checkpoint-* >/dev/null 2>&1 && echo --resume || true; }
stage1() {  # a stage-1 run folder with its final adapter (restored from the committed copy if need be)
  local run="$S1/$1" saved="reports/stage1m/resume/$1"
  if ! finished "$run" && [ -f "$saved/sft_result.json" ]; then mkdir -p "$run" && cp -r "$saved"/. "$run/"; fi
  finished "$run" || { echo "pipeline.sh: stage-1 model $run has not finished training" >&2; exit 1; }
  echo "$run"
}
# The on-policy trainings run under jemalloc that never returns freed pages (hat.allocator's
# ON_POLICY_MALLOC_CONF: an OPD step 70 s instead of 120-180 s on this EPYC), but their resident
# memory then grows ~0.5 GB a step (13 GB at step 3, 24 GB and the OOM killer at step 25 on a 24 GB
# machine). guarded() runs a training and, when its resident memory passes MEM_LIMIT_GB, stops it
# and resumes it from its newest complete checkpoint in a fresh process (resume is exact).
# A restart repeats the steps since that checkpoint exactly (same rollouts, same allocations), so
# when one ends at the limit again without a new checkpoint (rl-hat, steps 81-82: four restarts in
# a row), the next process runs under an allocator that returns freed pages after a minute
# (bounded memory, ~1.5x slower steps) until it saves a checkpoint, and is then restarted as usual;
# if even that stalls, the limit rises to BOUNDED_LIMIT_GB for it.
MEM_LIMIT_GB=${MEM_LIMIT_GB:-17}
BOUNDED_LIMIT_GB=${BOUNDED_LIMIT_GB:-21}
BOUNDED_MALLOC_CONF="dirty_decay_ms:60000,muzzy_decay_ms:0"
newest() {  # step of the newest checkpoint whose trainer_state.json (written last) exists
  ls "$1"/checkpoint-*/trainer_state.json 2>/dev/null | sed 's#.*checkpoint-\([0-9]*\)/.*#\1#' | sort -n | tail -1
  true  # no checkpoint yet: an empty answer, not a failure under pipefail
}
guarded() {  # out, command...
  local out="$1"; shift
  local stuck=0
  until finished "$out"; do
    local before limit=$MEM_LIMIT_GB; before=$(newest "$out")
    if [ "$stuck" -gt 0 ]; then
      [ "$stuck" -gt 1 ] && limit=$BOUNDED_LIMIT_GB
      echo "pipeline.sh: $out made no progress since checkpoint-$before; next run returns freed pages (limit $limit GB)" >&2
      MALLOC_CONF="$BOUNDED_MALLOC_CONF" "$@" $(resume_flag "$out") &
    else
      "$@" $(resume_flag "$out") &
    fi
    local pid=$! killed=0 progressed=0
    while kill -0 "$pid" 2>/dev/null; do
      sleep 10
      local kb; kb=$(ps -o rss= --ppid "$pid" -p "$pid" 2>/dev/null | sort -n | tail -1 | tr -d ' ') || kb=""  # gone: ps fails
      if [ -n "$kb" ] && [ "$kb" -gt $((limit * 1024 * 1024)) ]; then
        echo "pipeline.sh: $out at $((kb / 1024 / 1024)) GB resident; restarting from its last checkpoint" >&2
        pkill -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; killed=1  # (set -e)
      elif [ "$stuck" -gt 0 ] && [ "$(newest "$out")" != "$before" ] && ! finished "$out"; then
        echo "pipeline.sh: $out past checkpoint-$before; back to the fast allocator" >&2
        sleep 5; pkill -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; killed=1 progressed=1
      fi
    done
    wait "$pid" || [ "$killed" = 1 ] || return 1
    if [ "$killed" = 1 ] && [ "$progressed" = 0 ] && [ "$(newest "$out")" = "$before" ]; then
      stuck=$((stuck + 1))
    else
      stuck=0
    fi
  done
}
opd() {  # student, out, learning rate
  guarded "$2" hat train opd --model "$1" --out "$2" --n-prompts 512 --batch-size 8 --save-steps 2 --threads 2 --lr "$3"
}
rl() {  # start, out, extra options...
  local start="$1" out="$2"; shift 2
  guarded "$out" hat train rl --model "$start" --out "$out" --episodes 256 -G 4 --batch-size 4 --grad-accum 2 \
    --max-steps "$RL_STEPS" --lr "$RL_LR" --save-steps 2 --threads 2 "$@"
}
SUITES=(ifeval:541 t1:100 t2:100 t3-tool:100 t3-prompt:100)
# the RL rows: the suites of stage 3's targets (T2, T3-tool) first, so a session that ends mid-evaluation has them
RL_SUITES=(t2:100 t3-tool:100 t1:100 t3-prompt:100 ifeval:541)

HSA=$(stage1 sft-hsa-s1)
# Stage 2, attempt 1: lr 1e-4 (64 steps) — IFEval 15.90, but T1 71.2 -> 57.6 (29 fallbacks:
# ungrounded numbers, repetition loops). Attempt 2: the same run at a fifth of the rate.
opd "$HSA" "$R/opd-hsa" 1e-4
opd "$HSA" "$R/opd-hsa-lr2e-5" 2e-5
# Attempt 2's deciding suites (T1, T2, IFEval) first: attempt 1 already misses T1 by 13.5 and T2 by 6.7
# (its T3s come last). Attempt 2: T1 69.76, T2 48.32 (HSA-SFT 71.15 / 46.4) — the RL start.
ev "hf:$R/opd-hsa" t2:100
ev "hf:$R/opd-hsa-lr2e-5" t1:100 t2:100 ifeval:541
ev "hf:$R/opd-hsa-lr2e-5" "${SUITES[@]}"
# Stage 3 continues the OPD attempt chosen from the evaluations above (reports/hat.md § Stage 2);
# OPD_START names it, and without it the pipeline stops here.
[ -n "${OPD_START:-}" ] || { echo "pipeline.sh: set OPD_START=<the chosen opd run folder> to go on to RL" >&2; exit 0; }
OPD_LR=$(python -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['learning_rate'])" "$OPD_START/opd_config.yaml")
rl "$OPD_START" "$R/rl-hat"                                   # HAT: segment-decomposed GDPO, HSA at RL
ev "hf:$R/rl-hat" "${RL_SUITES[@]}"
rl "$OPD_START" "$R/rl-grpo" --advantage grpo                 # ablation: plain GRPO
ev "hf:$R/rl-grpo" "${RL_SUITES[@]}"
rl "$OPD_START" "$R/rl-nohsa" --hsa-prob 0                    # ablation: RL on the production harness only
ev "hf:$R/rl-nohsa" "${RL_SUITES[@]}"
# Figure-5 grid (HSA at SFT × HSA at RL): the Fixed-SFT model through the same stages (OPD at the chosen rate)
FIXED=$(stage1 sft-fixed)
opd "$FIXED" "$R/opd-fixed" "$OPD_LR"
rl "$R/opd-fixed" "$R/rl-fixed-hsa"
ev "hf:$R/rl-fixed-hsa" "${RL_SUITES[@]}"
rl "$R/opd-fixed" "$R/rl-fixed-nohsa" --hsa-prob 0
ev "hf:$R/rl-fixed-nohsa" "${RL_SUITES[@]}"
ev "hf:$R/opd-hsa" "${SUITES[@]}"                              # stage-2 attempt 1's T3 (not an RL start)
