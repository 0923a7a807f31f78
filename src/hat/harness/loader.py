"""Load, validate and save a harness folder.

Layout (see docs/architecture.md)::

    my-harness/
      harness.yaml            name, version, pipeline, limits, output, hooks, mcp_servers, settings
      skills/<name>/SKILL.md  Agent Skills: YAML front matter (name, description, metadata) + rules
      tools/<name>.yaml       name, description, JSON-schema parameters, binding, timeout_s, metadata,
                              idempotent
      prompts/<block>.md      Jinja prompt block templates
      hooks.py                optional project hooks (``hooks:ClassName`` in harness.yaml)

Validation collects *every* problem (file and, where known, line) before raising one
:class:`~hat.errors.HarnessValidationError`; nothing is ever half-loaded. Line numbers come from
PyYAML's node marks, so ``hat harness validate`` points at the offending entry, not just the file.

Loading and validating never run harness code: ``hooks.py`` and ``python:`` binding targets are
read statically, MCP servers are not started (:mod:`hat.harness.static_check`). Code runs when an
:class:`~hat.harness.runtime.Agent` is built for the harness (to serve or run it). Beyond the files'
own shape, validation checks what would otherwise fail on every request or leak out of the folder:

- every prompt block is dry-rendered against a sample room, product and FAQ
  (:func:`~hat.harness.pipeline.dry_render`): a block that cannot render is an error, one that
  renders only when a room and product are given is a warning;
- a file that resolves outside the harness folder (a symlink pointing out) is an error, and is
  never read;
- a skill or rendered block naming a renamed tool by its old name is an error; another unknown
  tool-like name is a warning (:func:`~hat.harness.static_check.tool_references`);
- the binding policy (stdlib refused, ``trusted_modules``) and the MCP command policy.

Warnings never stop a load or a reload; :func:`check_harness` returns them (and the MCP command
lines the harness would run) for ``hat harness validate``, which fails on them with ``--strict``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from hat.errors import HarnessError, HarnessValidationError, Problem
from hat.harness.pipeline import dry_render, sample_context
from hat.harness.state import Harness, HookSpec, Limits, OutputFormat, PromptBlock, Skill, ToolSpec
from hat.harness.static_check import check_mcp_server, escaping_paths, is_denied_module, tool_references

__all__ = [
    "BUILTIN_HARNESSES",
    "HarnessCheck",
    "check_harness",
    "load_context_provider",
    "load_harness",
    "resolve_harness_path",
    "save_harness",
    "validate_harness",
]

SKILL_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
MODULE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
HARNESS_KEYS = {
    "name",
    "version",
    "description",
    "pipeline",
    "limits",
    "output",
    "hooks",
    "mcp_servers",
    "settings",
    "order",
    "trusted_modules",
    "input_block",
    "context_provider",
    "sample_context",
}
HARNESSES_DIR = Path(__file__).resolve().parent.parent / "harnesses"
BUILTIN_HARNESSES = tuple(sorted(p.name for p in HARNESSES_DIR.iterdir() if (p / "harness.yaml").is_file()))
"""Harnesses shipped in the package (``hat/harnesses/<name>/``), loadable by name."""


def resolve_harness_path(ref: str | Path) -> Path:
    """A folder path, or the name of a harness shipped in the package (``livestream``)."""
    path = Path(ref)
    if path.is_dir():
        return path
    if str(ref) in BUILTIN_HARNESSES:
        return HARNESSES_DIR / str(ref)
    raise HarnessError(
        f"no harness folder {str(ref)!r} and no built-in harness of that name; "
        f"give a folder with a harness.yaml or one of: {', '.join(BUILTIN_HARNESSES)}"
    )


# -- YAML with line numbers ----------------------------------------------------------------------
@dataclass
class _Doc:
    """A parsed YAML file plus a map from key paths to 1-based line numbers."""

    data: Any
    lines: dict[tuple[Any, ...], int] = field(default_factory=dict)

    def line(self, *path: Any) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)


def _node_lines(node: yaml.Node, path: tuple[Any, ...], out: dict[tuple[Any, ...], int]) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            out[(*path, key.value)] = key.start_mark.line + 1
            _node_lines(value, (*path, key.value), out)
            out[(*path, key.value)] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_lines(item, (*path, i), out)


def _parse_yaml(text: str, file: str, problems: list[Problem], line_offset: int = 0) -> _Doc | None:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 + line_offset if mark is not None else None
        problems.append(Problem(file, f"invalid YAML: {getattr(exc, 'problem', None) or exc}", line))
        return None
    lines: dict[tuple[Any, ...], int] = {}
    if node is not None:
        _node_lines(node, (), lines)
    return _Doc(data, {k: v + line_offset for k, v in lines.items()})


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


def _read(path: Path, root: Path, problems: list[Problem]) -> str | None:
    """The file's text; None (and a problem) when unreadable. A file that resolves outside the
    harness is never read (``_load_parts`` reports it once, as a symlink pointing out)."""
    if not _inside(path, root):
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(_rel(path, root), f"cannot read file: {exc}"))
        return None


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


# -- sections ------------------------------------------------------------------------------------
def _load_skill(folder: Path, root: Path, problems: list[Problem]) -> Skill | None:
    file = folder / "SKILL.md"
    rel = _rel(file, root)
    if not file.is_file():
        problems.append(Problem(_rel(folder, root), "skill folder has no SKILL.md"))
        return None
    text = _read(file, root, problems)
    if text is None:
        return None
    match = re.match(r"^---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|$)", text, re.S)
    if not match:
        problems.append(Problem(rel, "SKILL.md must start with YAML front matter between '---' lines", 1))
        return None
    doc = _parse_yaml(match.group(1), rel, problems, line_offset=1)
    if doc is None:
        return None
    meta = doc.data if isinstance(doc.data, dict) else {}
    if not isinstance(doc.data, dict):
        problems.append(Problem(rel, "front matter must be a mapping with name and description", 2))
        return None
    before = len(problems)
    _check_skill_fields(meta, folder.name, rel, doc, problems)
    if len(problems) > before:
        return None
    body = text[match.end() :].strip("\n")
    extra = {k: v for k, v in meta.items() if k not in ("name", "description", "metadata")}
    metadata = {**extra, **(meta.get("metadata") or {})}
    return Skill(name=meta["name"], description=str(meta["description"]).strip(), body=body, metadata=metadata)


def _check_skill_fields(meta: dict[str, Any], folder: str, rel: str, doc: _Doc, problems: list[Problem]) -> None:
    name, desc = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name:
        problems.append(Problem(rel, "front matter needs a 'name'", doc.line("name")))
    elif len(name) > 64 or not SKILL_NAME_RE.match(name):
        problems.append(
            Problem(
                rel,
                f"skill name {name!r} must be ≤ 64 chars of a-z, 0-9 and single hyphens",
                doc.line("name"),
            )
        )
    elif name != folder:
        problems.append(Problem(rel, f"skill name {name!r} must equal its folder name {folder!r}", doc.line("name")))
    if not isinstance(desc, str) or not desc.strip():
        problems.append(Problem(rel, "front matter needs a non-empty 'description'", doc.line("description")))
    elif len(desc) > 1024:
        problems.append(Problem(rel, f"description is {len(desc)} chars; the limit is 1024", doc.line("description")))
    if "metadata" in meta and not isinstance(meta["metadata"], dict):
        problems.append(Problem(rel, "'metadata' must be a mapping", doc.line("metadata")))


def _load_tool(file: Path, root: Path, problems: list[Problem]) -> ToolSpec | None:
    rel = _rel(file, root)
    text = _read(file, root, problems)
    doc = _parse_yaml(text, rel, problems) if text is not None else None
    if doc is None:
        return None
    data = doc.data
    if not isinstance(data, dict):
        problems.append(Problem(rel, "a tool file must be a mapping (name, description, parameters, binding)", 1))
        return None
    before = len(problems)
    for key in ("name", "description", "binding"):
        if not isinstance(data.get(key), str) or not data.get(key):
            problems.append(Problem(rel, f"tool needs a string '{key}'", doc.line(key)))
    name = data.get("name")
    if isinstance(name, str) and not TOOL_NAME_RE.match(name):
        problems.append(Problem(rel, f"tool name {name!r} must match {TOOL_NAME_RE.pattern}", doc.line("name")))
    params = data.get("parameters", {"type": "object", "properties": {}})
    _check_schema(params, rel, doc.line("parameters"), problems)
    timeout = data.get("timeout_s")
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        problems.append(Problem(rel, "timeout_s must be a positive number", doc.line("timeout_s")))
    if not isinstance(data.get("idempotent", False), bool):
        problems.append(Problem(rel, "idempotent must be true or false", doc.line("idempotent")))
    if len(problems) > before:
        return None
    return ToolSpec(
        name=data["name"],
        description=str(data["description"]).strip(),
        parameters=params,
        binding=data["binding"],
        timeout_s=float(timeout) if timeout is not None else None,
        metadata=data.get("metadata") or {},
        idempotent=data.get("idempotent", False),
    )


def _check_schema(schema: Any, rel: str, line: int | None, problems: list[Problem]) -> None:
    if not isinstance(schema, dict):
        problems.append(Problem(rel, "'parameters' must be a JSON Schema mapping", line))
        return
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        problems.append(Problem(rel, f"invalid JSON schema at {where}: {exc.message}", line))
        return
    if schema.get("type") != "object":
        problems.append(Problem(rel, "'parameters' must be a JSON Schema of type 'object'", line))


def _load_blocks(root: Path, problems: list[Problem]) -> list[PromptBlock]:
    blocks = []
    env = jinja2.Environment()
    for file in sorted((root / "prompts").glob("*.md")):
        text = _read(file, root, problems)
        if text is None:
            continue
        try:
            env.parse(text)
        except jinja2.TemplateSyntaxError as exc:
            problems.append(Problem(_rel(file, root), f"Jinja syntax error: {exc.message}", exc.lineno))
            continue
        blocks.append(PromptBlock(id=file.stem, template=text))
    return blocks


def _as_mapping(doc: _Doc, key: str, rel: str, problems: list[Problem]) -> dict[str, Any]:
    value = doc.data.get(key) or {}
    if not isinstance(value, dict):
        problems.append(Problem(rel, f"'{key}' must be a mapping", doc.line(key)))
        return {}
    return value


def _as_str(doc: _Doc, key: str, rel: str, problems: list[Problem]) -> str:
    value = doc.data.get(key) or ""
    if not isinstance(value, str):
        problems.append(Problem(rel, f"'{key}' must be a string", doc.line(key)))
        return ""
    return value


def _load_limits(doc: _Doc, rel: str, problems: list[Problem]) -> Limits:
    raw = _as_mapping(doc, "limits", rel, problems)
    known = Limits().to_dict()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            problems.append(Problem(rel, f"unknown limit {key!r}; known: {', '.join(known)}", doc.line("limits", key)))
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            problems.append(Problem(rel, f"limit {key!r} must be a positive number", doc.line("limits", key)))
        else:
            values[key] = type(known[key])(value)
    return Limits(**values)


def _load_output(doc: _Doc, rel: str, problems: list[Problem]) -> OutputFormat:
    raw = _as_mapping(doc, "output", rel, problems)
    known = OutputFormat().to_dict()
    unknown = [k for k in raw if k not in known]
    for key in unknown:
        problems.append(Problem(rel, f"unknown output key {key!r}; known: {', '.join(known)}", doc.line("output", key)))
    if "reply_schema" in raw:
        schema = raw["reply_schema"]
        line = doc.line("output", "reply_schema")
        try:
            Draft202012Validator.check_schema(schema) if isinstance(schema, dict) else None
        except SchemaError as exc:
            problems.append(Problem(rel, f"invalid reply_schema: {exc.message}", line))
        if not isinstance(schema, dict):
            problems.append(Problem(rel, "reply_schema must be a JSON Schema mapping", line))
    return OutputFormat(**{k: v for k, v in raw.items() if k in known})


def _load_hooks(doc: _Doc, rel: str, problems: list[Problem]) -> list[HookSpec]:
    raw = doc.data.get("hooks") or []
    if not isinstance(raw, list):
        problems.append(Problem(rel, "'hooks' must be a list of {name, config}", doc.line("hooks")))
        return []
    hooks = []
    for i, item in enumerate(raw):
        item = {"name": item} if isinstance(item, str) else item
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            problems.append(Problem(rel, "each hook needs a 'name'", doc.line("hooks", i)))
            continue
        config = item.get("config") or {}
        if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
            problems.append(
                Problem(
                    rel,
                    f"hook {item['name']!r}: config must be a mapping with string keys "
                    "(quote YAML words like on/off/yes/no used as keys)",
                    doc.line("hooks", i),
                )
            )
            continue
        hooks.append(HookSpec(name=item["name"], config=config))
    return hooks


def _load_trusted(doc: _Doc, rel: str, problems: list[Problem]) -> tuple[str, ...]:
    raw = doc.data.get("trusted_modules") or []
    line = doc.line("trusted_modules")
    if not isinstance(raw, list) or not all(isinstance(m, str) and MODULE_NAME_RE.match(m) for m in raw):
        problems.append(Problem(rel, "'trusted_modules' must be a list of module names (e.g. my_company.tools)", line))
        return ()
    for i, module in enumerate(raw):
        if is_denied_module(module):
            problems.append(
                Problem(
                    rel,
                    f"trusted_modules: {module!r} is in the standard library, which bindings may not use",
                    doc.line("trusted_modules", i),
                )
            )
    return tuple(raw)


def _load_pipeline(doc: _Doc, rel: str, problems: list[Problem]) -> list[str]:
    raw = doc.data.get("pipeline")
    if not isinstance(raw, list) or not all(isinstance(b, str) for b in raw) or not raw:
        problems.append(Problem(rel, "'pipeline' must be a non-empty list of prompt block ids", doc.line("pipeline")))
        return []
    return list(raw)


def _cross_check(
    harness: Harness, doc: _Doc, rel: str, root: Path, problems: list[Problem], warnings: list[Problem]
) -> None:
    """Checks that need more than one file: names unique, references resolve, bindings exist."""
    _check_pipeline(harness, doc, rel, root, problems)
    _check_request_io(harness, doc, rel, problems)
    _check_tools(harness, doc, rel, root, problems)
    _check_hooks(harness, doc, rel, problems, warnings)
    _check_mcp_servers(harness, doc, rel, problems)
    rendered = _check_rendering(harness, problems, warnings)
    _check_references(harness, root, rendered, problems, warnings)


def _check_pipeline(harness: Harness, doc: _Doc, rel: str, root: Path, problems: list[Problem]) -> None:
    block_ids = {b.id for b in harness.blocks}
    for i, block_id in enumerate(harness.pipeline):
        if block_id in block_ids or (root / "prompts" / f"{block_id}.md").is_file():
            continue  # a file that exists but did not load has its own problem already
        problems.append(
            Problem(
                rel, f"pipeline block {block_id!r} does not exist (no prompts/{block_id}.md)", doc.line("pipeline", i)
            )
        )


def _check_request_io(harness: Harness, doc: _Doc, rel: str, problems: list[Problem]) -> None:
    """The input block exists and is not also rendered into the system prompt; the context provider
    is a ``python:`` binding the binding policy allows (it runs on every request, like a tool)."""
    from hat.harness.tools import check_binding  # local: tools imports the runtime's types

    if harness.input_block:
        if harness.block(harness.input_block) is None:
            message = f"input_block {harness.input_block!r} does not exist (no prompts/{harness.input_block}.md)"
            problems.append(Problem(rel, message, doc.line("input_block")))
        elif harness.input_block in harness.pipeline:
            message = f"input_block {harness.input_block!r} renders the user message; remove it from the pipeline"
            problems.append(Problem(rel, message, doc.line("input_block")))
    binding = harness.context_provider
    if binding:
        error: str | None = "context_provider must be a python:module:function binding"
        if binding.startswith("python:"):
            error = check_binding(binding, {}, root=harness.root, trusted=harness.trusted_modules)
        if error:
            problems.append(Problem(rel, f"context_provider: {error}", doc.line("context_provider")))


def _check_tools(harness: Harness, doc: _Doc, rel: str, root: Path, problems: list[Problem]) -> None:
    from hat.harness.tools import check_binding  # local: tools imports the runtime's types

    seen: dict[str, int] = {}
    for tool in harness.tools:
        seen[tool.name] = seen.get(tool.name, 0) + 1
        error = check_binding(tool.binding, harness.mcp_servers, root=harness.root, trusted=harness.trusted_modules)
        if error:
            problems.append(Problem(f"tools/{_tool_file(root, tool.name)}", error))
    for name, count in seen.items():
        if count > 1:
            problems.append(Problem("tools/", f"duplicate tool name {name!r} ({count} tool files declare it)"))
    if harness.output.skill_tool in seen:
        problems.append(
            Problem(
                rel,
                f"tool name {harness.output.skill_tool!r} clashes with output.skill_tool",
                doc.line("output", "skill_tool"),
            )
        )


def _check_hooks(harness: Harness, doc: _Doc, rel: str, problems: list[Problem], warnings: list[Problem]) -> None:
    from hat.harness.hooks import check_hook_spec  # local: hooks imports the runtime's types

    tools = {t.name for t in harness.tools} | {t.function_id for t in harness.tools}
    for i, spec in enumerate(harness.hooks):
        error = check_hook_spec(spec, harness)
        if error:
            problems.append(Problem(rel, error, doc.line("hooks", i)))
        for name, where in _hook_tool_names(spec):
            if name not in tools:
                message = (
                    f"hook {spec.name!r} names the tool {name!r}, which this harness does not have "
                    "(by name or function_id); the rule never applies. Rename it here too"
                )
                warnings.append(Problem(rel, message, doc.line("hooks", i, "config", *where)))


def _hook_tool_names(spec: HookSpec) -> list[tuple[str, tuple[str, ...]]]:
    """Tool names a built-in hook's config refers to, with their YAML path under ``config``
    (``tool_policy``: its rule keys and ``requires_any`` lists)."""
    rules = spec.config.get("rules") if spec.name == "tool_policy" else None
    if not isinstance(rules, Mapping):
        return []
    names: list[tuple[str, tuple[str, ...]]] = []
    for tool, rule in rules.items():
        names.append((str(tool), ("rules", str(tool))))
        required = rule.get("requires_any") if isinstance(rule, Mapping) else None
        if isinstance(required, list):
            names += [(str(r), ("rules", str(tool), "requires_any")) for r in required]
    return names


def _check_mcp_servers(harness: Harness, doc: _Doc, rel: str, problems: list[Problem]) -> None:
    for name, raw in harness.mcp_servers.items():
        error, _ = check_mcp_server(str(name), raw)
        if error:
            problems.append(Problem(rel, error, doc.line("mcp_servers", name)))


def _check_rendering(harness: Harness, problems: list[Problem], warnings: list[Problem]) -> dict[str, str]:
    """Dry-render every block; returns the rendered text of those that rendered."""
    rendered = {}
    for check in dry_render(harness):
        file = f"prompts/{check.block_id}.md"
        if check.error:
            problems.append(Problem(file, f"prompt block {check.block_id!r} {check.error}", check.line))
            continue
        if check.warning:
            warnings.append(Problem(file, f"prompt block {check.block_id!r} {check.warning}", check.line))
        rendered[check.block_id] = check.text or ""
    return rendered


def _check_references(
    harness: Harness, root: Path, rendered: Mapping[str, str], problems: list[Problem], warnings: list[Problem]
) -> None:
    texts = []
    for skill in harness.skills:
        file = root / "skills" / skill.name / "SKILL.md"
        source = (_read(file, root, []) or "") if file.is_file() else ""
        texts.append((_rel(file, root), f"{skill.description}\n{skill.body}", source))
    for block in harness.blocks:
        if block.id in rendered:
            texts.append((f"prompts/{block.id}.md", rendered[block.id], block.template))
    sample = dict(harness.sample_context)
    keys = [*sample_context(harness), *(k for v in sample.values() if isinstance(v, Mapping) for k in v)]
    for ref in tool_references(harness, texts, keys):
        (problems if ref.error else warnings).append(Problem(ref.file, ref.message, ref.line))


def _tool_file(root: Path, name: str) -> str:
    for file in sorted((root / "tools").glob("*.y*ml")):
        if not _inside(file, root):
            continue
        try:
            if (yaml.safe_load(file.read_text(encoding="utf-8")) or {}).get("name") == name:
                return file.name
        except (yaml.YAMLError, OSError, AttributeError):
            continue
    return f"{name}.yaml"


def _apply_order(items: list[Any], key: str, doc: _Doc, rel: str, problems: list[Problem]) -> list[Any]:
    """Order skills/tools as ``order.<key>`` in harness.yaml lists them (the catalog and tool
    blocks render in this order); unlisted items follow in file-name order."""
    order = (doc.data.get("order") or {}).get(key) if isinstance(doc.data.get("order"), dict) else None
    if order is None:
        return items
    names = [i.name for i in items]
    unknown = [n for n in order if n not in names]
    if unknown or not isinstance(order, list):
        problems.append(Problem(rel, f"order.{key} names unknown {key}: {unknown}", doc.line("order", key)))
        return items
    rank = {name: i for i, name in enumerate(order)}
    return sorted(items, key=lambda i: (rank.get(i.name, len(rank)), names.index(i.name)))


def _load_parts(root: Path, problems: list[Problem], warnings: list[Problem] | None = None) -> Harness | None:
    rel = "harness.yaml"
    for path in escaping_paths(root):
        problems.append(Problem(path, "resolves outside the harness folder (a symlink); copy the file in instead"))
    text = _read(root / rel, root, problems) if (root / rel).is_file() else None
    if text is None:
        if not any(p.file == rel for p in problems):
            problems.append(Problem(rel, "missing harness.yaml; create one (see `hat harness init`)"))
        return None
    doc = _parse_yaml(text, rel, problems)
    if doc is not None and not isinstance(doc.data, dict):
        problems.append(Problem(rel, "harness.yaml must be a mapping", 1))
        doc = None
    skill_dirs = sorted(p for p in (root / "skills").glob("*") if p.is_dir())
    skills = [s for s in (_load_skill(d, root, problems) for d in skill_dirs) if s]
    tool_files = sorted((root / "tools").glob("*.y*ml"))
    tools = [t for t in (_load_tool(f, root, problems) for f in tool_files) if t]
    blocks = _load_blocks(root, problems)
    if doc is None:
        return None
    for key in doc.data:
        if key not in HARNESS_KEYS:
            problems.append(
                Problem(rel, f"unknown key {key!r}; known: {', '.join(sorted(HARNESS_KEYS))}", doc.line(key))
            )
    skills = _apply_order(skills, "skills", doc, rel, problems)
    tools = _apply_order(tools, "tools", doc, rel, problems)
    hooks_file = root / "hooks.py"
    hooks_source = (_read(hooks_file, root, problems) or "") if hooks_file.is_file() else ""
    harness = Harness(
        name=str(doc.data.get("name") or root.name),
        version=str(doc.data.get("version") or "0"),
        description=str(doc.data.get("description") or ""),
        skills=tuple(skills),
        tools=tuple(tools),
        blocks=tuple(blocks),
        pipeline=tuple(_load_pipeline(doc, rel, problems)),
        hooks=tuple(_load_hooks(doc, rel, problems)),
        limits=_load_limits(doc, rel, problems),
        output=_load_output(doc, rel, problems),
        mcp_servers=_as_mapping(doc, "mcp_servers", rel, problems),
        settings=_as_mapping(doc, "settings", rel, problems),
        hooks_source=hooks_source,
        trusted_modules=_load_trusted(doc, rel, problems),
        input_block=_as_str(doc, "input_block", rel, problems),
        context_provider=_as_str(doc, "context_provider", rel, problems),
        sample_context=_as_mapping(doc, "sample_context", rel, problems),
        root=str(root.resolve()),
    )
    _cross_check(harness, doc, rel, root, problems, warnings if warnings is not None else [])
    return harness


@dataclass(frozen=True)
class HarnessCheck:
    """What validation found. ``errors`` make the harness invalid (load and reload refuse it);
    ``warnings`` do not; ``mcp_commands`` maps each MCP server to the command line it would run,
    for the operator to read; ``harness`` is the loaded harness when there are no errors."""

    errors: tuple[Problem, ...]
    warnings: tuple[Problem, ...] = ()
    mcp_commands: Mapping[str, str] = field(default_factory=dict)
    harness: Harness | None = None

    @property
    def ok(self) -> bool:
        return not self.errors and self.harness is not None

    def to_dict(self) -> dict[str, Any]:
        item = lambda p: {"file": p.file, "line": p.line, "message": p.message}  # noqa: E731
        h = self.harness
        return {
            "ok": self.ok,
            "errors": [item(p) for p in self.errors],
            "warnings": [item(p) for p in self.warnings],
            "mcp_commands": dict(self.mcp_commands),
            "harness": {"name": h.name, "version": h.version, "hash": h.content_hash()} if h and self.ok else None,
        }


def check_harness(ref: str | Path) -> HarnessCheck:
    """Validate without raising: errors, warnings and the MCP command lines. Runs no harness code."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    try:
        root = resolve_harness_path(ref)
    except HarnessError as exc:
        return HarnessCheck((Problem(str(ref), str(exc)),))
    harness = _load_parts(root, problems, warnings)
    commands = {}
    for name, raw in (harness.mcp_servers if harness else {}).items():
        _, line = check_mcp_server(str(name), raw)
        if line:
            commands[str(name)] = line
    return HarnessCheck(tuple(problems), tuple(warnings), commands, None if problems else harness)


