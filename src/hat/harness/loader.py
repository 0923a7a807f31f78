"""Load, validate and save a harness folder.

Layout (see DESIGN.md)::

    my-harness/
      harness.yaml            name, version, pipeline, limits, output, hooks, mcp_servers, settings
      skills/<name>/SKILL.md  Agent Skills: YAML front matter (name, description, metadata) + rules
      tools/<name>.yaml       name, description, JSON-schema parameters, binding, timeout_s, metadata
      prompts/<block>.md      Jinja prompt block templates
      hooks.py                optional project hooks (``hooks:ClassName`` in harness.yaml)

Validation collects *every* problem (file and, where known, line) before raising one
:class:`~hat.errors.HarnessValidationError`; nothing is ever half-loaded. Line numbers come from
PyYAML's node marks, so ``hat harness validate`` points at the offending entry, not just the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from hat.errors import HarnessError, HarnessValidationError, Problem
from hat.harness.state import Harness, HookSpec, Limits, OutputFormat, PromptBlock, Skill, ToolSpec

__all__ = ["BUILTIN_HARNESSES", "load_harness", "resolve_harness_path", "save_harness", "validate_harness"]

SKILL_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
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
}
BUILTIN_HARNESSES = ("livestream",)


def resolve_harness_path(ref: str | Path) -> Path:
    """A folder path, or the name of a harness shipped in the package (``livestream``)."""
    path = Path(ref)
    if path.is_dir():
        return path
    if str(ref) in BUILTIN_HARNESSES:
        return Path(__file__).resolve().parent.parent / "harnesses" / str(ref)
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


def _read(path: Path, root: Path, problems: list[Problem]) -> str | None:
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
    if len(problems) > before:
        return None
    return ToolSpec(
        name=data["name"],
        description=str(data["description"]).strip(),
        parameters=params,
        binding=data["binding"],
        timeout_s=float(timeout) if timeout is not None else None,
        metadata=data.get("metadata") or {},
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


def _load_pipeline(doc: _Doc, rel: str, problems: list[Problem]) -> list[str]:
    raw = doc.data.get("pipeline")
    if not isinstance(raw, list) or not all(isinstance(b, str) for b in raw) or not raw:
        problems.append(Problem(rel, "'pipeline' must be a non-empty list of prompt block ids", doc.line("pipeline")))
        return []
    return list(raw)


def _cross_check(harness: Harness, doc: _Doc, rel: str, root: Path, problems: list[Problem]) -> None:
    """Checks that need more than one file: names unique, references resolve, bindings import."""
    from hat.harness.hooks import check_hook_spec  # local: hooks imports the runtime's types
    from hat.harness.tools import check_binding

    block_ids = {b.id for b in harness.blocks}
    for i, block_id in enumerate(harness.pipeline):
        if block_id not in block_ids:
            problems.append(
                Problem(
                    rel,
                    f"pipeline block {block_id!r} does not exist (no prompts/{block_id}.md)",
                    doc.line("pipeline", i),
                )
            )
    seen: dict[str, int] = {}
    for tool in harness.tools:
        seen[tool.name] = seen.get(tool.name, 0) + 1
        error = check_binding(tool.binding, harness.mcp_servers)
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
    for i, spec in enumerate(harness.hooks):
        error = check_hook_spec(spec, harness)
        if error:
            problems.append(Problem(rel, error, doc.line("hooks", i)))


def _tool_file(root: Path, name: str) -> str:
    for file in sorted((root / "tools").glob("*.y*ml")):
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


def _load_parts(root: Path, problems: list[Problem]) -> Harness | None:
    rel = "harness.yaml"
    text = _read(root / rel, root, problems) if (root / rel).is_file() else None
    if text is None:
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
        hooks_source=hooks_file.read_text(encoding="utf-8") if hooks_file.is_file() else "",
        root=str(root.resolve()),
    )
    _cross_check(harness, doc, rel, root, problems)
    return harness


def validate_harness(ref: str | Path) -> list[Problem]:
    """Every problem in the harness (empty list when it is valid)."""
    problems: list[Problem] = []
    try:
        root = resolve_harness_path(ref)
    except HarnessError as exc:
        return [Problem(str(ref), str(exc))]
    _load_parts(root, problems)
    return problems


def load_harness(ref: str | Path) -> Harness:
    """Load and validate a harness folder (or a built-in name). Raises
    :class:`HarnessValidationError` listing every problem; never returns a partial harness."""
    root = resolve_harness_path(ref)
    problems: list[Problem] = []
    harness = _load_parts(root, problems)
    if problems or harness is None:
        raise HarnessValidationError(problems, str(root))
    return harness


# -- save ------------------------------------------------------------------------------------------
def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def save_harness(harness: Harness, folder: str | Path, overwrite: bool = False) -> Path:
    """Write ``harness`` in the on-disk layout. Loading the result gives an equal harness (same hash).

    Refuses to write into a non-empty folder unless ``overwrite`` (then the folder's skills/,
    tools/ and prompts/ are replaced, so removed items do not linger)."""
    root = Path(folder)
    if root.exists() and any(root.iterdir()) and not overwrite:
        raise HarnessError(f"{root} exists and is not empty; choose a new folder or pass overwrite=True")
    for sub in ("skills", "tools", "prompts"):
        _clear(root / sub)
    root.mkdir(parents=True, exist_ok=True)
    d = harness.to_dict()
    head = {k: d[k] for k in ("name", "version", "description", "pipeline", "limits", "output", "hooks")}
    head["mcp_servers"], head["settings"] = d["mcp_servers"], d["settings"]
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
    hooks_file = root / "hooks.py"
    if harness.hooks_source:
        hooks_file.write_text(harness.hooks_source, encoding="utf-8")
    elif hooks_file.exists():
        hooks_file.unlink()
    return root


def _safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name)


def _clear(folder: Path) -> None:
    import shutil

    if folder.exists():
        shutil.rmtree(folder)
