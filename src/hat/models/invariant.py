"""Batch-invariant greedy decoding: a row's numbers do not depend on the rows decoded beside it.

Why: in bfloat16, batched decoding is not the same computation as decoding alone. On this CPU's
oneDNN kernels a linear layer's output row changes in its last bits with the number of rows M
(measured: ``x[i] @ W`` differs between M = 1, 15, 16 and 64 for SmolLM2's shapes, in float32 as in
bfloat16), and the left padding of a batched KV cache moves each row's keys across the attention
kernel's blocks. bfloat16 rounds every layer's output to 8 bits of mantissa, so those last-bit
differences flip greedy ties, and a batched evaluation no longer equals an unbatched one. What is
invariant, measured the same way: a matmul of a *fixed* shape gives every row the same bits
whatever the other rows hold and wherever the row sits in the batch.

So every computation here has a shape that depends on the row alone, never on its neighbours or
on the cache's history (the idea of Thinking Machines' batch-invariant kernels, "Defeating
Nondeterminism in LLM Inference", 2025, done with shapes instead of new kernels):

- **Decode** feeds exactly ``rows`` sequences per forward pass (:attr:`InvariantConfig.rows`):
  the live rows, then dummy rows (token 0, attention output 0) that fill it up. Linear layers
  always see M = ``rows``.
- **Attention in decode** runs row by row (:func:`attention`, registered with transformers'
  ``AttentionInterface``): each row's query against that row's own keys in its own buffer, no
  padding, no mask, the three query heads of a key/value head packed as three queries (what
  transformers' SDPA path does at ``q_len`` 1). The new token's key and value are written into
  the row's buffer by the same function, so no cache object takes part.
- **Prefill** runs in chunks of exactly ``chunk`` tokens (the last one padded; pad positions come
  after the real ones, so causal attention never lets a real token see them, and their keys are
  cropped after).
- **What a row may reuse.** Its own session (the earlier rounds of the same conversation), decoded
  keys included, from wherever the shared prefix ends: that history is the same in any batch.
  From any other row or session only *canonical* keys - computed by chunked prefill from a chunk
  boundary (:func:`aligned`) over canonical keys, so the same function of the tokens whichever row
  computed them - and only up to a chunk boundary, the rest re-encoded. So prefix sharing across
  rows (the system prompt every episode has) cannot make results depend on the batch either.

Greedy output is then identical whether a conversation is decoded alone or in any batch
(``tests/test_invariant.py``); it is not identical to float32 or to the non-invariant path.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ATTENTION",
    "DecodeRows",
    "InvariantConfig",
    "aligned",
    "attention",
    "decoding",
    "enable",
    "engines_for",
    "threads",
]

ATTENTION = "hat_batch_invariant"
"""The name under which :func:`attention` is registered with transformers' ``AttentionInterface``."""


