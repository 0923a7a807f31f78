"""Compose HSA transforms into harness variants, under a YAML *change envelope*.

``augment(harness, seed, envelope, split)`` draws which transforms apply (each with its envelope
probability, at least ``min_transforms``), applies them in a fixed family order (skills → tools →
prompt → hooks, so renames happen before reordering and rule rewriting sees final names) and
returns the variant with its record. Per-variant seeds derive from ``(seed, index)`` as strings,
which ``random.Random`` hashes with SHA-512 — stable across processes, unlike ``hash()``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hat.augment.transforms import AUGMENTERS, AugmentState
from hat.errors import HatError
from hat.harness.state import Harness

__all__ = ["Envelope", "Variant", "augment", "generate_variants", "load_envelope", "write_variant"]

ENVELOPE_DIR = Path(__file__).parent / "envelopes"
POOL_SETS = ("base", "wide")


@dataclass(frozen=True)
class Envelope:
    transforms: dict[str, float]
    strength: float = 1.0
    min_transforms: int = 1
    pools: str = "base"  # "wide": the train split's wide paraphrase and decoy pools (hat.augment.pools)

    def to_dict(self) -> dict[str, Any]:
        out = {"transforms": dict(self.transforms), "strength": self.strength, "min_transforms": self.min_transforms}
        return out if self.pools == "base" else {**out, "pools": self.pools}


def load_envelope(ref: str | Path | None = None) -> Envelope:
    """A YAML file, or the name of a shipped envelope (``default``, ``tools``, ``prompt``)."""
    path = Path(ref) if ref and Path(ref).is_file() else ENVELOPE_DIR / f"{ref or 'default'}.yaml"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in ENVELOPE_DIR.glob("*.yaml")))
        raise HatError(f"no change envelope {ref!r}: give a YAML file or one of: {shipped}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    transforms = data.get("transforms") or {}
    unknown = sorted(set(transforms) - set(AUGMENTERS))
    if unknown:
        raise HatError(f"{path}: unknown transform(s) {unknown}; known: {', '.join(AUGMENTERS)}")
    pool_set = str(data.get("pools", "base"))
    if pool_set not in POOL_SETS:
        raise HatError(f"{path}: unknown pools {pool_set!r}; use one of: {', '.join(POOL_SETS)}")
    return Envelope(
        {k: float(v) for k, v in transforms.items()},
        float(data.get("strength", 1.0)),
        int(data.get("min_transforms", 1)),
        pool_set,
    )


@dataclass(frozen=True)
class Variant:
    harness: Harness
    applied: tuple[str, ...]
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def families(self) -> list[str]:
        return sorted({AUGMENTERS[name].family for name in self.applied})

    def summary(self) -> dict[str, Any]:
        return {
            "hash": self.harness.content_hash(),
            "applied": list(self.applied),
            "families": self.families,
            "record": self.record,
        }


def _draw(envelope: Envelope, rng: random.Random) -> list[str]:
    chosen = [name for name, p in envelope.transforms.items() if rng.random() < p]
    pool = [n for n in envelope.transforms if n not in chosen and envelope.transforms[n] > 0]
    while len(chosen) < envelope.min_transforms and pool:
        chosen.append(pool.pop(rng.randrange(len(pool))))
    order = list(AUGMENTERS)
    return sorted(chosen, key=order.index)


def augment(harness: Harness, seed: int | str, envelope: Envelope | None = None, split: str = "train") -> Variant:
    """One variant of ``harness``. Pure: same inputs → same variant (byte-identical when saved)."""
    envelope = envelope or load_envelope()
    rng = random.Random(f"hsa:{seed}")
    names = _draw(envelope, rng)
    used = {t.name for t in harness.tools} | {s.name for s in harness.skills}
    state = AugmentState(
        harness, rng, split=split, strength=envelope.strength, used_names=used, wide=envelope.pools == "wide"
    )
    for name in names:
        state.harness = AUGMENTERS[name]().apply(state)
    version = f"{harness.version}+hsa.{split}.{seed}"
    return Variant(state.harness.replace(version=version), tuple(names), state.record)


def generate_variants(
    harness: Harness, n: int, seed: int, envelope: Envelope | None = None, split: str = "train"
) -> list[Variant]:
    """``n`` variants with distinct hashes (a duplicate draw is redrawn with a derived seed)."""
    envelope = envelope or load_envelope()
    variants, seen = [], set()
    for i in range(n):
        for attempt in range(20):
            v = augment(harness, f"{seed}:{i}:{attempt}", envelope, split)
            if v.harness.content_hash() not in seen:
                break
        seen.add(v.harness.content_hash())
        variants.append(v)
    return variants


def write_variant(variant: Variant, folder: Path) -> Path:
    from hat.harness.loader import save_harness

    save_harness(variant.harness, folder)
    (folder / "augmentation.json").write_text(json.dumps(variant.summary(), indent=2, sort_keys=True), encoding="utf-8")
    return folder
