"""Batched decoding for :class:`~hat.models.TransformersModel`: one forward pass per new token for
many conversations, each row decoded as if it were alone — greedy, or sampled from a generator of
its own.

Why not ``model.generate`` on one left-padded batch (what ``generate_batch`` did before):

- **Prefill one row at a time.** The prompts of one batch differ a lot in length (an episode's
  first round next to another's third), and a padded prefill computes every pad position. Prefill
  is compute-bound, so batching it gains nothing; each row is prefilled alone, exactly as
  ``generate`` prefills it, from the longest cached prefix it shares with a kept session.
- **Finished rows leave.** ``generate`` keeps a row that hit its stop string in the batch, feeding
  pad tokens, until the last row stops. Here a row leaves as soon as it ends (end-of-sequence
  token, stop string, or its ``max_new_tokens``), and columns that are padding for every row left
  are cut, so a batch costs what its rows need.
- **A preallocated KV slab.** ``DynamicCache`` grows by ``torch.cat``, copying the whole cache
  every token (for 16 rows of 1,000 tokens, ~0.7 GB per step for SmolLM2-135M). The decode cache
  here is one buffer per layer, written in place.

Exactness: a row's prefill is the forward pass ``generate`` runs; every decode step feeds one
token per row at that row's own position, with a mask that hides the left padding, so its logits
equal the unbatched ones up to float rounding of the different matmul shapes, and greedy picks the
same token unless two logits tie to the last bits. Stop strings are checked with transformers' own
``StopStringCriteria`` on each row's ids, so a row stops on the token ``generate`` would stop on.

Sampling (:class:`Sampling`, for RL rollouts): each row draws from its own ``torch.Generator``
(seeded per row), after transformers' temperature and top-p warpers (the same arithmetic as
``TemperatureLogitsWarper`` and ``TopPLogitsWarper``), so a row's tokens depend on its seed and
its own logits only — not on which rows decode beside it, nor on the global RNG.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BatchRow",
    "InvariantSlots",
    "Sampling",
    "Stopper",
    "crop_to",
    "decode_greedy",
    "decode_invariant",
    "pick_tokens",
    "prefill",
    "prefill_chunks",
    "slice_cache",
]


@dataclass
class BatchRow:
    """One conversation of a batch. ``cache`` holds the KV of ``ids[:cached]`` before prefill; after
    :func:`decode_greedy`, ``kept`` holds the KV of ``(ids + new_ids)[:-1]`` (when ``keep``), the
    way ``generate`` leaves a cache: the last sampled token is never encoded."""

    ids: list[int]
    cache: Any
    cached: int
    keep: bool = False
    new_ids: list[int] = field(default_factory=list)
    first_token_at: float | None = None
    done_at: float | None = None
    kept: Any = None
    generator: Any = None  # sampling: this row's torch.Generator (None: greedy)
    canonical: int = 0  # batch-invariant decoding: leading keys other rows may share (hat.models.invariant)

    @property
    def encoded(self) -> int:
        """Tokens whose KV is in the row's cache: the prompt and all new tokens but the last."""
        return len(self.ids) + len(self.new_ids) - 1


