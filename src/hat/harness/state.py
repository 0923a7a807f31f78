"""Harness state ``h = (S, T, P, K)`` as frozen dataclasses, with a stable hash and a structural diff.

Why frozen: a harness version is a value. Runtimes, traces, augmentations and the evolution loop
all point at one exact version through :meth:`Harness.content_hash`; an in-place edit would make
a recorded hash lie. Edits produce a new value (``dataclasses.replace``).

The hash covers everything that can change behaviour (names, descriptions, rules, schemas,
bindings, prompt templates, pipeline order, hook config, limits, output format) and nothing that
does not (the folder the harness was loaded from). It is the SHA-256 of a canonical JSON form.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Harness",
    "HarnessDiff",
    "HookSpec",
    "Limits",
    "OutputFormat",
    "PromptBlock",
    "SectionDiff",
    "Skill",
    "ToolSpec",
    "canonical_json",
    "diff_harness",
    "sha256_text",
]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the form every hash in HAT is taken over."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Skill:
    """An Agent-Skills-style skill: ``skills/<name>/SKILL.md`` (front matter + Markdown rules).

    ``metadata`` holds the spec's free ``metadata`` mapping (``version``, and HAT's
    ``function_id`` that ties a renamed skill to its stable function in the simulator).
    """

    name: str
    description: str
    body: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def function_id(self) -> str:
        return str(self.metadata.get("function_id", self.name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "body": self.body,
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True)
class ToolSpec:
    """A tool: ``tools/<name>.yaml``. ``parameters`` is a JSON Schema (type ``object``).

    ``binding`` says how to run it: ``python:package.module:function`` or ``mcp:server/tool``
    (``server`` is declared under ``mcp_servers`` in ``harness.yaml``). ``idempotent``: running the
    call twice has the effect of running it once (a lookup); only such tools are ever retried.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    binding: str
    timeout_s: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    idempotent: bool = False

    @property
    def function_id(self) -> str:
        return str(self.metadata.get("function_id", self.name))

    def signature(self) -> dict[str, Any]:
        """The model-visible part: what a tool-signature prompt block renders."""
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.signature(),
            "binding": self.binding,
            "timeout_s": self.timeout_s,
            "metadata": dict(self.metadata),
            "idempotent": self.idempotent,
        }


@dataclass(frozen=True)
class PromptBlock:
    """One Jinja template from ``prompts/<id>.md``; the pipeline decides where (and if) it renders."""

    id: str
    template: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "template": self.template}


@dataclass(frozen=True)
class HookSpec:
    """A hook reference from ``harness.yaml``: a built-in name, ``hooks:Class`` (the harness's own
    ``hooks.py``) or ``python:module:Class``; ``config`` is passed to the hook's constructor."""

    name: str
    config: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "config": dict(self.config)}


@dataclass(frozen=True)
class Limits:
    """Numeric constraints. HSA perturbs these within valid ranges; judges read the current value."""

    max_rounds: int = 4
    max_retries: int = 2
    reply_max_chars: int = 160
    max_comment_chars: int = 2000
    max_new_tokens: int = 160
    tool_timeout_s: float = 5.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class OutputFormat:
    """The output protocol's knobs: the reply's JSON Schema, the name of the skill-loading action and
    the reply the runtime gives when every retry failed (never an exception to the caller)."""

    reply_schema: Mapping[str, Any] = field(
        default_factory=lambda: {
            "type": "object",
            "properties": {"reply": {"type": "string", "minLength": 1}},
            "required": ["reply"],
        }
    )
    reply_field: str = "reply"
    skill_tool: str = "load_skill"
    fallback_reply: str = "Thanks for the question! Let me check and get back to you in a moment."

    def to_dict(self) -> dict[str, Any]:
        return {
            "reply_schema": dict(self.reply_schema),
            "reply_field": self.reply_field,
            "skill_tool": self.skill_tool,
            "fallback_reply": self.fallback_reply,
        }


