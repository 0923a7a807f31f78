"""HAT's own defaults of ``hat train rl``, in a module that imports only the standard library.

Why a module of its own: :class:`~hat.train.rl_config.HatRLConfig` subclasses TRL's ``GRPOConfig``,
so reading its defaults imports TRL, transformers and torch (seconds), and ``hat train rl --help``
must show them without that. The dataclass takes its field defaults from :data:`RL` and the CLI
reads the same object, so each default is written once. The reasons for each value are in the
:mod:`hat.train.rl_config` docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

from hat.train.defaults import TrainDefaults

__all__ = ["ADVANTAGES", "RL", "RLDefaults"]

ADVANTAGES = ("segments", "grpo", "normalize_then_sum")
"""``segments``: the segment-decomposed GDPO advantage (HAT); ``grpo``: plain GRPO, one summed
reward; ``normalize_then_sum``: GDPO without segments (TRL's multi-objective aggregation)."""


@dataclass(frozen=True)
class RLDefaults(TrainDefaults):
    """The defaults of :class:`~hat.train.rl_config.HatRLConfig` that are not TRL's (those every
    stage shares: :class:`~hat.train.defaults.TrainDefaults`)."""

    # HAT's fields
    model: str = "smollm2"
    harness: str = "livestream"
    envelope: str = "default"
    hsa_prob: float = 0.5
    n_episodes: int = 256
    episode_seed: int = 1
    fault_rate: float = 0.0
    advantage: str = "segments"
    cot_lambda: float = 0.1
    advantage_eps: float = 1e-6
    max_new_tokens: int | None = None
    lora_dropout: float = 0.0
    autocast_bf16: bool | None = None
    lora_float32_sum: bool = True
    share_group_prompts: bool = True
    # TRL/transformers fields with a HAT default
    num_generations: int = 4
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 2
    learning_rate: float = 1e-5
    disable_dropout: bool = True
    logging_steps: float = 1
    save_steps: float = 25


RL = RLDefaults()
