"""Episodes of the simulated live room and their gold labels.

An :class:`Episode` is one viewer request in one room of one world, plus the ground truth a judge
needs. Gold refers to tools and skills by **function id** (``get_price``, ``product-qa``), never by
the names a harness gives them: HSA renames tools, skills and parameters, and judges map through
the harness's current ``metadata.function_id`` (and ``metadata.param_map`` for renamed
parameters) so the label follows the transformation.

Everything here is plain frozen data that round-trips through JSON, so episode files are
reproducible artefacts (``hat sim episodes``) and their hash proves determinism.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hat.harness.state import canonical_json, sha256_text

__all__ = [
    "INTENTS",
    "INTENT_MIX",
    "Episode",
    "FaultSpec",
    "Gold",
    "GoldCall",
    "episodes_hash",
    "read_episodes",
    "write_episodes",
]

# The report's production traffic mix (share of viewer requests). "other" takes the remainder.
INTENT_MIX: dict[str, float] = {
    "product_qa": 0.46,
    "casual_chat": 0.19,
    "clarification": 0.16,
    "after_sales": 0.07,
    "discount": 0.04,
    "order_change": 0.02,
    "faq": 0.02,
    "other": 0.04,
}
INTENTS = tuple(INTENT_MIX)


@dataclass(frozen=True)
class GoldCall:
    """A tool call the episode requires. ``arguments`` use the tool's *canonical* parameter names;
    an argument whose value is ``None`` may be omitted (e.g. the product on display)."""

    function_id: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Gold:
    """Ground truth for one episode.

    - ``tool_calls``: calls that must happen (any order); ``optional_tools``: function ids that are
      acceptable but not needed (calling them is not redundant);
    - ``skills``: skill function ids relevant to the request (loading one of them is right);
    - ``facts``: strings that must appear in the reply (prices as printed by the tool, colours, …);
      ``forbidden``: claims that must not appear (invented discounts, delivery promises, …);
    - ``answerable``: False when the right reply is a refusal/handoff rather than an answer.
    """

    intent: str
    tool_calls: tuple[GoldCall, ...] = ()
    optional_tools: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    answerable: bool = True
    notes: str = ""


@dataclass(frozen=True)
class FaultSpec:
    """Fault injection for the tool backends of one episode: ``rate`` is the per-call probability;
    ``kinds`` the fault kinds drawn from (``timeout``, ``error``, ``empty``, ``slow``); ``seed``
    makes the draws deterministic (per episode and call index)."""

    rate: float = 0.0
    kinds: tuple[str, ...] = ("timeout", "error", "empty", "slow")
    seed: int = 0


@dataclass(frozen=True)
class Episode:
    """One request: ``comments`` (one in single mode, several in multi mode), ``history`` (earlier
    turns as chat messages; clarification follow-ups depend on it), ``room`` (room state incl.
    ``on_display``), ``world_seed`` (rebuilds the world), and ``gold``."""

    episode_id: str
    world_seed: int
    room: dict[str, Any]
    comments: tuple[str, ...]
    gold: Gold
    history: tuple[dict[str, str], ...] = ()
    mode: str = "single"
    faults: FaultSpec = field(default_factory=FaultSpec)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        gold = dict(data["gold"])
        gold["tool_calls"] = tuple(GoldCall(**c) for c in gold.get("tool_calls", ()))
        for key in ("optional_tools", "skills", "facts", "forbidden"):
            gold[key] = tuple(gold.get(key, ()))
        faults = dict(data.get("faults") or {})
        if "kinds" in faults:
            faults["kinds"] = tuple(faults["kinds"])
        return cls(
            episode_id=data["episode_id"],
            world_seed=int(data["world_seed"]),
            room=dict(data["room"]),
            comments=tuple(data["comments"]),
            gold=Gold(**gold),
            history=tuple(dict(m) for m in data.get("history", ())),
            mode=data.get("mode", "single"),
            faults=FaultSpec(**faults),
        )


def write_episodes(path: str | Path, episodes: Iterable[Episode]) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for ep in episodes:
            fh.write(canonical_json(ep.to_dict()) + "\n")
            n += 1
    return n


def read_episodes(path: str | Path) -> list[Episode]:
    with open(path, encoding="utf-8") as fh:
        return [Episode.from_dict(json.loads(line)) for line in fh if line.strip()]


def episodes_hash(episodes: Iterable[Episode]) -> str:
    """SHA-256 over the canonical JSON of the episodes, in order."""
    return sha256_text("\n".join(canonical_json(ep.to_dict()) for ep in episodes))