@dataclass(frozen=True)
class Harness:
    """``h = (S, T, P, K)`` plus the limits and output format the prompt and hooks refer to.

    ``blocks`` holds every template in ``prompts/``; ``pipeline`` is the rendered order (a block not
    in the pipeline is kept but not rendered). ``settings`` is free-form data the templates and
    hooks may read (e.g. boundary rules). ``trusted_modules`` lists the Python packages outside
    ``hat`` and the harness folder that its ``python:`` bindings and hooks may use (see
    :mod:`hat.harness.static_check`). ``root`` records where it was loaded from; not hashed.

    How requests reach the model: ``input_block`` names the block (not in the pipeline) that
    renders the user message from ``turns`` and ``mode`` (none: the turn itself, or the turns as a
    numbered list); ``context_provider`` is a ``python:module:function`` binding that fills a
    request's context before it runs (a catalog lookup, a CRM record), applied by ``hat run`` and
    ``hat serve``; ``sample_context`` is a request context shaped like the real ones, used to
    dry-render the templates at validation.
    """

    name: str
    version: str
    description: str = ""
    skills: tuple[Skill, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    blocks: tuple[PromptBlock, ...] = ()
    pipeline: tuple[str, ...] = ()
    hooks: tuple[HookSpec, ...] = ()
    limits: Limits = field(default_factory=Limits)
    output: OutputFormat = field(default_factory=OutputFormat)
    mcp_servers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    hooks_source: str = ""
    trusted_modules: tuple[str, ...] = ()
    input_block: str = ""
    context_provider: str = ""
    sample_context: Mapping[str, Any] = field(default_factory=dict)
    root: str | None = field(default=None, compare=False)

    # -- lookup ---------------------------------------------------------------------------------
    def skill(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def block(self, block_id: str) -> PromptBlock | None:
        return next((b for b in self.blocks if b.id == block_id), None)

    def tool_by_function(self, function_id: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.function_id == function_id), None)

    def skill_by_function(self, function_id: str) -> Skill | None:
        return next((s for s in self.skills if s.function_id == function_id), None)

    # -- identity -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "skills": [s.to_dict() for s in self.skills],
            "tools": [t.to_dict() for t in self.tools],
            "blocks": [b.to_dict() for b in self.blocks],
            "pipeline": list(self.pipeline),
            "hooks": [h.to_dict() for h in self.hooks],
            "limits": self.limits.to_dict(),
            "output": self.output.to_dict(),
            "mcp_servers": {k: dict(v) for k, v in self.mcp_servers.items()},
            "settings": dict(self.settings),
            "hooks_source": self.hooks_source,
            # only when set, so the hash of every harness without it stays what it was
            **({"trusted_modules": list(self.trusted_modules)} if self.trusted_modules else {}),
            **({"input_block": self.input_block} if self.input_block else {}),
            **({"context_provider": self.context_provider} if self.context_provider else {}),
            **({"sample_context": dict(self.sample_context)} if self.sample_context else {}),
        }

    def content_hash(self) -> str:
        """Stable SHA-256 over the canonical form; equal harnesses hash equal across processes."""
        return sha256_text(canonical_json(self.to_dict()))

    @property
    def short_hash(self) -> str:
        return self.content_hash()[:12]

    def replace(self, **changes: Any) -> Harness:
        return dataclasses.replace(self, **changes)