@dataclass(frozen=True)
class Sampling:
    """Temperature and nucleus sampling of a batch (each row with its own ``generator``)."""

    temperature: float
    top_p: float = 1.0

    def generator(self, seed: int | None, device: Any) -> Any:
        """A generator for one row: seeded with ``seed``, else from the global RNG's entropy."""
        import torch

        generator = torch.Generator(device=device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        return generator

    def warp(self, logits: Any) -> Any:
        """A row's float logits ``[vocab]`` through ``TemperatureLogitsWarper`` and then
        ``TopPLogitsWarper`` (keep the smallest set of tokens whose probability reaches ``top_p``,
        at least one; the rest get ``-inf``)."""
        import torch

        scores = logits / self.temperature
        if self.top_p < 1.0:
            ordered, index = torch.sort(scores, descending=False)
            cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
            remove = cumulative <= (1 - self.top_p)
            remove[-1:] = False
            scores = scores.masked_fill(remove.scatter(0, index, remove), -float("inf"))
        return scores

    def pick(self, logits: Any, generator: Any) -> int:
        """One token drawn with ``generator`` from the softmax of :meth:`warp`."""
        import torch

        return int(torch.multinomial(self.warp(logits).softmax(dim=-1), 1, generator=generator))


def pick_tokens(logits: Any, rows: Sequence[BatchRow], sampling: Sampling | None) -> list[int]:
    """Each row's next token from the last-position logits ``[rows, vocab]``: the argmax (the first
    maximum, as ``generate`` picks), or a draw with the row's generator."""
    logits = logits.float()
    if sampling is None or all(r.generator is None for r in rows):
        return [int(t) for t in logits.argmax(-1).tolist()]
    return [
        int(logits[i].argmax(-1)) if row.generator is None else sampling.pick(logits[i], row.generator)
        for i, row in enumerate(rows)
    ]


class Stopper:
    """When a row is done: an end-of-sequence token, a stop string (transformers'
    ``StopStringCriteria``, the criterion ``generate(stop_strings=…)`` uses), or the budget."""

    def __init__(self, eos: set[int], max_new_tokens: int, stop_criteria: Any = None) -> None:
        self.eos, self.max_new_tokens, self.criteria = eos, max_new_tokens, stop_criteria

    def __call__(self, rows: Sequence[BatchRow]) -> list[bool]:
        done = [r.new_ids[-1] in self.eos or len(r.new_ids) >= self.max_new_tokens for r in rows]
        if self.criteria is not None:
            for i, hit in enumerate(self._stop_strings(rows)):
                done[i] = done[i] or hit
        return done

    def _stop_strings(self, rows: Sequence[BatchRow]) -> list[bool]:
        import torch

        width = self.criteria.maximum_token_len  # the criterion looks no further back than this
        tails = [r.new_ids[-width:] if len(r.new_ids) >= width else (r.ids + r.new_ids)[-width:] for r in rows]
        if all(len(t) == width for t in tails):  # the usual case: one call for the whole batch
            return [bool(x) for x in self.criteria(torch.tensor(tails), None).tolist()]
        return [bool(self.criteria(torch.tensor([t]), None)[0]) for t in tails]


def prefill(model: Any, row: BatchRow, *, cache_kwarg: str, sampling: Sampling | None = None) -> None:
    """Encode ``row.ids[row.cached:]`` onto ``row.cache`` (the forward pass ``generate`` runs first)
    and pick the row's first new token (:func:`pick_tokens`)."""
    import torch

    device = model.device
    suffix = torch.tensor([row.ids[row.cached :]], device=device)
    positions = torch.arange(row.cached, len(row.ids), device=device).unsqueeze(0)
    with torch.inference_mode():
        out = model(
            input_ids=suffix, position_ids=positions, use_cache=True, logits_to_keep=1, **{cache_kwarg: row.cache}
        )
        row.new_ids.append(pick_tokens(out.logits[:, -1, :], [row], sampling)[0])
    row.first_token_at = time.perf_counter()


def prefill_chunks(model: Any, row: BatchRow, *, cache_kwarg: str, chunk: int, pad_id: int) -> None:
    """:func:`prefill` for batch-invariant decoding (:mod:`hat.models.invariant`): from ``row.cached``
    on, in chunks of exactly ``chunk`` tokens, the last one padded with ``pad_id`` (its pad keys are
    cropped). The caller picks ``row.cached``: a chunk boundary for a prefix shared by another row
    (so the new keys are computed as from scratch), anywhere in the row's own session."""
    import torch

    device = model.device
    start = row.cached
    crop_to(row.cache, start)
    end = len(row.ids)
    with torch.inference_mode():
        for at in range(start, end, chunk):
            real = row.ids[at : at + chunk]
            tokens = torch.tensor([real + [pad_id] * (chunk - len(real))], device=device)
            positions = torch.arange(at, at + chunk, device=device).unsqueeze(0)
            last = torch.tensor([len(real) - 1], device=device)
            out = model(
                input_ids=tokens,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=last,
                **{cache_kwarg: row.cache},
            )
    crop_to(row.cache, end)
    row.new_ids.append(_argmax(out.logits))
    row.first_token_at = time.perf_counter()


def crop_to(cache: Any, length: int) -> None:
    """Drop the cache's keys from position ``length`` on (transformers' ``crop`` takes how many to drop)."""
    held = cache.get_seq_length()
    if held > length:
        cache.crop(length - held)


def decode_invariant(
    model: Any, rows: Sequence[BatchRow], stopper: Stopper, *, group: int, new_cache: Callable[[], Any]
) -> None:
    """:func:`decode_greedy` for batch-invariant decoding: every forward pass feeds exactly ``group``
    sequences (live rows, then dummies) and attention runs row by row on per-row buffers
    (:mod:`hat.models.invariant`). More than ``group`` rows are decoded continuously: a waiting row
    takes the slot of one that stopped. ``row.kept`` (when ``row.keep``) holds the KV of
    ``(ids + new_ids)[:-1]``, as :func:`decode_greedy` leaves it."""
    waiting = list(reversed(_finish(rows, stopper)))
    slots = InvariantSlots(model, group, new_cache)
    while waiting or slots.rows:
        while waiting and slots.free:
            slots.join(waiting.pop(), stopper)
        slots.step()


class _BufferView:
    """A row's per-layer KV buffers seen as a cache (``layers[i].keys/values``), so a prefill may
    copy another row's prefix from them while that row is still decoding."""

    def __init__(self, keys: list[Any], values: list[Any]) -> None:
        self.layers = [_Layer(k, v) for k, v in zip(keys, values, strict=True)]


@dataclass
class _Layer:
    keys: Any
    values: Any


class InvariantSlots:
    """The decode slots of batch-invariant decoding, which rows join and leave between steps
    (continuous batching: a row's numbers do not depend on its neighbours, so who decodes beside
    whom may change at every step without changing any result).

    :meth:`join` moves a prefilled row's KV into buffers of its own (capacity: its prompt plus its
    stopper's budget, so their strides depend on the row alone); :meth:`step` runs one forward pass
    of exactly ``group`` sequences (live rows, then dummies), appends each live row's greedy token
    and returns the rows that stopped (``done_at`` set, ``kept`` filled when ``keep``). While a row
    decodes, ``row.cache`` is a view of its buffers, so a new row may share its prefix."""

    def __init__(self, model: Any, group: int, new_cache: Callable[[], Any]) -> None:
        self.model, self.group, self.new_cache = model, group, new_cache
        self.rows: list[BatchRow] = []
        self.stoppers: list[Stopper] = []
        self.state: Any = None  # hat.models.invariant.DecodeRows, built at the first join
        self.steps = 0  # forward passes run
        self.row_steps = 0  # live rows summed over them (row_steps / steps: how full the slots were)

    @property
    def free(self) -> int:
        return self.group - len(self.rows)

    def join(self, row: BatchRow, stopper: Stopper) -> None:
        """Add a prefilled row that is not done (see :func:`_finish`)."""
        import torch

        from hat.models.invariant import DecodeRows

        if not self.free:
            raise RuntimeError("every decode slot is taken")
        capacity = len(row.ids) + stopper.max_new_tokens
        keys, values = [], []
        with torch.inference_mode():
            for cached in row.cache.layers:
                k, v = cached.keys, cached.values
                k_buf = torch.zeros((1, k.shape[1], capacity, k.shape[3]), dtype=k.dtype, device=k.device)
                v_buf = torch.zeros((1, v.shape[1], capacity, v.shape[3]), dtype=v.dtype, device=v.device)
                k_buf[:, :, : k.shape[2]] = k
                v_buf[:, :, : v.shape[2]] = v
                keys.append(k_buf)
                values.append(v_buf)
        if self.state is None:
            self.state = DecodeRows([[] for _ in keys], [[] for _ in values], [])
        self.state.join(keys, values, row.encoded)
        row.cache = _BufferView(keys, values)
        self.rows.append(row)
        self.stoppers.append(stopper)

    def step(self) -> list[BatchRow]:
        """One decode step of every live row; returns the rows that stopped (removed from the slots)."""
        import torch

        from hat.models.invariant import decoding

        if not self.rows:
            return []
        live, device = self.rows, self.model.device
        pad = self.group - len(live)
        tokens = torch.tensor([[r.new_ids[-1]] for r in live] + [[0]] * pad, device=device)
        positions = torch.tensor([[r.encoded] for r in live] + [[0]] * pad, device=device)
        with torch.inference_mode(), decoding(self.state):
            out = self.model(input_ids=tokens, position_ids=positions, use_cache=False, logits_to_keep=1)
            picks = out.logits[: len(live), -1, :].float().argmax(-1).tolist()
        self.state.advance()
        self.steps += 1
        self.row_steps += len(live)
        for row, token in zip(live, picks, strict=True):
            row.new_ids.append(int(token))
        done = self._done()
        if not any(done):
            return []
        now = time.perf_counter()
        finished = []
        for row, stop in zip(live, done, strict=True):
            if stop:
                row.done_at = now
                if row.keep:
                    n = row.encoded
                    view = row.cache.layers
                    row.kept = slice_cache([(ly.keys[:, :, :n], ly.values[:, :, :n]) for ly in view], self.new_cache)
                row.cache = None
                finished.append(row)
        keep = [i for i, stop in enumerate(done) if not stop]
        self.state.drop(keep)
        self.rows = [live[i] for i in keep]
        self.stoppers = [self.stoppers[i] for i in keep]
        return finished

    def _done(self) -> list[bool]:
        """Each row's stopper on it (rows sharing a stopper are checked in one call)."""
        done = [False] * len(self.rows)
        for stopper in {id(s): s for s in self.stoppers}.values():
            index = [i for i, s in enumerate(self.stoppers) if s is stopper]
            for i, stop in zip(index, stopper([self.rows[i] for i in index]), strict=True):
                done[i] = stop
        return done


def decode_greedy(
    model: Any,
    rows: Sequence[BatchRow],
    stopper: Stopper,
    *,
    cache_kwarg: str,
    new_cache: Callable[[], Any],
    sampling: Sampling | None = None,
) -> None:
    """Decode prefilled rows in place, stepping the unfinished ones together: greedy, or with
    ``sampling`` each row with a ``generator`` draws its tokens (:func:`pick_tokens`)."""
    import torch

    active = _finish(rows, stopper)
    if active:
        with torch.inference_mode():
            _Decoder(model, active, stopper, cache_kwarg, new_cache, sampling).run()


def _argmax(logits: Any) -> int:
    """The greedy pick of ``generate``: float32 logits of the last position, first maximum wins."""
    return int(logits[0, -1, :].float().argmax(-1))


def _finish(rows: Sequence[BatchRow], stopper: Stopper) -> list[BatchRow]:
    """Mark rows that are done after prefill (their prefill cache is what they keep); return the rest."""
    active = []
    for row, done in zip(rows, stopper(rows), strict=True):
        if not done:
            active.append(row)
            continue
        row.done_at = time.perf_counter()
        row.kept, row.cache = (row.cache if row.keep else None), None
    return active


def slice_cache(keys_values: Sequence[tuple[Any, Any]], new_cache: Callable[[], Any]) -> Any:
    """A fresh cache holding copies of per-layer ``(keys, values)`` tensors of shape [1, H, T, D]."""
    cache = new_cache()
    for layer, (k, v) in enumerate(keys_values):
        cache.update(k, v, layer)  # DynamicLayer concatenates onto an empty tensor: a copy
    return cache


class _Decoder:
    """The decode phase: rows left-padded into per-layer KV slabs, one token per row per step.

    Row ``i`` of the slab holds its KV in columns ``[starts[i], width)``; ``width`` grows by one
    every step and the slab has room for every row's remaining budget. A row that finishes copies
    its columns out (when it keeps a session) and the slab is compacted to the rows still running.
    """

    def __init__(
        self,
        model: Any,
        rows: list[BatchRow],
        stopper: Stopper,
        cache_kwarg: str,
        new_cache: Callable[[], Any],
        sampling: Sampling | None = None,
    ) -> None:
        import torch

        self.model, self.rows, self.stopper, self.sampling = model, rows, stopper, sampling
        self.cache_kwarg, self.new_cache = cache_kwarg, new_cache
        self.width = max(r.encoded for r in rows)
        self.starts = [self.width - r.encoded for r in rows]
        capacity = self.width + stopper.max_new_tokens  # no row encodes more than its budget
        self.cache = new_cache()
        for layer, (keys, values) in enumerate(_row_layers(rows)):
            shape = (len(rows), keys[0].shape[1], capacity, keys[0].shape[3])
            # Zeros, not empty: masked positions get probability 0, and 0 * NaN garbage would be NaN.
            k_slab = torch.zeros(shape, dtype=keys[0].dtype, device=keys[0].device)
            v_slab = torch.zeros(shape, dtype=values[0].dtype, device=values[0].device)
            for i, (k, v) in enumerate(zip(keys, values, strict=True)):
                k_slab[i, :, self.starts[i] : self.width] = k[0]
                v_slab[i, :, self.starts[i] : self.width] = v[0]
            self.cache.layers[layer] = _slab_layer(k_slab, v_slab, self.width)
        for row in rows:
            row.cache = None  # the slab has it now; drop the per-row copy early

    def run(self) -> None:
        while self.rows:
            self._step()
            done = self.stopper(self.rows)
            if any(done):
                self._retire(done)

    def _step(self) -> None:
        import torch

        device = self.model.device
        tokens = torch.tensor([[r.new_ids[-1]] for r in self.rows], device=device)
        positions = torch.tensor([[r.encoded] for r in self.rows], device=device)
        # A ready 4D mask (transformers passes it through): it hides each row's left padding, and a
        # mask, even all true, keeps SDPA off its ``enable_gqa`` path, ~8x slower in bfloat16 on CPU.
        starts = torch.tensor(self.starts, device=device).view(-1, 1, 1, 1)
        mask = torch.arange(self.width + 1, device=device).view(1, 1, 1, -1) >= starts
        out = self.model(
            input_ids=tokens,
            position_ids=positions,
            attention_mask=mask,
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_kwarg: self.cache},
        )
        picks = pick_tokens(out.logits[:, -1, :], self.rows, self.sampling)
        self.width += 1
        for row, token in zip(self.rows, picks, strict=True):
            row.new_ids.append(int(token))

    def _row_cache(self, i: int) -> Any:
        start = self.starts[i]
        layers = [(layer.keys[i : i + 1, :, start:], layer.values[i : i + 1, :, start:]) for layer in self.cache.layers]
        return slice_cache(layers, self.new_cache)

    def _retire(self, done: list[bool]) -> None:
        import torch

        now = time.perf_counter()
        for i, row in enumerate(self.rows):
            if done[i]:
                row.done_at = now
                row.kept = self._row_cache(i) if row.keep else None
        keep = [i for i, d in enumerate(done) if not d]
        self.rows = [self.rows[i] for i in keep]
        if not keep:
            return
        cut = min(self.starts[i] for i in keep)
        self.starts = [self.starts[i] - cut for i in keep]
        self.width -= cut
        index = torch.tensor(keep, device=self.model.device)
        for layer in self.cache.layers:
            layer.compact(index, cut, self.width)


