"""Evaluation suites over the simulated live room: which episodes, under which harness states.

A suite yields :class:`Case` s — an episode plus the harness state it is run under. ``t1`` is
Live-Stream QA on the production harness. Later suites (harness variants, tool/prompt
robustness) register here with :func:`register_suite` and reuse the same runner, judges and
report, so every suite's numbers mean the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hat.env.episode import Episode
from hat.harness.loader import load_harness
from hat.harness.state import Harness

__all__ = ["SUITES", "Case", "SuiteSpec", "build_cases", "register_suite"]


@dataclass(frozen=True)
class Case:
    episode: Episode
    harness: Harness
    variant: str = "production"


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    description: str
    build: Callable[..., Iterator[Case]]


SUITES: dict[str, SuiteSpec] = {}


def register_suite(
    name: str, description: str
) -> Callable[[Callable[..., Iterator[Case]]], Callable[..., Iterator[Case]]]:
    def deco(fn: Callable[..., Iterator[Case]]) -> Callable[..., Iterator[Case]]:
        SUITES[name] = SuiteSpec(name, description, fn)
        return fn

    return deco


def build_cases(suite: str, **options: Any) -> list[Case]:
    """The cases of ``suite``. Unknown names raise a KeyError listing the known suites."""
    if suite not in SUITES:
        raise KeyError(f"unknown suite {suite!r}; known suites: {', '.join(sorted(SUITES))}")
    return list(SUITES[suite].build(**options))


@register_suite("t1", "Live-Stream QA: simulated viewer requests with the report's intent mix, production harness")
def _t1(
    n: int, seed: int, harness: str = "livestream", mode: str = "single", fault_rate: float = 0.0
) -> Iterator[Case]:
    from hat.env.viewers import generate_episodes

    production = load_harness(harness)
    for episode in generate_episodes(n, seed, mode=mode, fault_rate=fault_rate):
        yield Case(episode, production)


def _episodes(n: int, seed: int, mode: str = "single", fault_rate: float = 0.0) -> list[Episode]:
    from hat.env.viewers import generate_episodes

    return generate_episodes(n, seed, mode=mode, fault_rate=fault_rate)


def _variants(
    suite: str, n: int, seed: int, harness: str, envelope: str, mode: str, fault_rate: float
) -> Iterator[tuple[Episode, Any]]:
    """T1's episodes, each under its own held-out HSA variant (seeded by suite, seed and index)."""
    from hat.augment import augment, load_envelope

    production, env = load_harness(harness), load_envelope(envelope)
    for i, episode in enumerate(_episodes(n, seed, mode, fault_rate)):
        yield episode, augment(production, f"{suite}:{seed}:{i}", env, split="heldout")


@register_suite("t2", "Harness-Variant QA: T1's requests under held-out HSA variants (every family)")
def _t2(
    n: int, seed: int, harness: str = "livestream", mode: str = "single", fault_rate: float = 0.0
) -> Iterator[Case]:
    for episode, variant in _variants("t2", n, seed, harness, "default", mode, fault_rate):
        yield Case(episode, variant.harness, "+".join(variant.applied))


@register_suite("t3-tool", "Tool Robustness: renamed tools/parameters, rewritten descriptions, decoys, tool faults")
def _t3_tool(
    n: int, seed: int, harness: str = "livestream", mode: str = "single", fault_rate: float = 0.2
) -> Iterator[Case]:
    """Tool faults are part of this suite: a fault rate of 0 means the suite's 20 %."""
    for episode, variant in _variants("t3-tool", n, seed, harness, "tools", mode, fault_rate or 0.2):
        yield Case(episode, variant.harness, "+".join(variant.applied))


@register_suite("t3-prompt", "Prompt Robustness: reordered/perturbed prompts and edited rules the policy must follow")
def _t3_prompt(
    n: int, seed: int, harness: str = "livestream", mode: str = "single", fault_rate: float = 0.0
) -> Iterator[Case]:
    import random

    from hat.augment.rules import add_rules

    for i, (episode, variant) in enumerate(_variants("t3-prompt", n, seed, harness, "prompt", mode, fault_rate)):
        edited, rule_ids = add_rules(variant.harness, random.Random(f"t3-prompt-rules:{seed}:{i}"), split="heldout")
        yield Case(episode, edited, "+".join([*variant.applied, *rule_ids]))
