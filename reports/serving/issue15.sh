#!/usr/bin/env bash
# Issue 15's measurements in one resumable script, for an idle machine (nothing else running: the
# figures are latencies). Each step writes its own folder under reports/serving/ and is skipped when
# that folder already has latency.json, so a cut-off session continues where it stopped.
#   make install-fast            # llama.cpp (once; ~30 min on 2 cores)
#   bash reports/serving/issue15.sh > /work/runs/issue15.log 2>&1 &
# Approximate wall time on the 2-core box: ~15 min per llama.cpp model row (C = 1/2/4/8, n = 30),
# ~30 min per transformers row; about 3 h in all.
set -euo pipefail
cd "$(dirname "$0")/../.."
H=.venv/bin/hat
COMMON=(--n 30 --warmup 4 --timeout 300)

step() {  # out-folder, then the rest of the hat bench latency arguments
  local out=reports/serving/$1
  shift
  if [[ -f $out/latency.json ]]; then echo "== $out: done, skipped"; return; fi
  echo "== $out: $(date -u +%H:%M:%S)"
  /usr/bin/time -f "$out wall %e s" "$H" bench latency "$@" "${COMMON[@]}" --out "$out"
}

# the merged GGUF of the shipped adapter, built once before any timing
.venv/bin/python -c "import hat.models.llamacpp_backend; from hat.models import load_model; load_model('llamacpp:smollm2-hat').close()"

# 1. Table 6 on the fast engine: the shipped model and the base, one instance and two
step table6-llamacpp --model 'llamacpp:smollm2-hat?threads=2' --model 'llamacpp:smollm2?threads=2' \
  --concurrency 1,2,4,8
step instances --model 'llamacpp:smollm2-hat?instances=2' --concurrency 1,2,4,8
# 2. Table 7: prompt-lookup speculative decoding off / 4 / 8 drafted tokens
step speculative --model 'llamacpp:smollm2-hat?threads=2' --speculative 0,4,8 --concurrency 1,2,4,8
# 3. ablations, one optimisation off at a time, at C = 1
step ablation-merge --model 'llamacpp:smollm2-hat?merge=0&threads=2' --concurrency 1
step ablation-f16 --model 'llamacpp:smollm2-hat?quant=f16&threads=2' --concurrency 1
# 4. Table 6 on transformers (the slow engine) for both models
step table6-transformers --model 'smollm2-hat?engine=transformers' --model smollm2 --concurrency 1,2,4,8
echo "== all done $(date -u +%H:%M:%S)"
