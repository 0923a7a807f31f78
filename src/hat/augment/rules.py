"""Edited reply rules: the prompt-robustness family's "new rule the policy must now follow".

A rule lives in ``settings.reply_rules`` (read by the Effectiveness judge: ``forbid_patterns`` must
not match a reply of the listed ``intents``) and its text is appended to ``settings.boundaries``
(what the model sees). ``oracle_rewrites`` are (pattern, replacement) pairs a privileged policy may
apply to comply; they are part of the rule so the oracle follows any rule without special cases.
Split train / held-out like every other pool.
"""

from __future__ import annotations

import random
from typing import Any

from hat.augment import pools
from hat.harness.state import Harness

__all__ = ["REPLY_RULES", "add_rules"]

_EMOJI = "[\U0001f300-\U0001faff\u2600-\u27bf]"

REPLY_RULES: dict[str, list[dict[str, Any]]] = {
    "train": [
        {
            "id": "no-exclamation",
            "text": "Do not use exclamation marks.",
            "forbid_patterns": ["!"],
            "oracle_rewrites": [["!", "."]],
        },
        {
            "id": "no-competitors",
            "text": "Never mention other shops or platforms (Amazon, eBay, Walmart).",
            "forbid_patterns": ["amazon", "ebay", "walmart"],
            "oracle_rewrites": [],
        },
        {
            "id": "no-guarantee",
            "text": "Never use the word 'guarantee'.",
            "forbid_patterns": ["guarantee"],
            "oracle_rewrites": [["guarantee", "promise"]],
        },
    ],
    "heldout": [
        {
            "id": "no-stock-uncertainty",
            "text": (
                "Never disclose uncertainty about stock; send the viewer to the product details "
                "or customer service instead."
            ),
            "forbid_patterns": [
                "not sure",
                "might (sell|run) out",
                "probably",
                "maybe",
                "i think",
                "running low",
                "selling fast",
                "limited stock",
                "low stock",
            ],
            "intents": ["product_qa", "clarification"],
            "oracle_rewrites": [],
        },
        {
            "id": "no-emoji",
            "text": "Do not use emoji in replies.",
            "forbid_patterns": [_EMOJI],
            "oracle_rewrites": [[_EMOJI, ""]],
        },
        {
            "id": "no-shouting",
            "text": "Never write words in ALL CAPS or use exclamation marks.",
            "forbid_patterns": ["!", r"(?-i:\b[A-Z]{4,}\b)"],
            "oracle_rewrites": [["!", "."]],
        },
    ],
}


def add_rules(
    harness: Harness, rng: random.Random, split: str = "train", k: int | None = None
) -> tuple[Harness, list[str]]:
    """Add ``k`` (default 1–2) rules from the split's pool to ``settings``; returns the ids."""
    pool = list(pools.split(REPLY_RULES, split))
    rng.shuffle(pool)
    chosen = pool[: k if k is not None else rng.randint(1, 2)]
    settings = dict(harness.settings)
    settings["reply_rules"] = [*settings.get("reply_rules", []), *chosen]
    settings["boundaries"] = [*settings.get("boundaries", []), *(r["text"] for r in chosen)]
    return harness.replace(settings=settings), [r["id"] for r in chosen]
