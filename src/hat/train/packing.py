"""Shared-prefix packing and the trained-positions-only loss of ``hat train sft``.

Why: a livestream row is ~1,300 tokens, of which ~1,000 are the harness's system prompt and only
~150 are trained (the assistant turns). Rows generated for one room snapshot under one harness
variant (``hat datagen --comments-per-snapshot K``: many viewers comment while one product is on
display) share that prompt token for token. Training them one by one encodes the prompt K times
and runs the 49,152-way LM head on every position. Here

- rows that share a token prefix are **packed**: the prefix once, then each row's continuation;
  a continuation sees the prefix and itself, never its siblings, and its position ids continue
  from the prefix — so every continuation token has exactly the context it has in its own row;
- the LM head and the cross-entropy run **only on trained positions** (the hidden state of a
  token's predecessor — the prefix's last token for a continuation's first token);
- the forward runs under **bf16 autocast** on CPUs with AVX-512 BF16 (or a CUDA device with bf16);
  LoRA weights, the head and the loss stay in float32, and so does each LoRA layer's sum of base
  output and adapter delta (:func:`hat.train.lora_precision.lora_sum_in_float32`; in bf16 a young adapter's update is
  rounded away and the loss curve lags float32's).

Two implementations of the same attention pattern (:func:`pack_loss`, ``attention=``):

- ``"prefix-cache"`` (the default, fastest): run the prefix once, keep its keys/values (in the
  autograd graph, so LoRA gradients flow through them), then run all continuations as one
  right-padded batch on top of the prefix cache. Attention costs ``B·L·(P+L)``.
- ``"block-mask"``: the literal packed sequence — ``prefix + c1 + c2 + …`` — with a 4D block
  attention mask and continuing position ids. Attention costs ``(P+ΣL)²``, so it is slower on
  long packs; kept as the reference the tests compare against.

Exactness: both give the loss (sum of token cross-entropies / trained tokens) and LoRA gradients of
the unpacked rows, within float tolerance (``tests/test_packing.py``). The prefix never holds a
trained token (it is cut before the first one), so no token is counted once for several rows.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hat.cpu import cpu_supports_bf16

__all__ = [
    "IGNORE_INDEX",
    "EncodedRow",
    "Pack",
    "autocast_dtype",
    "block_attention_mask",
    "cpu_supports_bf16",
    "pack_loss",
    "pack_rows",
    "row_group",
    "unpacked_loss",
]

IGNORE_INDEX = -100
ATTENTION_MODES = ("prefix-cache", "block-mask")


@dataclass(frozen=True)
class EncodedRow:
    """One tokenized row. ``labels[j]`` is ``input_ids[j]`` where token j is trained, else
    :data:`IGNORE_INDEX` (not shifted: token j is predicted from position j − 1). ``group``: rows
    of one group are packed together (same harness variant and room snapshot)."""

    input_ids: tuple[int, ...]
    labels: tuple[int, ...]
    group: str

    @property
    def n_trained(self) -> int:
        return sum(label != IGNORE_INDEX for label in self.labels)


@dataclass(frozen=True)
class Pack:
    """A shared ``prefix`` (no trained token in it) and the rows' ``continuations`` with their
    ``labels`` (same convention as :class:`EncodedRow`)."""

    prefix: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]
    labels: tuple[tuple[int, ...], ...]

    @property
    def n_rows(self) -> int:
        return len(self.continuations)

    @property
    def n_tokens(self) -> int:
        """Tokens encoded for this pack (the prefix once)."""
        return len(self.prefix) + sum(len(c) for c in self.continuations)

    @property
    def n_trained(self) -> int:
        return sum(label != IGNORE_INDEX for labels in self.labels for label in labels)

    def rows(self) -> list[EncodedRow]:
        """The unpacked rows this pack stands for."""
        pad = (IGNORE_INDEX,) * len(self.prefix)
        return [
            EncodedRow(self.prefix + c, pad + labels, "")
            for c, labels in zip(self.continuations, self.labels, strict=True)
        ]

    def packed_sequence(self) -> tuple[list[int], list[int], list[int]]:
        """The literal packing: ``(input_ids, position_ids, segment)`` of ``prefix + c1 + c2 + …``;
        ``segment`` is 0 on the prefix and i on continuation i (1-based)."""
        ids, pos, seg = list(self.prefix), list(range(len(self.prefix))), [0] * len(self.prefix)
        for i, cont in enumerate(self.continuations, start=1):
            ids += cont
            pos += range(len(self.prefix), len(self.prefix) + len(cont))
            seg += [i] * len(cont)
        return ids, pos, seg

    def to_dict(self) -> dict[str, Any]:
        return {"prefix": list(self.prefix), "continuations": [list(c) for c in self.continuations],
                "labels": [list(x) for x in self.labels]}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pack:
        return cls(
            tuple(data["prefix"]),
            tuple(tuple(c) for c in data["continuations"]),
            tuple(tuple(x) for x in data["labels"]),
        )


# -- grouping and packing -------------------------------------------------------------------------
def row_group(row: dict[str, Any]) -> str:
    """The packing group of a datagen row: its ``snapshot`` id when datagen wrote one; else the
    harness hash and system message (rows with the same system prompt share it); rows with no
    system message (general replay) form one group — they share at most the chat template's
    default system prompt, and packing them keeps a step's row count even."""
    if row.get("snapshot"):
        return f"snapshot:{row['snapshot']}"
    first = (row.get("messages") or [{}])[0]
    if first.get("role") != "system":
        return "no-system"
    digest = hashlib.sha256(f"{row.get('harness_hash', '')}\n{first.get('content', '')}".encode()).hexdigest()[:16]
    return f"prompt:{digest}"


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for j in range(n):
        token = first[j]
        if any(s[j] != token for s in seqs[1:]):
            return j
    return n


