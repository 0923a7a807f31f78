"""Checks of a harness's code references that never import or run harness code.

Why static: ``hat harness validate`` and a server's reload look at harnesses before anyone has
decided to run them. Importing ``hooks.py`` or a tool module runs its top-level code, so a harness
rejected as invalid could still have run whatever it liked. Here every check reads files: hook
classes are found in ``hooks.py``'s syntax tree, binding targets are located with the import
system's *finders* (never its loaders) and their attribute is looked up in the module's syntax
tree. Code runs only when a harness is put to work (:class:`~hat.harness.runtime.Agent` builds its
hooks and tool registry).

The binding policy (tools ``python:module:function`` and hooks ``python:module:Class``):

- a target may live in the ``hat`` package, in a module that resolves inside the harness folder,
  or in a module the harness lists under ``trusted_modules:`` in ``harness.yaml`` (a name trusts
  that module and its submodules);
- a top-level module name that is a file (``<name>.py``) or a package (``<name>/__init__.py``) in
  the harness folder resolves *there* first, without ``PYTHONPATH`` (:func:`local_module_path`):
  the folder is what the harness ships with, and a module of the same name elsewhere on
  ``sys.path`` must not stand in for it. At run time such a module is loaded from its file under a
  name private to its folder (:func:`hat.harness.tools.import_harness_module`), so two harness
  folders with a ``tools_impl.py`` each do not share one module;
- the standard library is always refused, listed or not: ``os:system``, ``subprocess:run``,
  ``builtins:eval`` and their like would let a harness file run any command; a re-export of such a
  function (``from os import system`` in an allowed module) is refused too; private names
  (``_name``) are refused.

This is not a sandbox against the harness's author: a harness is code (``hooks.py`` runs when it
is served), and ``trusted_modules`` is the author's declaration. It makes validation safe to run
on any folder, and it turns the obvious ways a careless edit reaches a shell into validation
errors. Who may change a served harness is the server's business (admin token, harness roots).

MCP stdio servers: a shell as the command (``sh -c …``, ``bash``, ``cmd``, ``powershell``; also
behind ``env``/``nice``/``timeout``) or an interpreter running inline code (``python -c``,
``node -e``, ``perl -e``) is refused; every accepted command line is reported to the operator.

Tool references (:func:`tool_references`): a skill or rendered prompt block that names a tool the
harness does not define. Naming a tool by the old name of a renamed one (its ``function_id``) is an
error: the model would be told to call something that does not exist, and the fix is known. Any
other unknown tool-like name (a backticked ``snake_case`` word or a ``snake_case(`` call) is a
warning, as prose can contain such words legitimately.
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hat.harness.state import Harness

__all__ = [
    "Reference",
    "check_hooks_class",
    "check_mcp_server",
    "check_python_target",
    "escaping_paths",
    "find_module_spec",
    "is_denied_module",
    "local_module_path",
    "tool_references",
]

_STDLIB = frozenset(sys.stdlib_module_names) | {"__main__", "__future__"}
#: Modules named in the refusal message: the ones that reach a process, a shell or arbitrary code.
_EXEC_SURFACES = ("os", "subprocess", "builtins", "sys", "shutil", "importlib", "ctypes", "pty", "runpy")


def is_denied_module(module: str) -> bool:
    """True for the standard library (checked by the top-level package name)."""
    return module.split(".")[0] in _STDLIB


def _denied_message(what: str, module: str) -> str:
    return (
        f"{what} points into the standard library ({module!r}); bindings may not reach "
        f"{', '.join(_EXEC_SURFACES)} or any other stdlib module. Bind to a function in the hat package, "
        "in a module listed under trusted_modules in harness.yaml, or in the harness folder"
    )


# -- locating modules without importing them ---------------------------------------------------
def local_module_path(name: str, root: str | os.PathLike[str] | None) -> Path | None:
    """The file of ``name``'s top-level module in the harness folder ``root``: ``<root>/<top>/__init__.py``
    (a package, which wins as it does on ``sys.path``) or ``<root>/<top>.py``; None when the folder
    has neither (or ``root`` is None). Only looks at files; nothing is imported."""
    top = name.split(".")[0]
    if not root or not top.isidentifier():
        return None
    base = Path(root)
    for path in (base / top / "__init__.py", base / f"{top}.py"):
        if path.is_file():
            return path
    return None


def _local_spec(top: str, path: Path) -> importlib.machinery.ModuleSpec | None:
    """A spec for a module of the harness folder: built from the file's location, nothing runs."""
    package = [str(path.parent)] if path.name == "__init__.py" else None
    return importlib.util.spec_from_file_location(top, path, submodule_search_locations=package)