# -- structural diff ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SectionDiff:
    """Differences of one section (skills, tools, blocks or hooks), by name."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    changed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.renamed or self.changed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "renamed": [list(pair) for pair in self.renamed],
            "changed": list(self.changed),
        }


@dataclass(frozen=True)
class HarnessDiff:
    skills: SectionDiff
    tools: SectionDiff
    blocks: SectionDiff
    hooks: SectionDiff
    pipeline_changed: bool
    limits_changed: tuple[str, ...]
    other_changed: tuple[str, ...]

    @property
    def empty(self) -> bool:
        sections = (self.skills, self.tools, self.blocks, self.hooks)
        return all(s.empty for s in sections) and not (
            self.pipeline_changed or self.limits_changed or self.other_changed
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "skills": self.skills.to_dict(),
            "tools": self.tools.to_dict(),
            "blocks": self.blocks.to_dict(),
            "hooks": self.hooks.to_dict(),
            "pipeline_changed": self.pipeline_changed,
            "limits_changed": list(self.limits_changed),
            "other_changed": list(self.other_changed),
        }


def _section_diff(
    old: Mapping[str, dict[str, Any]], new: Mapping[str, dict[str, Any]], key: str = "name"
) -> SectionDiff:
    """Diff two name→item maps. A removed/added pair is a *rename* when the items agree once the
    name is ignored, or when both carry the same ``metadata.function_id``."""
    removed = [n for n in old if n not in new]
    added = [n for n in new if n not in old]
    renamed: list[tuple[str, str]] = []
    for old_name in list(removed):
        match = next((a for a in added if _same_entity(old[old_name], new[a], key)), None)
        if match is not None:
            renamed.append((old_name, match))
            removed.remove(old_name)
            added.remove(match)
    changed = [n for n in old if n in new and canonical_json(old[n]) != canonical_json(new[n])]
    return SectionDiff(tuple(added), tuple(removed), tuple(renamed), tuple(changed))


def _same_entity(a: dict[str, Any], b: dict[str, Any], key: str) -> bool:
    fa = (a.get("metadata") or {}).get("function_id")
    fb = (b.get("metadata") or {}).get("function_id")
    if fa and fb:
        return bool(fa == fb)
    strip = lambda d: canonical_json({k: v for k, v in d.items() if k != key})  # noqa: E731
    return strip(a) == strip(b)


def _by(items: Iterable[Any], key: str) -> dict[str, dict[str, Any]]:
    return {getattr(i, key): i.to_dict() for i in items}


def diff_harness(a: Harness, b: Harness) -> HarnessDiff:
    """What changed from ``a`` to ``b``: added / removed / renamed / changed per section."""
    limits = tuple(k for k, v in a.limits.to_dict().items() if b.limits.to_dict().get(k) != v)
    other = tuple(
        name
        for name in (
            "name",
            "version",
            "description",
            "output",
            "mcp_servers",
            "settings",
            "hooks_source",
            "trusted_modules",
        )
        if canonical_json(a.to_dict().get(name)) != canonical_json(b.to_dict().get(name))
    )
    hooks_a = {f"{i}:{h.name}": h.to_dict() for i, h in enumerate(a.hooks)}
    hooks_b = {f"{i}:{h.name}": h.to_dict() for i, h in enumerate(b.hooks)}
    return HarnessDiff(
        skills=_section_diff(_by(a.skills, "name"), _by(b.skills, "name")),
        tools=_section_diff(_by(a.tools, "name"), _by(b.tools, "name")),
        blocks=_section_diff(_by(a.blocks, "id"), _by(b.blocks, "id"), key="id"),
        hooks=_hook_diff(a.hooks, b.hooks) if hooks_a != hooks_b else SectionDiff(),
        pipeline_changed=a.pipeline != b.pipeline,
        limits_changed=limits,
        other_changed=other,
    )


def _hook_diff(a: tuple[HookSpec, ...], b: tuple[HookSpec, ...]) -> SectionDiff:
    names_a = [h.name for h in a]
    names_b = [h.name for h in b]
    added = tuple(n for n in names_b if n not in names_a)
    removed = tuple(n for n in names_a if n not in names_b)
    cfg_a = {h.name: canonical_json(dict(h.config)) for h in a}
    changed = tuple(h.name for h in b if h.name in cfg_a and cfg_a[h.name] != canonical_json(dict(h.config)))
    return SectionDiff(added=added, removed=removed, changed=changed)
