#!/usr/bin/env bash
# Stage 1 (issue 5): Fixed-Harness SFT vs HSA-SFT on SmolLM2-135M, then base / Fixed / HSA on the suites.
# Run from the repo root after `make install` and `make install-fast` (the evals use llama.cpp);
# wall times on the 2-core CPU box are in reports/stage1.md. The two trainings ran side by side
# (1 torch thread each), as did the evaluations.
set -euo pipefail
source .venv/bin/activate
mkdir -p runs/stage1

# 1. teacher data: 800 oracle episodes, half under train-split HSA variants, judge-filtered
hat datagen --n 800 --seed 0 --out runs/stage1/data --hsa-ratio 0.5 --json

# 2. equal data and steps: 100 rows, 100 steps of batch 1, LoRA r=16 on every linear layer
common=(--data runs/stage1/data --max-steps 100 --batch-size 1 --max-examples 100 --lr 5e-4 --threads 1
        --seed 0 --config reports/stage1/sft.yaml --json)
hat train sft "${common[@]}" --out runs/stage1/sft-fixed --fixed-harness &
hat train sft "${common[@]}" --out runs/stage1/sft-hsa &
wait

# 3. the same suites, n and seeds for every model (llama.cpp backend; a PEFT folder as lora= is
#    converted to a GGUF LoRA once)
reports/stage1/eval.sh "llamacpp:smollm2?threads=1"          # all five suites; add suite:n args to re-run some
reports/stage1/eval.sh "llamacpp:smollm2?threads=1&lora=runs/stage1/sft-fixed" &
reports/stage1/eval.sh "llamacpp:smollm2?threads=1&lora=runs/stage1/sft-hsa" &
wait

# 4. table and plots
python reports/stage1/make_report.py --eval reports/stage1/eval \
  --model base=llamacpp_smollm2_threads_1 \
  --model fixed=llamacpp_smollm2_threads_1_lora_runs_stage1_sft-fixed \
  --model hsa=llamacpp_smollm2_threads_1_lora_runs_stage1_sft-hsa \
  --train fixed=runs/stage1/sft-fixed --train hsa=runs/stage1/sft-hsa --out reports/stage1

# 5. ship: the HSA-SFT adapter (fp16 copy) becomes the default model smollm2-hat
hat train export runs/stage1/sft-hsa src/hat/models/adapters/smollm2-hat --notes reports/stage1/card_notes.md