def find_module_spec(name: str, root: str | os.PathLike[str] | None = None) -> importlib.machinery.ModuleSpec | None:
    """The spec of module ``name``, found by the finders alone: unlike ``importlib.util.find_spec``
    on a dotted name, no parent package is imported (its ``__init__`` would run). With ``root``
    (the harness folder), a top-level module in that folder wins over ``sys.path``
    (:func:`local_module_path`)."""
    parts = name.split(".")
    local = local_module_path(name, root)
    spec = _local_spec(parts[0], local) if local is not None else None
    for i in range(1 if local is not None else 0, len(parts)):
        sub = ".".join(parts[: i + 1])
        try:
            if local is None and sub in sys.modules:  # a local module's name may mean another module here
                spec = getattr(sys.modules[sub], "__spec__", None)
            elif i == 0:
                spec = importlib.util.find_spec(sub)  # a top-level name: finders only, nothing runs
            else:
                paths = spec.submodule_search_locations if spec is not None else None
                spec = importlib.machinery.PathFinder.find_spec(sub, list(paths)) if paths else None
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
    return spec


def _inside(path: str | None, root: str | None) -> bool:
    if not path or not root:
        return False
    try:
        return Path(path).resolve().is_relative_to(Path(root).resolve())
    except OSError:
        return False


def _trusted(module: str, trusted: Sequence[str]) -> bool:
    return any(module == t or module.startswith(t + ".") for t in trusted)


# -- a module's top-level names, from its syntax tree ------------------------------------------
@dataclass
class _Names:
    defs: dict[str, str] = field(default_factory=dict)  # name -> "def" | "class" | "value"
    imports: dict[str, str] = field(default_factory=dict)  # name -> module it comes from
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    star: list[str] = field(default_factory=list)


