"""Training: HSA-SFT data generation (``datagen``), general replay rows (``replay``) and supervised
fine-tuning on TRL (``sft``).

Importing this package stays cheap: the datagen side needs only the simulator, the SFT side
(TRL, transformers, PEFT, torch) is imported on first use of one of its names.
"""

from __future__ import annotations

import importlib
from typing import Any

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