def _first_trained(row: EncodedRow) -> int:
    return next((j for j, label in enumerate(row.labels) if label != IGNORE_INDEX), len(row.labels))


def _make_pack(rows: Sequence[EncodedRow]) -> Pack:
    # The prefix ends before any trained token and leaves every continuation at least one token.
    cut = min(_common_prefix([r.input_ids for r in rows]), *(_first_trained(r) for r in rows))
    cut = min(cut, *(len(r.input_ids) - 1 for r in rows))
    return Pack(
        tuple(rows[0].input_ids[:cut]),
        tuple(r.input_ids[cut:] for r in rows),
        tuple(r.labels[cut:] for r in rows),
    )


def pack_rows(rows: Sequence[EncodedRow], *, max_rows: int = 16, max_tokens: int = 8192) -> list[Pack]:
    """Pack rows group by group (groups in order of first appearance, rows in order): a pack holds
    at most ``max_rows`` rows and, prefix counted once, about ``max_tokens`` tokens (a single row
    longer than that is a pack of its own). ``max_rows=1`` gives one row per pack (no sharing)."""
    groups: OrderedDict[str, list[EncodedRow]] = OrderedDict()
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    packs: list[Pack] = []
    for members in groups.values():
        chunk: list[EncodedRow] = []
        for row in members:
            candidate = [*chunk, row]
            if chunk and (len(candidate) > max_rows or _make_pack(candidate).n_tokens > max_tokens):
                packs.append(_make_pack(chunk))
                candidate = [row]
            chunk = candidate
        if chunk:
            packs.append(_make_pack(chunk))
    return packs


# -- precision ------------------------------------------------------------------------------------
def autocast_dtype(device: str, setting: bool | None) -> Any:
    """``torch.bfloat16`` when bf16 autocast should run on ``device`` (``setting`` None = detect),
    else None (float32)."""
    import torch

    if setting is False:
        return None
    if device.startswith("cuda"):
        supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    else:
        supported = cpu_supports_bf16()
    if setting and not supported:
        return torch.bfloat16  # asked for explicitly: honour it (slow emulation, but correct)
    return torch.bfloat16 if supported else None