def _row_layers(rows: Sequence[BatchRow]) -> list[tuple[list[Any], list[Any]]]:
    """Per layer, every row's ``(keys, values)`` tensors from its prefill cache."""
    layers = []
    for index in range(len(rows[0].cache.layers)):
        keys = [r.cache.layers[index].keys for r in rows]
        values = [r.cache.layers[index].values for r in rows]
        layers.append((keys, values))
    return layers


_SLAB_CLASS: list[type] = []


def _slab_layer(keys: Any, values: Any, length: int) -> Any:
    if not _SLAB_CLASS:
        _SLAB_CLASS.append(_define_slab_layer())
    return _SLAB_CLASS[0](keys, values, length)


def _define_slab_layer() -> type:
    from transformers.cache_utils import DynamicLayer

    class SlabLayer(DynamicLayer):  # type: ignore[misc]
        """A ``DynamicLayer`` whose keys/values are views of a preallocated slab, appended in place."""

        def __init__(self, keys: Any, values: Any, length: int) -> None:
            super().__init__()
            self.k_slab, self.v_slab = keys, values
            self.keys, self.values = keys[:, :, :length], values[:, :, :length]
            self.device = keys.device
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            n, m = self.get_seq_length(), key_states.shape[-2]
            self.k_slab[:, :, n : n + m] = key_states
            self.v_slab[:, :, n : n + m] = value_states
            self.keys, self.values = self.k_slab[:, :, : n + m], self.v_slab[:, :, : n + m]
            return self.keys, self.values

        def compact(self, index: Any, cut: int, length: int) -> None:
            """Keep the rows ``index`` and drop the first ``cut`` columns (padding for all of them)."""
            self.k_slab = self.k_slab[index, :, cut:]
            self.v_slab = self.v_slab[index, :, cut:]
            self.keys, self.values = self.k_slab[:, :, :length], self.v_slab[:, :, :length]

    return SlabLayer
