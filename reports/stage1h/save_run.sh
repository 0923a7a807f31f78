#!/usr/bin/env bash
# Keep a training of attempt 8 across machines: copy what a later session needs to continue it (or,
# when it has finished, to evaluate it) into reports/stage1h/resume/<name>/, to be committed.
# - finished run (sft_result.json present): the final adapter (float32, as evaluated) with its
#   configs, result and step log;
# - running or stopped run: its newest complete checkpoint (adapter, optimizer, scheduler, RNG state,
#   trainer state; ~59 MB), the step log and the rows' sha256, for `hat train sft --resume`.
# Tokenizer files are left out (the base model's, rebuilt on load). An older saved copy is replaced.
# usage: reports/stage1h/save_run.sh <name, e.g. sft-hsa-s0>     (repo root; RUNS as for resume.sh)
# Later attempts reuse it: ATTEMPT=reports/stage1i RUNS=/work/runs/stage1i reports/stage1h/save_run.sh <name>
# Any stage's run: SFT (sft_result.json, steps.jsonl), OPD (opd_result.json, opd_log.jsonl) and RL
# (rl_result.json, rl_diagnostics.jsonl); the files a stage does not write are skipped.
set -euo pipefail
name="$1"
A=${ATTEMPT:-reports/stage1h}
R=${RUNS:-/work/runs/stage1h}
run="$R/$name"
dest="$A/resume/$name"
skip=(--exclude tokenizer.json --exclude tokenizer_config.json --exclude README.md)
rm -rf "$dest.new"
mkdir -p "$dest.new"
logs=(steps.jsonl examples.sha256 sft_config.yaml opd_config.yaml opd_log.jsonl rl_config.yaml rl_diagnostics.jsonl)
if ls "$run"/*_result.json >/dev/null 2>&1; then
  for f in adapter_model.safetensors adapter_config.json sft_result.json opd_result.json rl_result.json \
    rl_diagnostics.png trainer_state.json chat_template.jinja "${logs[@]}"; do
    [ -f "$run/$f" ] && cp "$run/$f" "$dest.new/"
  done
  what="final adapter"
else
  ckpt=$(.venv/bin/python -c "from hat.train.checkpoints import latest_complete_checkpoint as l; p, _ = l('$run'); print(p or '')")
  [ -n "$ckpt" ] || { echo "save_run.sh: no complete checkpoint in $run" >&2; exit 1; }
  tar -C "$(dirname "$ckpt")" "${skip[@]}" -cf - "$(basename "$ckpt")" | tar -C "$dest.new" -xf -
  for f in "${logs[@]}"; do [ -f "$run/$f" ] && cp "$run/$f" "$dest.new/"; done
  what=$(basename "$ckpt")
fi
rm -rf "$dest"
mv "$dest.new" "$dest"
echo "save_run.sh: $name: $what -> $dest ($(du -sh "$dest" | cut -f1))"