def _collect(body: Iterable[ast.stmt], names: _Names) -> None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.defs[node.name] = "def"
        elif isinstance(node, ast.ClassDef):
            names.defs[node.name] = "class"
            names.classes[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names.defs[leaf.id] = "value"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names.imports[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom):
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    names.star.append(source)
                else:
                    names.imports[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for part in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, part, []) or []:
                    _collect(child.body if isinstance(child, ast.ExceptHandler) else [child], names)


def _names_of(source: str, filename: str) -> _Names:
    """Raises SyntaxError for a file that does not parse."""
    names = _Names()
    _collect(ast.parse(source, filename=filename).body, names)
    return names


@functools.lru_cache(maxsize=128)
def _names_of_file(path: str, mtime_ns: int) -> _Names | None:
    try:
        return _names_of(Path(path).read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def _module_names(spec: importlib.machinery.ModuleSpec) -> _Names | None:
    origin = spec.origin
    if not origin or not origin.endswith(".py") or not os.path.isfile(origin):
        return None
    return _names_of_file(origin, os.stat(origin).st_mtime_ns)


def _is_hook_class(name: str, classes: Mapping[str, ast.ClassDef], seen: frozenset[str] = frozenset()) -> bool:
    """Subclasses ``Hook`` by name: a base named ``Hook``/``…Hook``, or a class of the same module
    that does. The runtime checks ``issubclass`` again when it builds the hook."""
    for base in classes[name].bases:
        base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        if base_name == "Hook":
            return True
        if base_name in classes:
            if base_name not in seen and _is_hook_class(base_name, classes, seen | {name}):
                return True
        elif base_name.endswith("Hook"):  # imported, e.g. a built-in hook class
            return True
    return False


def _check_attribute(names: _Names, module: str, attr: str, what: str, want_class: bool) -> str | None:
    if attr in names.imports:
        source = names.imports[attr]
        if is_denied_module(source.lstrip(".")) and not source.startswith("."):
            return _denied_message(what, source.rsplit(".", 1)[0]) + f" (module {module!r} re-exports it)"
        return None  # a re-export from an allowed module: the runtime checks what it really is
    kind = names.defs.get(attr)
    if kind is None:
        denied = [s for s in names.star if is_denied_module(s) and not s.startswith(".")]
        if denied:
            return _denied_message(what, denied[0]) + f" (module {module!r} star-imports it)"
        if names.star or "__getattr__" in names.defs:
            return None  # the name may come from a star import or a module __getattr__
        return f"{what} cannot be imported: module {module!r} has no attribute {attr!r}"
    if want_class and kind != "class":
        return f"{what}: {attr!r} in {module!r} is not a class"
    if want_class and not _is_hook_class(attr, names.classes):
        return f"{what}: class {attr!r} in {module!r} does not subclass hat.harness.hooks.Hook"
    return None


def check_python_target(
    target: str, *, what: str, root: str | None, trusted: Sequence[str] = (), want_class: bool = False
) -> str | None:
    """The problem with ``module:attr`` (a ``python:`` binding or hook without its prefix), or None.

    ``what`` names the reference in messages (``binding 'python:x:y'``)."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        return f"{what} must look like python:package.module:{'Class' if want_class else 'function'}"
    if is_denied_module(module):
        return _denied_message(what, module)
    if attr.startswith("_"):
        return f"{what} names the private attribute {attr!r}; bind to a public function or class"
    spec = find_module_spec(module, root)
    if spec is None:
        return f"{what} cannot be imported: no module named {module!r}"
    if not (module.split(".")[0] == "hat" or _trusted(module, trusted) or _inside(spec.origin, root)):
        return (
            f"{what}: module {module!r} is not trusted; bind to the hat package or a module in the harness "
            f"folder, or list {module.split('.')[0]!r} under trusted_modules in harness.yaml"
        )
    names = _module_names(spec)
    if names is None:  # no Python source to read (an extension or namespace module)
        return None
    return _check_attribute(names, module, attr, what, want_class)


def check_hooks_class(source: str, class_name: str) -> str | None:
    """The problem with ``hooks:<class_name>`` in the harness's ``hooks.py`` source, or None."""
    if not source:
        return "the harness has no hooks.py"
    try:
        names = _names_of(source, "hooks.py")
    except SyntaxError as exc:
        return f"hooks.py line {exc.lineno}: {exc.msg}"
    if class_name not in names.classes:
        known = ", ".join(n for n in names.classes if _is_hook_class(n, names.classes)) or "none"
        return f"hooks.py defines no class {class_name!r} (hook classes there: {known})"
    if not _is_hook_class(class_name, names.classes):
        return f"class {class_name!r} in hooks.py does not subclass hat.harness.hooks.Hook"
    return None


# -- MCP server commands ------------------------------------------------------------------------
_SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh", "fish", "ash", "busybox", "cmd", "powershell", "pwsh"}
)
_WRAPPERS = frozenset({"env", "nice", "nohup", "timeout", "stdbuf", "setsid", "exec", "command", "xargs", "sudo"})
_INLINE_FLAGS = {"node": ("-e", "--eval", "-p", "--print"), "perl": ("-e", "-E"), "ruby": ("-e",), "php": ("-r",)}
_PYTHON = re.compile(r"python[\d.]*w?")
_INLINE_FLAGS |= {"nodejs": _INLINE_FLAGS["node"], "bun": ("-e", "--eval"), "deno": ("eval",), "lua": ("-e",)}


def _program(token: str) -> str:
    base = os.path.basename(token).lower()
    return base[:-4] if base.endswith(".exe") else base


def _is_interpreter(token: str) -> bool:
    program = _program(token)
    return program in _SHELLS or program in _INLINE_FLAGS or bool(_PYTHON.fullmatch(program))


def _unwrap(tokens: list[str]) -> list[str]:
    """Skip wrappers (``env FOO=1 sh -c``, ``timeout 5s bash``) to the shell or interpreter they
    start, if any: wrapper options vary too much to parse, so look for one anywhere after it."""
    if not tokens or _program(tokens[0]) not in _WRAPPERS:
        return tokens
    for i, token in enumerate(tokens[1:], 1):
        if _is_interpreter(token):
            return tokens[i:]
    return tokens[-1:]


def _python_inline(args: Sequence[str]) -> bool:
    """``python -c code`` (or ``-Ic``), looking only at the interpreter's own options."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-W", "-X", "--check-hash-based-pycs"):
            skip = True  # the next token is this option's value
        elif arg.startswith(("-W", "-X", "--")):
            continue  # a value attached (-Wignore, -Xdev) or a long option
        elif arg == "-m" or not arg.startswith("-"):
            return False  # a module or a script: what follows is its own arguments
        elif "c" in arg[1:]:
            return True
    return False


def _command_problem(tokens: list[str]) -> str | None:
    tokens = _unwrap(tokens)
    if not tokens:
        return "runs no program"
    program, args = _program(tokens[0]), tokens[1:]
    if program in _SHELLS:
        return f"runs the shell {program!r}; start the server program itself (e.g. python -m package.server)"
    if _PYTHON.fullmatch(program) or tokens[0] == sys.executable:
        return "runs inline Python code (-c); put the server in a module or script" if _python_inline(args) else None
    flags = _INLINE_FLAGS.get(program, ())
    for arg in args:
        if not arg.startswith("-") and arg not in flags:
            break
        if arg in flags or any(arg.startswith(f + "=") for f in flags if f.startswith("--")):
            return f"runs inline code ({program} {arg}); put the server in a file"
    return None


def check_mcp_server(name: str, raw: Any) -> tuple[str | None, str | None]:
    """``(problem, command line)`` for one ``mcp_servers`` entry; nothing is started."""
    from hat.errors import ToolBindingError
    from hat.harness.mcp_client import MCPServerSpec

    try:
        spec = MCPServerSpec.from_mapping(name, raw)
    except ToolBindingError as exc:
        return str(exc), None
    problem = _command_problem([spec.command, *spec.args])
    if problem:
        return f"mcp_servers.{name}: the command `{spec.command_line}` {problem}", spec.command_line
    return None, spec.command_line


# -- tool references in skills and prompt blocks ----------------------------------------------
_BACKTICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_.\-]*)(?:\([^`\n]*\))?`")
_CALLED = re.compile(r"(?<![\w.`\-])([A-Za-z_][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+)\(")


@dataclass(frozen=True)
class Reference:
    """A name in ``file`` that the harness does not define; ``error`` when it is a renamed one."""

    file: str
    name: str
    message: str
    error: bool
    line: int | None = None


def _known_names(harness: Harness, context_keys: Iterable[str]) -> set[str]:
    known = {t.name for t in harness.tools} | {s.name for s in harness.skills}
    known |= {harness.output.skill_tool, harness.output.reply_field, *context_keys}
    known |= set(harness.limits.to_dict()) | set(harness.output.to_dict()) | set(harness.settings)
    known |= {h.name for h in harness.hooks}
    for tool in harness.tools:
        known |= set((tool.parameters.get("properties") or {}).keys())
        param_map = tool.metadata.get("param_map") or {}
        known |= {str(k) for k in param_map} | {str(v) for v in param_map.values()}
    known |= set((harness.output.reply_schema.get("properties") or {}).keys())
    return known


def _renamed(harness: Harness, known: set[str]) -> dict[str, tuple[str, str]]:
    """Old name (``function_id``) -> (kind, current name) for tools and skills named differently."""
    old: dict[str, tuple[str, str]] = {}
    for kind, items in (("tool", harness.tools), ("skill", harness.skills)):
        for item in items:
            if item.function_id != item.name and item.function_id not in known:
                old[item.function_id] = (kind, item.name)
    return old


def _line_of(name: str, source: str) -> int | None:
    index = source.find(name)
    return source.count("\n", 0, index) + 1 if index >= 0 else None


def tool_references(
    harness: Harness, texts: Iterable[tuple[str, str, str]], context_keys: Iterable[str] = ()
) -> list[Reference]:
    """Names in ``texts`` (``(file, text to scan, source to find line numbers in)``) that look like
    tool or skill references but are not defined by ``harness`` (module docstring)."""
    known = _known_names(harness, context_keys)
    renamed = _renamed(harness, known)
    found: list[Reference] = []
    for file, text, source in texts:
        names = dict.fromkeys([*_BACKTICKED.findall(text), *_CALLED.findall(text)])
        for name in names:
            if name in known or ("_" not in name and name not in renamed):
                continue
            line = _line_of(name, source)
            if name in renamed:
                kind, current = renamed[name]
                message = (
                    f"refers to the {kind} {name!r}, which this harness names {current!r}; "
                    f"the model cannot call {name!r}. Rename it here too"
                )
                found.append(Reference(file, name, message, True, line))
            else:
                message = f"refers to {name!r}, which is not a tool, skill or parameter of this harness"
                found.append(Reference(file, name, message, False, line))
    return found


# -- files that leave the harness folder ---------------------------------------------------------
def _resolves_inside(path: Path, base: Path) -> bool:
    try:
        return path.resolve().is_relative_to(base)
    except (OSError, RuntimeError):  # a symlink loop
        return False


def escaping_paths(root: Path) -> list[str]:
    """Paths under ``root`` (relative, sorted) that resolve outside it: symlinks pointing out."""
    base = root.resolve()
    out = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        for entry in [*dirs, *files]:
            path = Path(folder) / entry
            if path.is_symlink() and not _resolves_inside(path, base):
                out.append(str(path.relative_to(root)))
    return sorted(out)
