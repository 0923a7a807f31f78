"""HSA renaming for foreign tool sets (RoTBench, BFCL): we have no concept pools for their tools, so
the held-out *naming styles* apply to the name's own words (PascalCase, UPPER_SNAKE, dotted, a
held-out verb prefix, or an opaque code). Deterministic per (seed, name); distinct within a set."""

from __future__ import annotations

import random
import string
from collections.abc import Callable

from hat.augment import pools
from hat.augment.transforms import _style, _words

__all__ = ["foreign_renamer"]


def foreign_renamer(seed: int = 0, split: str = "heldout") -> Callable[[str], str]:
    used: dict[str, str] = {}

    def rename(name: str) -> str:
        if name in used:
            return used[name]
        rng = random.Random(f"foreign:{seed}:{name}")
        words = _words(name.replace(".", "_")) or [name]
        style = rng.choice(["pascal", "upper_snake", "dotted", "verb", "code"])
        if style == "verb":
            new = _style([rng.choice(pools.split(pools.TOOL_VERBS, split)), *words], "snake")
        elif style == "code":
            new = f"T_{string.ascii_uppercase[len(used) % 26]}{len(used) // 26 or ''}"
        else:
            new = _style(words, style)
        while new in used.values():
            new += "_x"
        used[name] = new
        return new

    return rename
