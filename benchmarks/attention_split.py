"""Attention of one packed SFT bucket, three ways: is there a faster exact kernel than SDPA's?

    python benchmarks/attention_split.py [--rows 4] [--prefix 730] [--cont 650] [--threads 2]

The packed fast path (``hat.train.packing``, ``prefix-cache``) runs a bucket of continuations on top
of the shared prefix's keys/values: each continuation's queries see the prefix and their own
earlier tokens. Today that is one SDPA call per layer on keys ``cat(prefix expanded to the bucket,
own keys)``, repeated from 3 key/value heads to 9 query heads, under a 4D mask. Attention is about
half of a packed bf16 step on this CPU (``reports/stage1b.md`` §1), so this measures, for one layer,
forward + backward, bf16, SmolLM2's head layout (9 query heads, 3 key/value heads, dim 64):

- **current**: the call above;
- **split**: the same attention as two exact SDPA calls whose outputs a log-sum-exp merge would
  combine (the merge itself is not timed, so this is a lower bound for the split): (a) every
  query of the bucket against the prefix alone, no mask, the bucket's rows and the 3 query heads
  of a key/value head stacked into one long query sequence (no copy of the prefix per row, no
  repeat); (b) each row's queries against its own keys with ``is_causal`` (the kernel skips the
  masked half);
- **prefix part as GEMMs**: part (a) as bf16 batched matmuls with an explicit float32 softmax and
  its backward (the previous session's hand-written kernel, re-measured).

Defaults are attempt 9's mean bucket (4 continuations of 650 tokens over a 730-token prefix).
Prints milliseconds per layer (best of 5). Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch


def _best_ms(fn: Callable[[], None], repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(1000 * min(times), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--prefix", type=int, default=730)
    parser.add_argument("--cont", type=int, default=650)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows, n_q, n_kv, length, prefix, dim = args.rows, 9, 3, args.cont, args.prefix, 64
    rep, dt = n_q // n_kv, torch.bfloat16
    sdpa = torch.nn.functional.scaled_dot_product_attention

    q = torch.randn(rows, n_q, length, dim, dtype=dt, requires_grad=True)
    k_pre, v_pre = torch.randn(1, n_kv, prefix, dim, dtype=dt), torch.randn(1, n_kv, prefix, dim, dtype=dt)
    k_own, v_own = torch.randn(rows, n_kv, length, dim, dtype=dt), torch.randn(rows, n_kv, length, dim, dtype=dt)

    k = torch.cat([k_pre.expand(rows, -1, -1, -1), k_own], 2).repeat_interleave(rep, 1).requires_grad_()
    v = torch.cat([v_pre.expand(rows, -1, -1, -1), v_own], 2).repeat_interleave(rep, 1).requires_grad_()
    visible = torch.arange(prefix + length)[None, :] <= (prefix + torch.arange(length))[:, None]
    mask = visible[None, None].expand(rows, 1, length, prefix + length)

    def current() -> None:
        sdpa(q, k, v, attn_mask=mask).sum().backward()

    stacked = q.detach().view(rows, n_kv, rep, length, dim).transpose(0, 1).reshape(1, n_kv, -1, dim)
    stacked = stacked.contiguous().requires_grad_()
    k_a, v_a = k_pre.clone().requires_grad_(), v_pre.clone().requires_grad_()

    def split_prefix() -> None:
        sdpa(stacked, k_a, v_a).sum().backward()

    k_b = k_own.repeat_interleave(rep, 1).requires_grad_()
    v_b = v_own.repeat_interleave(rep, 1).requires_grad_()

    def split_own() -> None:
        sdpa(q, k_b, v_b, is_causal=True).sum().backward()

    qg, kg, vg = stacked.detach()[0], k_pre[0], v_pre[0]
    grad_out = torch.randn_like(qg)

    def prefix_gemm() -> None:
        scores = torch.bmm(qg, kg.transpose(1, 2)) * dim**-0.5
        probs = torch.softmax(scores.float(), -1)
        out = torch.bmm(probs.to(dt), vg)
        d_probs = torch.bmm(grad_out, vg.transpose(1, 2)).float()
        delta = (grad_out.float() * out.float()).sum(-1, keepdim=True)
        d_scores = (probs * (d_probs - delta)).to(dt)
        torch.bmm(d_scores, kg)
        torch.bmm(d_scores.transpose(1, 2), qg)
        torch.bmm(probs.to(dt).transpose(1, 2), grad_out)

    timings = {
        "current_ms": _best_ms(current),
        "split_prefix_ms": _best_ms(split_prefix),
        "split_own_ms": _best_ms(split_own),
        "prefix_as_gemm_ms": _best_ms(prefix_gemm),
    }
    timings["split_total_ms"] = round(timings["split_prefix_ms"] + timings["split_own_ms"], 1)
    result: dict[str, object] = {
        "shape": {"rows": rows, "prefix": prefix, "continuation": length, "heads_q": n_q, "heads_kv": n_kv},
        "torch_threads": torch.get_num_threads(),
        **timings,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
