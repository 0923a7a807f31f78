"""Skill Selection: load the skill the request needs, and nothing misleading.

A load is a ``kind="skill"`` call record (the harness's ``output.skill_tool``, the skill's name
in ``arguments["name"]``, status ``ok`` or ``unknown_skill``); names in ``trace.skills_loaded``
without a record count as successful loads (hand-built traces). Each distinct name loaded is
classified against the *current* harness:

==========  =======  ======================================================================
class       factor   when
==========  =======  ======================================================================
relevant    —        the skill's ``function_id`` is in ``gold.skills`` and it is no decoy
decoy       0.4      the skill has ``metadata.decoy: true`` (HSA's distractors)
missing     0.4      no skill of that name (stale after a rename, or invented)
irrelevant  0.6      an existing skill the request does not need
==========  =======  ======================================================================

Formula::

    R = the gold skills the current harness offers (as non-decoys)
    base = 1 if R is empty or a relevant skill was loaded, else 0
    skill_selection = base · Π factor(wrong load)

Why "not loading" scores 0 when a relevant skill exists: the dimension measures *selection*, and
an agent that never opens its skills cannot follow rules an operator adds to them next week.
Gold skills the harness no longer offers (masked by HSA) are not required.
"""

from __future__ import annotations

from hat.env.episode import Episode
from hat.harness.state import Harness, Skill
from hat.harness.trace import Trace
from hat.judge.base import JudgeResult, clamp, flagged_decoy

__all__ = ["WRONG_LOAD", "is_decoy", "skill_loads", "skill_selection"]

WRONG_LOAD: dict[str, float] = {"decoy": 0.4, "missing": 0.4, "irrelevant": 0.6}


def is_decoy(skill: Skill) -> bool:
    return flagged_decoy(skill.metadata)


def skill_loads(trace: Trace) -> list[str]:
    """Distinct skill names the trace tried to load, in order."""
    names = [
        str(c.arguments.get("name", c.arguments.get("skill", "")))
        for r in trace.rounds
        for c in r.tool_calls
        if c.kind == "skill"
    ]
    return list(dict.fromkeys([*names, *trace.skills_loaded]))


def _classify(name: str, harness: Harness, relevant: set[str]) -> str:
    skill = harness.skill(name)
    if skill is None:
        return "missing"
    if is_decoy(skill):
        return "decoy"
    return "relevant" if skill.function_id in relevant else "irrelevant"


def skill_selection(episode: Episode, trace: Trace, harness: Harness) -> JudgeResult:
    """The skill-selection judge (formula in the module docstring)."""
    offered = {s.function_id for s in harness.skills if not is_decoy(s)}
    relevant = set(episode.gold.skills) & offered
    classes = {name: _classify(name, harness, relevant) for name in skill_loads(trace)}
    hit = any(kind == "relevant" for kind in classes.values())
    score = 1.0 if (hit or not relevant) else 0.0
    wrong = {name: kind for name, kind in classes.items() if kind != "relevant"}
    for kind in wrong.values():
        score *= WRONG_LOAD[kind]
    parts = []
    if relevant:
        parts.append("relevant skill loaded" if hit else f"none of {sorted(relevant)} loaded")
    parts += [f"{kind} skill {name!r} loaded" for name, kind in wrong.items()]
    reason = "; ".join(parts) or "no skill needed, none wrongly loaded"
    return JudgeResult(clamp(score), reason, {"loads": classes, "relevant": sorted(relevant)})
