"""HAT's own SFT defaults, in a module that imports only the standard library.

Why a module of its own: :class:`~hat.train.sft_config.HatSFTConfig` subclasses TRL's
``SFTConfig``, so reading its defaults imports TRL, transformers and torch (seconds), and
``hat train sft --help`` must show them without that. The dataclass takes its field defaults from
:data:`SFT` and the CLI reads the same object, so a default is written once.

What is here: every field HAT adds and every TRL/transformers field whose default HAT changes (the
reasons are in the :mod:`hat.train.sft_config` docstring). Every other field keeps TRL's default,
which the CLI calls "TRL's" rather than copying it; ``tests/test_train_options.py`` checks that this
list and the dataclass agree. ``hat datagen``'s and ``hat datagen-general``'s configs are plain
dataclasses, cheap to import, so their defaults stay in the dataclass and :func:`field_defaults`
reads them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["SFT", "SFTDefaults", "TrainDefaults", "field_defaults"]


@dataclass(frozen=True)
class TrainDefaults:
    """The defaults every training stage (SFT, OPD, RL) shares; each stage's class adds its own
    fields and overrides what differs (``lora_dropout``, steps, rates). The reasons are in each
    config module's docstring."""

    # HAT's fields
    use_lora: bool = True
    lora_r: int = 16
    lora_alpha: int = 32
    lora_target_modules: str = "all-linear"
    torch_threads: int | None = None
    # TRL/transformers fields with a HAT default
    bf16: bool | None = None  # None: on only where a CUDA device supports bf16
    activation_checkpointing: bool = False
    gradient_checkpointing: bool = False  # transformers 5's deprecated alias of the above
    save_total_limit: int | None = 2
    report_to: str = "none"


@dataclass(frozen=True)
class SFTDefaults(TrainDefaults):
    """The defaults of :class:`~hat.train.sft_config.HatSFTConfig` that are not TRL's."""

    # HAT's fields
    model: str = "smollm2"
    data: str = ""
    lora_dropout: float = 0.05
    fixed_harness: bool = False
    max_examples: int | None = None
    packing: bool = True
    pack_max_rows: int = 16
    pack_max_tokens: int = 8192
    packing_attention: str = "prefix-cache"
    autocast_bf16: bool | None = None
    lora_float32_sum: bool = True
    replay_data: str = ""
    replay_ratio: float = 0.0
    # TRL/transformers fields with a HAT default
    learning_rate: float = 2e-4
    max_length: int | None = 2048
    per_device_train_batch_size: int = 1
    logging_steps: float = 5
    save_steps: float = 50


SFT = SFTDefaults()


def field_defaults(cls: type) -> dict[str, Any]:
    """``{field: default}`` of a dataclass (a ``default_factory`` is called); fields without a
    default are left out."""
    found: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            found[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            found[f.name] = f.default_factory()
    return found
