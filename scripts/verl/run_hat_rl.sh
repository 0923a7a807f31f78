#!/usr/bin/env bash
# HSA-RL (HAT's stage 3) on verl: vLLM rollouts through HAT's runtime, FSDP training, HAT's
# segment-decomposed GDPO advantage. Single node, all visible GPUs. Details: docs/verl.md.
#
#   scripts/verl/run_hat_rl.sh [hydra overrides ...]
#
# Environment (all optional):
#   MODEL    policy: a HuggingFace id or folder            (HuggingFaceTB/SmolLM2-135M-Instruct)
#   ADAPTER  a HAT LoRA adapter folder to continue (stage 1/2 output); its r and alpha are used
#   NGPUS    GPUs on this node                              (all that nvidia-smi lists)
#   DATA     folder of train.parquet / val.parquet          (data/verl_hat_rl; written if missing)
#   N_TRAIN, N_VAL, EPISODE_SEED   episodes written there   (2048, 64, 1)
#   OUT      checkpoint folder                              (checkpoints/hat_rl)
#   PYTHON   the interpreter of the verl environment        (python)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python}"
MODEL="${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}"
DATA="${DATA:-data/verl_hat_rl}"
OUT="${OUT:-checkpoints/hat_rl}"
NGPUS="${NGPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}"
if [ "${NGPUS}" -lt 1 ]; then
  echo "no GPU found (set NGPUS); on one machine without GPUs use: hat train rl" >&2
  exit 2
fi

"${PYTHON}" -c "import hat.train.verl_adapter as a, sys; sys.exit(a.VERL_IMPORT_ERROR and f'verl does not import: {a.VERL_IMPORT_ERROR}')"

# absolute paths: Ray workers do not share the launching shell's working directory
mkdir -p "${DATA}" "${OUT}"
DATA="$(cd "${DATA}" && pwd)"
OUT="$(cd "${OUT}" && pwd)"
if [ ! -f "${DATA}/train.parquet" ] || [ ! -f "${DATA}/val.parquet" ]; then
  "${PYTHON}" -m hat.train.verl_adapter --out "${DATA}" \
    --train "${N_TRAIN:-2048}" --val "${N_VAL:-64}" --seed "${EPISODE_SEED:-1}"
fi

lora=()
if [ -n "${ADAPTER:-}" ]; then
  read -r rank alpha < <("${PYTHON}" -c "import json, sys; c = json.load(open(sys.argv[1] + '/adapter_config.json')); print(c['r'], c['lora_alpha'])" "${ADAPTER}")
  lora=(
    "actor_rollout_ref.model.lora_adapter_path=${ADAPTER}"
    "actor_rollout_ref.model.lora_rank=${rank}"
    "actor_rollout_ref.model.lora_alpha=${alpha}"
    "actor_rollout_ref.model.target_modules=all-linear"
    "actor_rollout_ref.rollout.load_format=safetensors"
    "actor_rollout_ref.actor.optim.lr=1e-5"
  )
fi

# the driver imports the adapter too (the YAML passes the same variable to every Ray worker)
export VERL_USE_EXTERNAL_MODULES=hat.train.verl_adapter
exec "${PYTHON}" -m verl.trainer.main_ppo \
  --config-path="${HERE}" --config-name=hat_rl \
  actor_rollout_ref.model.path="${MODEL}" \
  data.train_files="${DATA}/train.parquet" \
  data.val_files="${DATA}/val.parquet" \
  trainer.n_gpus_per_node="${NGPUS}" \
  trainer.default_local_dir="${OUT}" \
  ${lora[@]+"${lora[@]}"} "$@"