@dataclass(frozen=True)
class InvariantConfig:
    """``rows``: sequences per decode forward pass (live rows plus dummies), the decode batch size;
    more live rows wait for a free slot. ``chunk``: prefill tokens per forward pass. ``threads``:
    intra-op torch threads of every invariant computation. Results are invariant for fixed values
    of the three; changing one may change them."""

    rows: int = 16
    chunk: int = 64
    threads: int = 1


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` intra-op torch threads in this thread (restored after). Matmul
    kernels may split a row's reduction differently with the thread count, so invariant decoding
    fixes it (:attr:`InvariantConfig.threads`); parallelism comes from several decode engines on
    their own threads instead (:class:`~hat.models.batching.BatchingModel`'s ``engines``)."""
    import torch

    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before != n:
            torch.set_num_threads(before)


def engines_for(conversations: int, config: InvariantConfig) -> int:
    """How many decode engines to run at once: enough for ``conversations`` rows, at most one per
    ``config.threads`` usable cores (each engine computes with that many threads)."""
    from hat.cpu import usable_cores

    slots = -(-conversations // config.rows)
    return max(1, min(slots, usable_cores() // max(config.threads, 1)))


def aligned(n: int, chunk: int) -> int:
    """The largest chunk boundary at or below ``n``: how much of a cached prefix prefill may keep."""
    return n - n % chunk


class DecodeRows:
    """Per-row KV buffers of one decode group: ``keys[layer][i]``, ``values[layer][i]`` of shape
    ``[1, kv_heads, capacity_i, head_dim]``; ``lengths[i]`` tokens encoded so far. A forward pass
    writes each live row's new key/value at ``lengths[i]``; :meth:`advance` then moves them on."""

    def __init__(self, keys: list[list[Any]], values: list[list[Any]], lengths: list[int]) -> None:
        self.keys, self.values, self.lengths = keys, values, lengths

    @property
    def live(self) -> int:
        return len(self.lengths)

    def advance(self) -> None:
        self.lengths = [n + 1 for n in self.lengths]

    def join(self, keys: list[Any], values: list[Any], length: int) -> None:
        """Add a row: its per-layer buffers and how many tokens they hold."""
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            self.keys[layer].append(k)
            self.values[layer].append(v)
        self.lengths.append(length)

    def drop(self, keep: list[int]) -> None:
        """Keep only the rows ``keep`` (indices into the current rows), in that order."""
        self.keys = [[layer[i] for i in keep] for layer in self.keys]
        self.values = [[layer[i] for i in keep] for layer in self.values]
        self.lengths = [self.lengths[i] for i in keep]


_STATE = threading.local()


class decoding:
    """``with decoding(rows):`` every forward pass inside is a decode step of ``rows``."""

    def __init__(self, rows: DecodeRows) -> None:
        self.rows = rows

    def __enter__(self) -> DecodeRows:
        _STATE.rows = self.rows
        return self.rows

    def __exit__(self, *exc: object) -> None:
        _STATE.rows = None


def attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function signature (query ``[B, H, q, D]``, key/value ``[B, Hkv, k, D]``;
    returns ``[B, q, H, D]``). In a :class:`decoding` block: one token per row, written into the row's
    buffer and attended row by row. Otherwise (prefill, or a plain ``generate``): causal attention of
    the ``q`` new tokens, the last ``q`` of the ``k`` keys, with the mask aligned bottom-right."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    groups = query.shape[1] // key.shape[1]
    batch, heads, q_len, dim = query.shape
    rows: DecodeRows | None = getattr(_STATE, "rows", None)
    if rows is not None:
        if q_len != 1:
            raise RuntimeError("batch-invariant decode feeds one token per row")
        layer = module.layer_idx
        out = query.new_zeros(batch, 1, heads, dim)
        for i in range(rows.live):
            n = rows.lengths[i]
            k_buf, v_buf = rows.keys[layer][i], rows.values[layer][i]
            k_buf[0, :, n] = key[i, :, 0]
            v_buf[0, :, n] = value[i, :, 0]
            q = query[i : i + 1].reshape(1, key.shape[1], groups, dim)  # heads of one KV head as queries
            o = sdpa(q, k_buf[:, :, : n + 1], v_buf[:, :, : n + 1], scale=scaling)
            out[i, 0] = o.reshape(heads, dim)
        return out, None
    k_len = key.shape[2]
    if q_len == 1:  # one new token at the end: it sees every key
        o = sdpa(query.reshape(batch, key.shape[1], groups, dim), key, value, scale=scaling)
        return o.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None
    if groups > 1:
        key = key[:, :, None].expand(batch, key.shape[1], groups, k_len, dim).reshape(batch, heads, k_len, dim)
        value = value[:, :, None].expand(batch, value.shape[1], groups, k_len, dim).reshape(batch, heads, k_len, dim)
    positions = torch.arange(k_len - q_len, k_len, device=query.device)
    mask = torch.arange(k_len, device=query.device)[None, :] <= positions[:, None]
    o = sdpa(query, key, value, attn_mask=mask, scale=scaling)
    return o.transpose(1, 2).contiguous(), None


def enable(model: Any) -> None:
    """Register :func:`attention` and switch ``model`` to it (``model.config._attn_implementation``).
    Custom implementations get no mask from transformers (it builds masks only for the ones it
    knows), which is what :func:`attention` expects."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, attention)
    model.set_attn_implementation(ATTENTION)
