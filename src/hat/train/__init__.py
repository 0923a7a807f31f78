"""Training: HSA-SFT data generation (``datagen``), general replay rows (``replay``) and supervised
fine-tuning on TRL (``sft``).

Importing this package imports nothing: every name is imported on first use, so the CLI can read
the light config modules (``datagen_config``, ``replay_config``, ``defaults``) to show defaults in
its help without loading the simulator (datagen) or TRL, transformers, PEFT and torch (SFT).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hat.train.datagen import (
        char_spans_to_token_spans,
        dataset_hash,
        generate_dataset,
        load_dataset,
        load_rows,
        segment_token_spans,
        tokenize_chat,
    )
    from hat.train.datagen_config import DATAGEN_SEED_OFFSET, DatagenConfig
    from hat.train.replay import generate_replay
    from hat.train.replay_config import ReplayConfig
    from hat.train.sft import SFTResult, encode_row, match_example_counts, select_rows, train_sft
    from hat.train.sft_config import HatSFTConfig

__all__ = [
    "DATAGEN_SEED_OFFSET",
    "DatagenConfig",
    "HatSFTConfig",
    "ReplayConfig",
    "SFTResult",
    "char_spans_to_token_spans",
    "dataset_hash",
    "encode_row",
    "generate_dataset",
    "generate_replay",
    "load_dataset",
    "load_rows",
    "match_example_counts",
    "segment_token_spans",
    "select_rows",
    "tokenize_chat",
    "train_sft",
]

_LAZY = {
    "DATAGEN_SEED_OFFSET": "hat.train.datagen_config",
    "DatagenConfig": "hat.train.datagen_config",
    "char_spans_to_token_spans": "hat.train.datagen",
    "dataset_hash": "hat.train.datagen",
    "generate_dataset": "hat.train.datagen",
    "load_dataset": "hat.train.datagen",
    "load_rows": "hat.train.datagen",
    "segment_token_spans": "hat.train.datagen",
    "tokenize_chat": "hat.train.datagen",
    "HatSFTConfig": "hat.train.sft_config",
    "ReplayConfig": "hat.train.replay_config",
    "generate_replay": "hat.train.replay",
    "SFTResult": "hat.train.sft",
    "encode_row": "hat.train.sft",
    "match_example_counts": "hat.train.sft",
    "select_rows": "hat.train.sft",
    "train_sft": "hat.train.sft",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hat.train' has no attribute {name!r}")