def validate_harness(ref: str | Path) -> list[Problem]:
    """Every problem in the harness (empty list when it is valid); warnings: :func:`check_harness`."""
    return list(check_harness(ref).errors)


def load_harness(ref: str | Path) -> Harness:
    """Load and validate a harness folder (or a built-in name). Raises
    :class:`HarnessValidationError` listing every problem; never returns a partial harness."""
    root = resolve_harness_path(ref)
    problems: list[Problem] = []
    harness = _load_parts(root, problems)
    if problems or harness is None:
        raise HarnessValidationError(problems, str(root))
    return harness


def load_context_provider(harness: Harness) -> Callable[[Any], Any] | None:
    """The harness's ``context_provider`` binding imported (it runs the module's code: call this
    when the harness is put to work, as for tools), or None when the harness names none. ``hat
    run`` and ``hat serve`` apply it to every request; the Python API takes it as
    ``Agent(..., context_provider=...)``."""
    if not harness.context_provider:
        return None
    from hat.harness.tools import _import_python  # local: tools imports the runtime's types

    return _import_python(harness.context_provider, harness.root)


# -- save ------------------------------------------------------------------------------------------
def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def save_harness(harness: Harness, folder: str | Path, overwrite: bool = False) -> Path:
    """Write ``harness`` in the on-disk layout. Loading the result gives an equal harness (same hash).

    Refuses to write into a non-empty folder unless ``overwrite`` (then the folder's skills/,
    tools/ and prompts/ are replaced, so removed items do not linger). The other files of the folder
    the harness was loaded from (its own Python modules, an MCP server script, data) are copied
    along, so a written variant validates and runs like its source; symlinks, dotfiles and
    ``__pycache__`` are not copied."""
    root = Path(folder)
    if root.exists() and any(root.iterdir()) and not overwrite:
        raise HarnessError(f"{root} exists and is not empty; choose a new folder or pass overwrite=True")
    for sub in ("skills", "tools", "prompts"):
        _clear(root / sub)
    root.mkdir(parents=True, exist_ok=True)
    d = harness.to_dict()
    head = {k: d[k] for k in ("name", "version", "description", "pipeline", "limits", "output", "hooks")}
    head["mcp_servers"], head["settings"] = d["mcp_servers"], d["settings"]
    for key in ("trusted_modules", "input_block", "context_provider", "sample_context"):
        if d.get(key):
            head[key] = d[key]
    order = {}
    for key, items in (("skills", harness.skills), ("tools", harness.tools)):
        names = [i.name for i in items]
        if names != sorted(names, key=_safe_filename):
            order[key] = names
    if order:
        head["order"] = order
    (root / "harness.yaml").write_text(_dump(head), encoding="utf-8")
    for skill in harness.skills:
        front = {"name": skill.name, "description": skill.description, "metadata": dict(skill.metadata)}
        path = root / "skills" / skill.name / "SKILL.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\n{_dump(front)}---\n{skill.body}\n", encoding="utf-8")
    (root / "tools").mkdir(exist_ok=True)
    for tool in harness.tools:
        data = {k: v for k, v in tool.to_dict().items() if v is not None}
        (root / "tools" / f"{_safe_filename(tool.name)}.yaml").write_text(_dump(data), encoding="utf-8")
    (root / "prompts").mkdir(exist_ok=True)
    for block in harness.blocks:
        (root / "prompts" / f"{block.id}.md").write_text(block.template, encoding="utf-8")
    _copy_companions(harness, root)
    hooks_file = root / "hooks.py"
    if harness.hooks_source:
        hooks_file.write_text(harness.hooks_source, encoding="utf-8")
    elif hooks_file.exists():
        hooks_file.unlink()
    return root


_MANAGED = frozenset({"harness.yaml", "skills", "tools", "prompts", "hooks.py", "__pycache__"})


def _copy_companions(harness: Harness, target: Path) -> None:
    """Copy the source folder's files that the harness state does not hold (see :func:`save_harness`)."""
    import shutil

    source = Path(harness.root) if harness.root else None
    if source is None or not source.is_dir() or source.resolve() == target.resolve():
        return
    ignore = shutil.ignore_patterns("__pycache__", ".*")
    for entry in sorted(source.iterdir()):
        if entry.name in _MANAGED or entry.name.startswith(".") or entry.is_symlink():
            continue
        destination = target / entry.name
        if entry.is_dir():
            shutil.copytree(entry, destination, symlinks=False, ignore=ignore, dirs_exist_ok=True)
        elif entry.is_file():
            shutil.copy2(entry, destination)


def _safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name)


def _clear(folder: Path) -> None:
    import shutil

    if folder.exists():
        shutil.rmtree(folder)
