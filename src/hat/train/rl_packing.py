"""Group prompt sharing for RL's log-probabilities: a group's prompt encoded once.

Why: a livestream rollout is ~1,140 tokens, ~880 of them the prompt (system prompt and first
comment), and the ``G`` rollouts of a group share that prompt token for token. TRL scores each
rollout as its own row, so a step encodes every prompt ``G`` times, with gradients.

Here the rows of a micro-batch that share a prompt are packed into one sequence — the prompt
without its last token, then, per rollout, that last token followed by the rollout's completion —
under a block attention mask (a segment sees the prompt and itself, never its siblings) with
position ids that continue from the prompt, so every completion token has exactly the context it
has in its own row. The repeated last prompt token is the position whose hidden state predicts the
completion's first token; it costs one token per rollout. Log-probabilities and entropies come from
TRL's fused LM head (``fused_lm_head=True`` with pre-shifted ``shift_labels``: only the scored
positions are projected onto the vocabulary, at TRL's temperature), so they are the quantities TRL
computes, and they are scattered back to TRL's ``(rows, completion width)`` layout.

Exactness: equal to TRL's per-row log-probabilities, entropies and their LoRA gradients within float
tolerance (``tests/test_rl.py``): rotary position embeddings depend only on distances, so TRL's
left-padded rows (their positions shifted by the padding) and the packed segments give the same
attention up to rounding. Tokens the packed forward computes: prompt + Σ (1 + completion) instead of
G · (prompt + completion).
"""

from __future__ import annotations

from typing import Any

from hat.train.packing import block_attention_mask

__all__ = ["PackedRows", "pack_prompt_groups", "packed_logps_and_entropies"]


class PackedRows:
    """One packed sequence: the rows (of the micro-batch) it holds, its token ids, position ids,
    segment of every position (0 for the shared prompt, ``k + 1`` for the k-th row), and
    ``targets`` — per scored position ``(packed index, row, completion column, token id)``."""

    def __init__(self, rows: list[int], prompt: list[int], completions: list[list[int]]) -> None:
        if not prompt:
            raise ValueError("a packed group needs a prompt of at least one token")
        self.rows = rows
        shared, last = prompt[:-1], prompt[-1]
        self.ids: list[int] = list(shared)
        self.positions: list[int] = list(range(len(shared)))
        self.segments: list[int] = [0] * len(shared)
        self.targets: list[tuple[int, int, int, int]] = []
        for k, (row, completion) in enumerate(zip(rows, completions, strict=True)):
            start = len(self.ids)
            tokens = [last, *completion]
            self.ids.extend(tokens)
            self.positions.extend(range(len(shared), len(shared) + len(tokens)))
            self.segments.extend([k + 1] * len(tokens))
            # the hidden state at packed index start + j predicts completion token j
            self.targets.extend((start + j, row, j, token) for j, token in enumerate(completion))


def pack_prompt_groups(input_ids: Any, attention_mask: Any, logits_to_keep: int) -> list[PackedRows] | None:
    """The micro-batch's rows (TRL's layout: left-padded prompt, then ``logits_to_keep`` completion
    columns, right-padded) packed by identical prompt, in order of first appearance; ``None`` when a
    row's completion mask is not one run of ones from its first column (then TRL's path is used)."""
    prompt_ids, prompt_mask = input_ids[:, :-logits_to_keep], attention_mask[:, :-logits_to_keep]
    completion_ids, completion_mask = input_ids[:, -logits_to_keep:], attention_mask[:, -logits_to_keep:]
    lengths = completion_mask.sum(dim=1).tolist()
    groups: dict[tuple[int, ...], list[int]] = {}
    completions = []
    for row, n in enumerate(lengths):
        if int(completion_mask[row, : int(n)].sum()) != int(n):
            return None
        prompt = tuple(prompt_ids[row][prompt_mask[row].bool()].tolist())
        if not prompt:
            return None
        groups.setdefault(prompt, []).append(row)
        completions.append(completion_ids[row, : int(n)].tolist())
    return [PackedRows(rows, list(prompt), [completions[r] for r in rows]) for prompt, rows in groups.items()]


def packed_logps_and_entropies(
    model: Any, packs: list[PackedRows], n_rows: int, width: int, *, compute_entropy: bool
) -> tuple[Any, Any]:
    """``(log-probs, entropies or None)`` of shape ``(n_rows, width)`` — zero where not scored —
    from one fused-head forward per pack. ``model`` carries TRL's fused LM head
    (``trl.trainer.utils.add_fused_lm_head``, which ``GRPOTrainer`` adds)."""
    import torch

    device = next(model.parameters()).device
    logps = torch.zeros((n_rows, width), device=device)
    entropies = torch.zeros((n_rows, width), device=device) if compute_entropy else None
    for pack in packs:
        labels = torch.full((1, len(pack.ids)), -100, dtype=torch.long, device=device)
        index = torch.tensor([t[0] for t in pack.targets], device=device)
        labels[0, index] = torch.tensor([t[3] for t in pack.targets], device=device)
        out = model(
            input_ids=torch.tensor([pack.ids], device=device),
            position_ids=torch.tensor([pack.positions], device=device),
            attention_mask=block_attention_mask(pack.segments, device),
            shift_labels=labels,
            fused_lm_head=True,
        )
        rows = torch.tensor([t[1] for t in pack.targets], device=device)
        cols = torch.tensor([t[2] for t in pack.targets], device=device)
        logps = logps.index_put((rows, cols), out.log_probs[0, index].float())
        if entropies is not None:
            entropies = entropies.index_put((rows, cols), out.entropy[0, index].float())
    return logps, entropies
