"""Does SFT on two cores gain from two single-threaded workers (data parallel) over one
two-threaded process? One training-like forward + backward (SmolLM2-135M shapes, random weights,
one 1,200-token sequence, bf16 autocast, SDPA attention, loss on the last 150 positions), timed on
two threads, on one, and as two single-threaded workers stepping at once.

    .venv/bin/python benchmarks/train_threads.py [--tokens 1200] [--steps 2]

Run it on an idle machine. Prints one JSON line (seconds per step; for the two workers, per step of
each, i.e. wall / (2 x steps)).
"""

from __future__ import annotations

import argparse
import json
import threading
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1200)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, 49000, (1, args.tokens))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = model.model(input_ids=ids).last_hidden_state
            loss = hidden[:, -150:].float().pow(2).mean()
        loss.backward()

    def steps() -> None:
        for _ in range(args.steps):
            step()

    result: dict[str, float] = {}
    for threads in (2, 1):
        torch.set_num_threads(threads)
        step()  # warm-up
        start = time.perf_counter()
        steps()
        result[f"s_per_step_{threads}_threads"] = round((time.perf_counter() - start) / args.steps, 2)
    torch.set_num_threads(1)
    workers = [threading.Thread(target=steps) for _ in range(2)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    result["s_per_step_two_1_thread_workers"] = round((time.perf_counter() - start) / (2 * args.steps), 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
