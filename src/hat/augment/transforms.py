"""The HSA transform families: pure, seeded, task-preserving rewrites of a harness state.

Each :class:`Augmenter` takes an :class:`AugmentState` (the harness so far, a ``random.Random``,
the pool split and a record) and returns the rewritten harness. Labels follow the change because
identity lives in the harness itself: tools and skills keep ``metadata.function_id``, renamed
parameters are recorded in ``metadata.param_map`` (canonical → current; the tool registry maps
arguments back for the binding), the reply field and skill-loading action are read from
``output``, limits from ``limits``. Judges and the oracle read those, so a renamed tool is expected
under its new name and a perturbed length limit is judged at its new value. The record (the
"mapping") says what each transform did, for people and for the training data's provenance.

Families: ``skills`` (decoys, rename, descriptions, mask rules, paraphrase/reorder rules),
``tools`` (rename, descriptions, parameter names, decoys, reorder), ``prompt`` (block order, item
order, numeric limits, output field names), ``hooks`` (retry count/backoff, feedback message
structure, hook-triggered edits).
"""

from __future__ import annotations

import dataclasses
import random
import re
import string
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hat.augment import pools
from hat.harness.state import Harness, HookSpec, Skill, ToolSpec

__all__ = ["AUGMENTERS", "FAMILIES", "AugmentState", "Augmenter"]

PRODUCTION_NAMES = "production"


@dataclass
class AugmentState:
    harness: Harness
    rng: random.Random
    split: str = "train"
    strength: float = 1.0
    record: dict[str, Any] = field(default_factory=dict)
    used_names: set[str] = field(default_factory=set)
    wide: bool = False  # the envelope's `pools: wide` (only the train split differs)

    def pool(self, pool: dict[str, Any]) -> Any:
        return pools.split(pool, self.split)

    def unique(self, candidates: list[str], fallback: str) -> str:
        """The first candidate (in rng order) not yet used; else ``fallback`` with a counter."""
        options = list(candidates)
        self.rng.shuffle(options)
        for name in options:
            if name not in self.used_names:
                self.used_names.add(name)
                return name
        n = 2
        while f"{fallback}{n}" in self.used_names:
            n += 1
        self.used_names.add(f"{fallback}{n}")
        return f"{fallback}{n}"


class Augmenter:
    name: ClassVar[str] = ""
    family: ClassVar[str] = ""

    def apply(self, state: AugmentState) -> Harness:
        raise NotImplementedError


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name) if w]


def _style(words: list[str], style: str) -> str:
    low = [w.lower() for w in words]
    if style == "camel":
        return low[0] + "".join(w.capitalize() for w in low[1:])
    if style == "pascal":
        return "".join(w.capitalize() for w in low)
    if style == "kebab":
        return "-".join(low)
    if style == "upper_snake":
        return "_".join(low).upper()
    if style == "dotted":
        return ".".join(low)
    return "_".join(low)


def _nonce(state: AugmentState) -> list[str] | None:
    """One or two made-up words (``NONCE_SYLLABLES``), for a ``NONCE_SHARE`` of renames; ``None`` on
    the other draws and on the held-out split (which has no syllables)."""
    syllables = state.pool(pools.NONCE_SYLLABLES)
    if not syllables or state.rng.random() >= state.pool(pools.NONCE_SHARE):
        return None
    word = lambda: "".join(state.rng.choice(syllables) for _ in range(state.rng.randint(2, 3)))  # noqa: E731
    return [word() for _ in range(state.rng.randint(1, 2))]


def _replace_names(text: str, renames: dict[str, str]) -> str:
    for old, new in sorted(renames.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"(?<![\w\-.]){re.escape(old)}(?![\w\-])", new, text)
    return text


def _rewrite_skill_bodies(harness: Harness, renames: dict[str, str]) -> tuple[Skill, ...]:
    return tuple(dataclasses.replace(s, body=_replace_names(s.body, renames)) for s in harness.skills)


