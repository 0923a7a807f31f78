#!/usr/bin/env bash
# Latency replay of base SmolLM2 behind `hat serve`, per backend, at concurrency 1, 2, 4.
# Sized for a 2-core CPU session: 3 counted requests per level, 1 warm-up.
set -u
cd "$(dirname "$0")/../.."
run_backend() {  # name spec port
  local name=$1 spec=$2 port=$3
  .venv/bin/hat serve --model "$spec" --port "$port" --max-concurrency 1 --max-queue 16 --timeout 300 \
      --log-level warning > "reports/serving/$name.server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 1; done
  /usr/bin/time -f "$name bench wall %e s" .venv/bin/hat bench latency --url "http://127.0.0.1:$port" \
      --concurrency 1,2,4 --n 3 --warmup 1 --timeout 600 --json --out "reports/serving/$name" \
      > "reports/serving/$name.json"
  kill "$pid"; wait "$pid" 2>/dev/null
}
run_backend llamacpp "llamacpp:smollm2?threads=1" 8102
run_backend transformers smollm2 8101
