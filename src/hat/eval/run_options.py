"""How a run of many episodes decodes: the fast path's defaults, shared by every command that runs
suites on a model (``hat eval``, ``hat evolve propose --evaluate`` / ``gate``, ``hat compare
pairwise`` / ``ab-sim``), so that none of them silently falls back to one episode at a time.

For a local model (``smollm2``, ``smollm2-hat``, ``hf:``, with or without ``?options``) the default
(``dtype="auto"``) is bfloat16 on CPUs with native bf16, decoded batch-invariantly (an episode's
outputs do not depend on the episodes decoded beside it), 16 episodes in flight per usable core;
elsewhere float32, 16 in flight, whose batched outputs equal one-at-a-time decoding. ``openai:``
models get ``batch_size`` concurrent requests; policies, ``scripted:`` and ``llamacpp:`` run one
at a time whatever is asked (:func:`hat.eval.runner.run_cases`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hat.errors import HatError

LOCAL_SPECS = ("smollm2", "smollm2-hat", "hf")
"""Spec prefixes whose weights load into this process through transformers (dtype and batch-invariant
decoding apply to them)."""

DTYPES = ("auto", "float32", "bfloat16", "float16")


def is_local_weights(model: str) -> bool:
    """``smollm2-hat?engine=transformers`` and ``hf:/path`` count; ``openai:…``, policies do not."""
    return model.strip().partition(":")[0].partition("?")[0] in LOCAL_SPECS


@dataclass(frozen=True)
class RunOptions:
    """The resolved options: ``dtype`` None is the backend's default (float32)."""

    batch_size: int
    dtype: str | None = None
    batch_invariant: bool = False

    @property
    def load_options(self) -> dict[str, Any]:
        """Keyword arguments for :func:`hat.models.load_model` (empty: the backend's defaults)."""
        options: dict[str, Any] = {"dtype": self.dtype} if self.dtype else {}
        return options | ({"batch_invariant": True} if self.batch_invariant else {})

    def to_dict(self) -> dict[str, Any]:
        """What a report records (``batch_invariant`` only when on, as ``hat eval`` always has)."""
        return {"batch_size": self.batch_size, "dtype": self.dtype} | (
            {"batch_invariant": True} if self.batch_invariant else {}
        )


def check_dtype(dtype: str, model: str) -> None:
    """Refuse (HatError) a dtype that is unknown or that the model cannot take, before anything loads."""
    if dtype not in DTYPES:
        raise HatError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    if dtype != "auto" and not is_local_weights(model):
        raise HatError(f"--dtype applies to local models ({', '.join(LOCAL_SPECS)}), not {model!r}")


def resolve_dtype(dtype: str, model: str) -> str | None:
    """``auto`` is bfloat16 for a local model on a CPU with native bf16, else the backend's default;
    float32 is the default too (None: what earlier runs recorded, so they resume)."""
    if dtype == "auto":
        from hat.cpu import cpu_supports_bf16

        return "bfloat16" if is_local_weights(model) and cpu_supports_bf16() else None
    return None if dtype == "float32" else dtype


def default_batch_size(batch_invariant: bool, n: int) -> int:
    """16 episodes in flight; batch-invariant decoding runs one engine of 16 decode rows per core."""
    if not batch_invariant:
        return 16
    from hat.cpu import usable_cores
    from hat.models.invariant import InvariantConfig

    return max(1, min(InvariantConfig().rows * usable_cores(), n))


def resolve_run_options(
    model: str,
    n: int,
    *,
    dtype: str = "auto",
    batch_invariant: bool | None = None,
    batch_size: int | None = None,
) -> RunOptions:
    """The fast path's defaults for ``n`` episodes of ``model``; explicit values win. Raises
    :class:`HatError` for a combination that cannot work (checked before a model loads)."""
    check_dtype(dtype, model)
    weights = resolve_dtype(dtype, model)
    if batch_invariant and not is_local_weights(model):
        raise HatError(f"--batch-invariant applies to local models ({', '.join(LOCAL_SPECS)}), not {model!r}")
    if batch_invariant is None:
        batch_invariant = weights in ("bfloat16", "float16")
    if batch_size is None:
        batch_size = default_batch_size(batch_invariant, n)
    return RunOptions(batch_size, weights, batch_invariant)