# -- tools ----------------------------------------------------------------------------------------------
class ToolRename(Augmenter):
    """Rename tools (synonyms in several casings, codes, other languages) and every mention of them."""

    name, family = "tool_rename", "tools"

    def _new_name(self, state: AugmentState, tool: ToolSpec, index: int) -> str:
        fid = tool.function_id
        style = state.rng.choice(state.pool(pools.TOOL_STYLES))
        if (nonce := _nonce(state)) is not None:
            return state.unique([_style(nonce, style if style in ("snake", "camel", "kebab") else "snake")], "tool_x")
        if style == "code":
            code = state.pool({"train": pools.TOOL_CODES["train"], "heldout": pools.TOOL_CODES["heldout"]})
            return state.unique([code.format(n=index + 1, letter=string.ascii_uppercase[index % 26])], "tool_x")
        if style == "foreign" and fid in pools.TOOL_FOREIGN:
            words = [
                state.rng.choice(state.pool(pools.TOOL_VERBS)),
                state.rng.choice(state.pool(pools.TOOL_FOREIGN[fid])),
            ]
            return state.unique([_style(words, "snake")], "tool_x")
        concepts = state.pool(pools.TOOL_CONCEPTS.get(fid, {"train": [fid], "heldout": [fid]}))
        verbs = state.pool(pools.TOOL_VERBS)
        options = [_style([v, *_words(c)], style) for v in verbs for c in concepts]
        return state.unique(options, _style(["tool", *_words(fid)], "snake"))

    def apply(self, state: AugmentState) -> Harness:
        h = state.harness
        share = min(1.0, 0.5 + 0.5 * state.strength)
        renames = {}
        for i, tool in enumerate(h.tools):
            if tool.metadata.get("decoy") or state.rng.random() > share:
                continue
            renames[tool.name] = self._new_name(state, tool, i)
        tools = tuple(dataclasses.replace(t, name=renames.get(t.name, t.name)) for t in h.tools)
        state.record.setdefault("tools", {}).update({h.tool(o).function_id: n for o, n in renames.items()})  # type: ignore[union-attr]
        return h.replace(tools=tools, skills=_rewrite_skill_bodies(h, renames))


class ToolDescriptions(Augmenter):
    name, family = "tool_descriptions", "tools"

    def apply(self, state: AugmentState) -> Harness:
        tools = []
        for t in state.harness.tools:
            options = pools.TOOL_DESCRIPTIONS.get(t.function_id)
            if options and state.rng.random() < 0.5 + 0.5 * state.strength:
                t = dataclasses.replace(t, description=state.rng.choice(state.pool(options)))
            tools.append(t)
        state.record["tool_descriptions"] = True
        return state.harness.replace(tools=tuple(tools))


class ParamRename(Augmenter):
    """Rename parameters in the model-visible schema; ``metadata.param_map`` keeps canonical → current."""

    name, family = "param_rename", "tools"

    def _rename_tool(self, state: AugmentState, tool: ToolSpec) -> ToolSpec:
        props = dict(tool.parameters.get("properties", {}))
        old_map = dict(tool.metadata.get("param_map") or {})
        inverse = {cur: canon for canon, cur in old_map.items()}
        new_props, param_map = {}, dict(old_map)
        for current, schema in props.items():
            canonical = inverse.get(current, current)
            options = state.pool(pools.PARAM_NAMES[canonical]) if canonical in pools.PARAM_NAMES else []
            new = state.rng.choice(options) if options and state.rng.random() < 0.7 else current
            new_props[new] = schema
            if new != canonical:
                param_map[canonical] = new
        required = [param_map.get(inverse.get(r, r), r) for r in tool.parameters.get("required", [])]
        params = {**tool.parameters, "properties": new_props, "required": required}
        return dataclasses.replace(tool, parameters=params, metadata={**tool.metadata, "param_map": param_map})

    def apply(self, state: AugmentState) -> Harness:
        tools = tuple(t if t.metadata.get("decoy") else self._rename_tool(state, t) for t in state.harness.tools)
        state.record["params"] = {
            t.function_id: dict(t.metadata.get("param_map", {})) for t in tools if t.metadata.get("param_map")
        }
        return state.harness.replace(tools=tools)