# -- the loss -------------------------------------------------------------------------------------
def _split_model(model: Any) -> tuple[Any, Any]:
    """``(decoder body, lm_head)`` of a causal LM, through a PEFT wrapper if there is one."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.get_decoder(), inner.get_output_embeddings()


def _cache_kwarg(body: Any) -> str:
    import inspect

    params = inspect.signature(body.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _head_loss(head: Any, hidden: Any, targets: Any) -> Any:
    """Summed cross-entropy of the LM head on the gathered hidden states, in float32."""
    import torch
    import torch.nn.functional as F

    with torch.autocast(device_type=hidden.device.type, enabled=False):
        weight = head.weight.float()
        bias = None if head.bias is None else head.bias.float()
        logits = F.linear(hidden.float(), weight, bias)
        return F.cross_entropy(logits, targets, reduction="sum")


def _targets(pack: Pack) -> tuple[list[tuple[int, int]], list[int]]:
    """Per trained token: ``(row, index of its predecessor in the continuation or -1 for the
    prefix's last token)`` and the token id."""
    where, targets = [], []
    for i, labels in enumerate(pack.labels):
        for j, label in enumerate(labels):
            if label != IGNORE_INDEX:
                where.append((i, j - 1))
                targets.append(label)
    return where, targets


def length_buckets(lengths: Sequence[int], *, max_rows: int = 8, max_waste: float = 0.2) -> list[list[int]]:
    """Row indices in sub-batches of similar length (longest first): a bucket closes at ``max_rows``
    or when padding to its longest row would waste more than ``max_waste`` of its tokens, so a
    right-padded forward computes close to the real token count."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    buckets: list[list[int]] = []
    for i in order:
        bucket = buckets[-1] if buckets else None
        if bucket is not None and len(bucket) < max_rows:
            real = sum(lengths[j] for j in bucket) + lengths[i]
            if lengths[bucket[0]] * (len(bucket) + 1) <= (1 + max_waste) * real:
                bucket.append(i)
                continue
        buckets.append([i])
    return buckets


def _run_continuations(body: Any, pack: Pack, rows: list[int], cache: Any, pad_id: int) -> Any:
    """Hidden states ``(len(rows), L, d)`` of some continuations, right-padded, on top of the prefix
    ``cache`` (its keys/values expanded to the sub-batch; autograd flows into the prefix)."""
    import torch
    from transformers import DynamicCache

    device = next(body.parameters()).device
    n_prefix = len(pack.prefix)
    conts = [pack.continuations[i] for i in rows]
    width, batch = max(len(c) for c in conts), len(conts)
    ids = torch.full((batch, width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((batch, n_prefix + width), dtype=torch.long, device=device)
    mask[:, :n_prefix] = 1
    for k, cont in enumerate(conts):
        ids[k, : len(cont)] = torch.tensor(cont, device=device)
        mask[k, n_prefix : n_prefix + len(cont)] = 1
    positions = torch.arange(n_prefix, n_prefix + width, device=device).expand(batch, width)
    kwargs: dict[str, Any] = {}
    if cache is not None:
        kwargs[_cache_kwarg(body)] = DynamicCache(
            ddp_cache_data=[
                (layer.keys.expand(batch, -1, -1, -1), layer.values.expand(batch, -1, -1, -1)) for layer in cache.layers
            ]
        )
    out = body(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=cache is not None, **kwargs)
    return out.last_hidden_state


def _prefix_cache_hidden(body: Any, pack: Pack, pad_id: int, where: list[tuple[int, int]]) -> tuple[Any, Any]:
    """``(prefix hidden (P, d) or None, hidden (T, d) of each trained token's predecessor)``: the
    prefix is encoded once, the continuations in length buckets on top of its cache."""
    import torch
    from transformers import DynamicCache

    device = next(body.parameters()).device
    n_prefix = len(pack.prefix)
    cache: Any = None
    prefix_hidden = None
    if n_prefix:
        head = body(
            input_ids=torch.tensor([pack.prefix], device=device),
            position_ids=torch.arange(n_prefix, device=device)[None],
            use_cache=True,
            **{_cache_kwarg(body): DynamicCache()},
        )
        cache = getattr(head, "cache", None) or getattr(head, "past_key_values", None)
        prefix_hidden = head.last_hidden_state[0]
    slot: dict[int, tuple[int, int]] = {}
    hidden = []
    for b, rows in enumerate(length_buckets([len(c) for c in pack.continuations])):
        hidden.append(_run_continuations(body, pack, rows, cache, pad_id))
        slot.update({row: (b, k) for k, row in enumerate(rows)})
    picked = []
    for row, j in where:
        b, k = slot[row]
        picked.append(hidden[b][k, max(j, 0)] if j >= 0 or prefix_hidden is None else prefix_hidden[-1])
    return prefix_hidden, torch.stack(picked)


def block_attention_mask(segments: Sequence[int], device: Any) -> Any:
    """The ``(1, 1, n, n)`` boolean mask of a packed sequence: causal, and a position of segment
    ``s > 0`` sees the shared prefix (segment 0) and its own segment only."""
    import torch

    seg = torch.tensor(list(segments), device=device)
    n = seg.numel()
    causal = torch.ones((n, n), dtype=torch.bool, device=device).tril()
    visible = (seg[None, :] == 0) | (seg[None, :] == seg[:, None])
    return (causal & visible)[None, None]


def _block_mask_hidden(body: Any, pack: Pack) -> tuple[Any, Any]:
    """The literal packed sequence with a 4D block mask; hidden states re-split per row."""
    import torch

    device = next(body.parameters()).device
    ids, pos, seg = pack.packed_sequence()
    out = body(
        input_ids=torch.tensor([ids], device=device),
        position_ids=torch.tensor([pos], device=device),
        attention_mask=block_attention_mask(seg, device),
        use_cache=False,
    )
    hidden = out.last_hidden_state[0]
    n_prefix = len(pack.prefix)
    width = max(len(c) for c in pack.continuations)
    rows = []
    start = n_prefix
    for cont in pack.continuations:
        part = hidden[start : start + len(cont)]
        rows.append(torch.nn.functional.pad(part, (0, 0, 0, width - len(cont))))
        start += len(cont)
    return (hidden[:n_prefix] if n_prefix else None), torch.stack(rows)


def pack_loss(
    model: Any, pack: Pack, *, attention: str = "prefix-cache", dtype: Any = None, pad_id: int = 0
) -> tuple[Any, int]:
    """``(summed cross-entropy over the pack's trained tokens, number of trained tokens)``; divide
    the sums of a batch by its token count for the usual token-mean loss. ``dtype``: autocast dtype
    for the decoder (``torch.bfloat16``) or None for float32."""
    import torch

    if attention not in ATTENTION_MODES:
        raise ValueError(f"attention must be one of {ATTENTION_MODES}, not {attention!r}")
    body, head = _split_model(model)
    where, targets = _targets(pack)
    device = head.weight.device
    if not targets:
        return torch.zeros((), device=device, requires_grad=True), 0
    enabled = dtype is not None
    with torch.autocast(device_type=device.type, dtype=dtype or torch.bfloat16, enabled=enabled):
        if attention == "prefix-cache":
            _, gathered = _prefix_cache_hidden(body, pack, pad_id, where)
            return _head_loss(head, gathered, torch.tensor(targets, device=device)), len(targets)
        prefix_hidden, cont_hidden = _block_mask_hidden(body, pack)
    rows = torch.tensor([i for i, _ in where], device=device)
    cols = torch.tensor([max(j, 0) for _, j in where], device=device)
    gathered = cont_hidden[rows, cols]
    from_prefix = torch.tensor([j < 0 for _, j in where], device=device)
    if prefix_hidden is not None and bool(from_prefix.any()):
        gathered = torch.where(from_prefix[:, None], prefix_hidden[-1].to(gathered.dtype)[None], gathered)
    loss = _head_loss(head, gathered, torch.tensor(targets, device=device))
    return loss, len(targets)


def unpacked_loss(model: Any, rows: Sequence[EncodedRow], *, pad_id: int = 0) -> tuple[Any, int]:
    """The reference: the rows as one right-padded batch through the full model (all logits), the
    summed cross-entropy of the trained tokens and their count — what packing must reproduce."""
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    width = max(len(r.input_ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        ids[i, : len(r.input_ids)] = torch.tensor(r.input_ids)
        labels[i, : len(r.labels)] = torch.tensor(r.labels)
        mask[i, : len(r.input_ids)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    shift_logits, shift_labels = logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
    loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return loss, int((shift_labels != IGNORE_INDEX).sum())
