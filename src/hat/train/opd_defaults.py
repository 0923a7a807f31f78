"""HAT's own defaults of ``hat train opd``, in a module that imports no TRL, transformers or torch.

Why a module of its own: :class:`~hat.train.opd_config.HatOPDConfig` subclasses TRL's
``DistillationConfig``, so reading its defaults imports TRL, transformers and torch (seconds), and
``hat train opd --help`` must show them without that. The dataclass takes its field defaults from
:data:`OPD` and the CLI reads the same object, so each default is written once. The reasons for
each value are in the :mod:`hat.train.opd_config` docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

from hat.train.defaults import TrainDefaults
from hat.train.replay_config import DEFAULT_PROMPTS

__all__ = ["OPD", "OPDDefaults"]


@dataclass(frozen=True)
class OPDDefaults(TrainDefaults):
    """The defaults of :class:`~hat.train.opd_config.HatOPDConfig` that are not TRL's (those every
    stage shares: :class:`~hat.train.defaults.TrainDefaults`)."""

    # HAT's fields
    model: str = ""
    teacher: str = ""
    prompts: str = DEFAULT_PROMPTS
    n_prompts: int = 512
    lora_dropout: float = 0.0
    max_new_tokens: int | None = None  # HAT's name for max_completion_length; None mirrors it
    # TRL/transformers fields with a HAT default
    max_completion_length: int | None = 256
    learning_rate: float = 1e-4
    per_device_train_batch_size: int = 8
    num_train_epochs: float = 1.0
    disable_dropout: bool = True
    logging_steps: float = 1
    save_steps: float = 10


OPD = OPDDefaults()