class ToolDecoys(Augmenter):
    name, family = "tool_decoys", "tools"

    def apply(self, state: AugmentState) -> Harness:
        h = state.harness
        candidates = list(state.pool(pools.DECOY_TOOLS))
        k = max(1, round(state.rng.uniform(1, 1 + 2 * state.strength)))
        state.rng.shuffle(candidates)
        added = []
        for name, desc, props in candidates[:k]:
            if h.tool(name) or name in state.used_names:
                continue
            state.used_names.add(name)
            added.append(
                ToolSpec(
                    name,
                    desc,
                    {"type": "object", "properties": dict(props), "required": []},
                    "python:hat.augment.decoys:decoy_tool",
                    metadata={"function_id": f"decoy:{name}", "decoy": True},
                )
            )
        state.record["decoy_tools"] = [t.name for t in added]
        tools = list(h.tools)
        for tool in added:
            tools.insert(state.rng.randint(0, len(tools)), tool)
        return h.replace(tools=tuple(tools))


class ToolReorder(Augmenter):
    name, family = "tool_reorder", "tools"

    def apply(self, state: AugmentState) -> Harness:
        tools = list(state.harness.tools)
        state.rng.shuffle(tools)
        state.record["tool_order"] = [t.name for t in tools]
        return state.harness.replace(tools=tuple(tools))


# -- skills ---------------------------------------------------------------------------------------------
class SkillRename(Augmenter):
    name, family = "skill_rename", "skills"

    def _new_name(self, state: AugmentState, skill: Skill, index: int) -> str:
        fid = skill.function_id
        style = state.rng.choice(state.pool(pools.SKILL_STYLES))
        if (nonce := _nonce(state)) is not None:
            return state.unique(["-".join(nonce)], "skill-x")
        if style == "code":
            code = state.pool(pools.SKILL_CODES)
            return state.unique([code.format(n=index + 1, letter=string.ascii_lowercase[index % 26])], "skill-x")
        if style == "foreign" and fid in pools.SKILL_FOREIGN:
            return state.unique(list(state.pool(pools.SKILL_FOREIGN[fid])), "skill-x")
        concepts = list(state.pool(pools.SKILL_CONCEPTS.get(fid, {"train": [fid], "heldout": [fid]})))
        if style == "suffixed":
            concepts = [f"{c}-v{state.rng.randint(2, 9)}" for c in concepts]
        return state.unique(concepts, "skill-x")

    def apply(self, state: AugmentState) -> Harness:
        h = state.harness
        renames = {}
        for i, skill in enumerate(h.skills):
            if not skill.metadata.get("decoy") and state.rng.random() < 0.5 + 0.5 * state.strength:
                renames[skill.name] = self._new_name(state, skill, i)
        skills = tuple(dataclasses.replace(s, name=renames.get(s.name, s.name)) for s in h.skills)
        state.record["skills"] = {h.skill(o).function_id: n for o, n in renames.items()}  # type: ignore[union-attr]
        h = h.replace(skills=skills)
        return h.replace(skills=_rewrite_skill_bodies(h, renames))


class SkillDescriptions(Augmenter):
    name, family = "skill_descriptions", "skills"

    def apply(self, state: AugmentState) -> Harness:
        skills = []
        for s in state.harness.skills:
            options = (pools.SKILL_DESCRIPTIONS_WIDE if state.wide else pools.SKILL_DESCRIPTIONS).get(s.function_id)
            if options and state.rng.random() < 0.5 + 0.5 * state.strength:
                s = dataclasses.replace(s, description=state.rng.choice(state.pool(options)))
            skills.append(s)
        state.record["skill_descriptions"] = True
        return state.harness.replace(skills=tuple(skills))


class SkillDecoys(Augmenter):
    name, family = "skill_decoys", "skills"

    def apply(self, state: AugmentState) -> Harness:
        h = state.harness
        candidates = list(state.pool(pools.DECOY_SKILLS_WIDE if state.wide else pools.DECOY_SKILLS))
        state.rng.shuffle(candidates)
        k = max(1, round(state.rng.uniform(1, 1 + state.strength)))
        added = [
            Skill(name, desc, body, {"version": "1.0", "function_id": f"decoy:{name}", "decoy": True})
            for name, desc, body in candidates[:k]
            if h.skill(name) is None and name not in state.used_names
        ]
        state.used_names.update(s.name for s in added)
        skills = list(h.skills)
        for skill in added:
            skills.insert(state.rng.randint(0, len(skills)), skill)
        state.record["decoy_skills"] = [s.name for s in added]
        return h.replace(skills=tuple(skills))


_RULE = re.compile(r"^\s*(\d+)[.)]\s+(.*)$")


def _rules(body: str) -> tuple[list[str], list[str]]:
    """Split a skill body into numbered rules and the other lines (kept in front)."""
    rules, other = [], []
    for line in body.splitlines():
        m = _RULE.match(line)
        if m:
            rules.append(m.group(2))
        else:
            other.append(line)
    return rules, other


def _join(other: list[str], rules: list[str]) -> str:
    head = "\n".join(line for line in other if line.strip())
    numbered = "\n".join(f"{i}. {r}" for i, r in enumerate(rules, 1))
    return f"{head}\n{numbered}".strip() if head else numbered


class RuleMask(Augmenter):
    """Drop a few rules that name no tool (the ones naming tools carry the task's how-to)."""

    name, family = "rule_mask", "skills"

    def apply(self, state: AugmentState) -> Harness:
        masked: dict[str, list[int]] = {}
        skills = []
        for s in state.harness.skills:
            rules, other = _rules(s.body)
            droppable = [i for i, r in enumerate(rules) if "`" not in r]
            k = min(len(droppable), max(0, round(state.rng.uniform(0, 1 + state.strength))))
            drop = set(state.rng.sample(droppable, k)) if k and len(rules) - k >= 2 else set()
            if drop:
                masked[s.name] = sorted(drop)
                s = dataclasses.replace(s, body=_join(other, [r for i, r in enumerate(rules) if i not in drop]))
            skills.append(s)
        state.record["masked_rules"] = masked
        return state.harness.replace(skills=tuple(skills))


class RuleParaphrase(Augmenter):
    """Paraphrase rules (synonym swaps, prefixes) and reorder them."""

    name, family = "rule_paraphrase", "skills"

    def _paraphrase(self, state: AugmentState, rule: str) -> str:
        for old, new in state.pool(pools.RULE_SYNONYMS):
            if old in rule and state.rng.random() < 0.6:
                rule = rule.replace(old, new, 1)
        return state.rng.choice(state.pool(pools.RULE_PREFIXES)) + rule

    def apply(self, state: AugmentState) -> Harness:
        skills = []
        for s in state.harness.skills:
            rules, other = _rules(s.body)
            rules = [self._paraphrase(state, r) for r in rules]
            state.rng.shuffle(rules)
            skills.append(dataclasses.replace(s, body=_join(other, rules)))
        state.record["rules_paraphrased"] = True
        return state.harness.replace(skills=tuple(skills))


# -- prompt ---------------------------------------------------------------------------------------------
class BlockReorder(Augmenter):
    """Reorder prompt blocks; the role block stays first (it names who speaks)."""

    name, family = "block_reorder", "prompt"

    def apply(self, state: AugmentState) -> Harness:
        head, rest = list(state.harness.pipeline[:1]), list(state.harness.pipeline[1:])
        state.rng.shuffle(rest)
        state.record["pipeline"] = head + rest
        return state.harness.replace(pipeline=tuple(head + rest))


class ItemReorder(Augmenter):
    """Reorder items within blocks: the skill catalog and the boundary rules."""

    name, family = "item_reorder", "prompt"

    def apply(self, state: AugmentState) -> Harness:
        skills = list(state.harness.skills)
        state.rng.shuffle(skills)
        settings = dict(state.harness.settings)
        if isinstance(settings.get("boundaries"), list):
            rules = list(settings["boundaries"])
            state.rng.shuffle(rules)
            settings["boundaries"] = rules
        state.record["item_order"] = True
        return state.harness.replace(skills=tuple(skills), settings=settings)


LIMIT_RANGES = {
    "reply_max_chars": (100, 240),
    "max_rounds": (3, 6),
    "max_retries": (1, 3),
    "tool_timeout_s": (2.0, 8.0),
}


class NumericLimits(Augmenter):
    """Perturb numeric constraints within valid ranges; judges read the new values."""

    name, family = "numeric_limits", "prompt"

    def apply(self, state: AugmentState) -> Harness:
        limits = state.harness.limits
        changes: dict[str, Any] = {}
        for key, (lo, hi) in LIMIT_RANGES.items():
            if state.rng.random() < 0.6:
                value = state.rng.uniform(lo, hi) if isinstance(lo, float) else state.rng.randint(lo, hi)
                changes[key] = (
                    round(value, 1)
                    if isinstance(value, float)
                    else (value // 10 * 10 if key == "reply_max_chars" else value)
                )
        state.record["limits"] = changes
        return state.harness.replace(limits=dataclasses.replace(limits, **changes))


class OutputNames(Augmenter):
    """Vary the output protocol's names: the reply field and the skill-loading action."""

    name, family = "output_names", "prompt"

    def apply(self, state: AugmentState) -> Harness:
        out = state.harness.output
        field_ = state.rng.choice(state.pool(pools.REPLY_FIELDS))
        skill_tool = state.rng.choice([n for n in state.pool(pools.SKILL_TOOL_NAMES) if not state.harness.tool(n)])
        schema = _rename_reply_schema(dict(out.reply_schema), out.reply_field, field_)
        state.record["output"] = {"reply_field": field_, "skill_tool": skill_tool}
        return state.harness.replace(
            output=dataclasses.replace(out, reply_field=field_, skill_tool=skill_tool, reply_schema=schema)
        )


def _rename_reply_schema(schema: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    props = {new if k == old else k: v for k, v in dict(schema.get("properties", {})).items()}
    required = [new if r == old else r for r in schema.get("required", [])]
    return {**schema, "properties": props, "required": required}


# -- hooks ------------------------------------------------------------------------------------------------
def _with_hook_config(harness: Harness, name: str, update: dict[str, Any]) -> Harness:
    hooks = tuple(HookSpec(h.name, {**h.config, **update}) if h.name == name else h for h in harness.hooks)
    return harness.replace(hooks=hooks)


class RetryVariants(Augmenter):
    name, family = "retry_variants", "hooks"

    def apply(self, state: AugmentState) -> Harness:
        config = {"retries": state.rng.randint(0, 3), "backoff_s": state.rng.choice([0.0, 0.05, 0.1, 0.2])}
        state.record["tool_retry"] = config
        return _with_hook_config(state.harness, "tool_retry", config)


class FeedbackVariants(Augmenter):
    """Vary the structure of the feedback messages the hooks send back to the model."""

    name, family = "feedback_variants", "hooks"

    def apply(self, state: AugmentState) -> Harness:
        template = state.rng.choice(state.pool(pools.FEEDBACK_TEMPLATES))
        hooks = tuple(HookSpec(h.name, {**h.config, "feedback_template": template}) for h in state.harness.hooks)
        state.record["feedback_template"] = template
        return state.harness.replace(hooks=hooks)


class HookEdits(Augmenter):
    """Hook-triggered edits: a ``context_note`` hook that edits the context before each model call
    (a reminder of the reply limit, or of the room's product)."""

    name, family = "hook_edits", "hooks"
    NOTES: ClassVar[dict[str, list[str]]] = {
        "train": ["Reminder: keep replies under {limit} characters.", "Reminder: use tools for every number you say."],
        "heldout": [
            "Heads-up: answers longer than {limit} characters are rejected.",
            "Heads-up: facts come from tool results only.",
        ],
    }

    def apply(self, state: AugmentState) -> Harness:
        note = state.rng.choice(state.pool(self.NOTES))
        hooks = (*state.harness.hooks, HookSpec("context_note", {"text": note}))
        state.record["hook_edits"] = note
        return state.harness.replace(hooks=hooks)


AUGMENTERS: dict[str, type[Augmenter]] = {
    cls.name: cls
    for cls in (
        SkillDecoys, SkillRename, SkillDescriptions, RuleMask, RuleParaphrase,
        ToolRename, ToolDescriptions, ParamRename, ToolDecoys, ToolReorder,
        BlockReorder, ItemReorder, NumericLimits, OutputNames,
        RetryVariants, FeedbackVariants, HookEdits,
    )
}  # fmt: skip
FAMILIES: dict[str, list[str]] = {}
for _name, _cls in AUGMENTERS.items():
    FAMILIES.setdefault(_cls.family, []).append(_name)
