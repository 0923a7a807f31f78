"""Python modules that ship inside a harness folder (issue 13): found there without ``PYTHONPATH``.

A binding's top-level module that is a file or package in the harness folder resolves there first:
validation locates it statically (nothing runs), and putting the harness to work loads it by file
location under a name private to the folder, so two folders' ``tools_impl.py`` never collide. The
binding policy still holds: the standard library is refused even under a local file's name.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import write_mini_harness  # tests/ is on sys.path (see toolbox.py)
from hat.errors import HarnessError, ToolBindingError
from hat.harness import Agent, Request, load_context_provider, load_harness, validate_harness
from hat.harness.static_check import find_module_spec, local_module_path
from hat.harness.tools import ToolRegistry, _import_python, _local_module_key, import_harness_module
from hat.models.scripted import ScriptedModel


def _bind(root: Path, binding: str, name: str = "greet") -> None:
    (root / "tools" / f"{name}.yaml").write_text(
        yaml.safe_dump(
            {
                "name": name,
                "description": "Greets someone.",
                "parameters": {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]},
                "binding": binding,
            }
        )
    )


def _harness(tmp_path: Path, folder: str, source: str, binding: str = "python:tools_impl:greet") -> Path:
    root = write_mini_harness(tmp_path / folder)
    (root / "tools_impl.py").write_text(textwrap.dedent(source))
    _bind(root, binding)
    return root


def _greet(root: Path, who: str = "Ana") -> object:
    registry = ToolRegistry(load_harness(root))
    try:
        result = registry.call("greet", {"who": who})
    finally:
        registry.close()
    assert result.ok, result.error
    return result.result


def test_two_folders_with_a_module_of_the_same_name_do_not_collide(tmp_path):
    hello = _harness(tmp_path, "a", "def greet(who: str) -> str:\n    return 'hello ' + who\n")
    howdy = _harness(tmp_path, "b", "def greet(who: str) -> str:\n    return 'howdy ' + who\n")
    assert validate_harness(hello) == [] and validate_harness(howdy) == []
    assert _greet(hello) == "hello Ana"
    assert _greet(howdy) == "howdy Ana"  # not the first folder's module, cached under the same name
    assert _greet(hello) == "hello Ana"
    assert "tools_impl" not in sys.modules  # never registered under its plain name
    a, b = (import_harness_module("tools_impl", root) for root in (hello, howdy))
    assert a is not b and a.__file__ == str(hello / "tools_impl.py") and b.__file__ == str(howdy / "tools_impl.py")
    assert import_harness_module("tools_impl", hello) is a  # loaded once per folder


def test_validation_finds_the_local_module_without_running_it(tmp_path):
    marker = tmp_path / "ran.txt"
    source = f"""\
        from pathlib import Path
        Path({str(marker)!r}).write_text("imported")  # runs at import time
        def greet(who: str) -> str:
            return "hi " + who
        """
    root = _harness(tmp_path, "mini", source)
    assert str(root) not in sys.path and str(root.resolve()) not in sys.path
    assert validate_harness(root) == []
    load_harness(root)
    assert not marker.exists()  # located and read, never imported
    _bind(root, "python:tools_impl:no_such_function", "missing")
    problems = [str(p) for p in validate_harness(root)]
    assert len(problems) == 1 and "has no attribute 'no_such_function'" in problems[0], problems
    assert not marker.exists()
    (root / "tools" / "missing.yaml").unlink()
    assert _greet(root) == "hi Ana" and marker.read_text() == "imported"  # put to work: now it runs


def test_the_local_module_wins_over_one_of_the_same_name_on_sys_path(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "tools_impl.py").write_text("def greet(who: str) -> str:\n    return 'wrong module'\n")
    monkeypatch.syspath_prepend(str(elsewhere))
    root = _harness(tmp_path, "mini", "def greet(who: str) -> str:\n    return 'local ' + who\n")
    spec = find_module_spec("tools_impl", root)
    assert spec is not None and spec.origin == str(root / "tools_impl.py")
    assert find_module_spec("tools_impl").origin == str(elsewhere / "tools_impl.py")  # without a root: sys.path
    assert validate_harness(root) == []
    assert _greet(root) == "local Ana"


def test_a_local_package_with_submodules_and_relative_imports(tmp_path):
    root = write_mini_harness(tmp_path / "mini")
    (root / "desk").mkdir()
    (root / "desk" / "__init__.py").write_text("PREFIX = 'pkg'\n")
    (root / "desk" / "greeting.py").write_text(
        "from . import PREFIX\n\ndef greet(who: str) -> str:\n    return f'{PREFIX} {who}'\n"
    )
    (root / "desk.py").write_text("raise RuntimeError('a package wins over a module of the same name')\n")
    _bind(root, "python:desk.greeting:greet")
    assert local_module_path("desk.greeting", root) == root / "desk" / "__init__.py"
    assert validate_harness(root) == []
    assert _greet(root) == "pkg Ana"


def test_an_edited_module_is_loaded_afresh(tmp_path):
    """A reloaded harness (hat serve) gets the edited file, not the module cached for the old one."""
    root = _harness(tmp_path, "mini", "def greet(who: str) -> str:\n    return 'v1'\n")
    assert _greet(root) == "v1"
    (root / "tools_impl.py").write_text("def greet(who: str) -> str:\n    return 'v2'\n")
    assert _greet(root) == "v2"


def test_the_binding_policy_still_holds_for_local_files(tmp_path):
    root = _harness(tmp_path, "mini", "def greet(who: str) -> str:\n    return who\n")
    (root / "json.py").write_text("def loads(s):\n    return s\n")  # a stdlib name, shipped in the folder
    _bind(root, "python:json:loads", "parse")
    problems = [str(p) for p in validate_harness(root)]
    assert len(problems) == 1 and "standard library" in problems[0], problems
    with pytest.raises(ToolBindingError, match="standard library"):
        _import_python("python:json:loads", root)
    (root / "tools" / "parse.yaml").unlink()
    _bind(root, "python:not_here_anywhere:greet", "other")  # neither in the folder nor importable
    problems = [str(p) for p in validate_harness(root)]
    assert len(problems) == 1 and "no module named 'not_here_anywhere'" in problems[0], problems


def test_a_local_module_that_fails_to_load_names_its_file(tmp_path):
    root = _harness(
        tmp_path, "mini", "raise ValueError('no database configured')\ndef greet(who: str) -> str:\n    return who\n"
    )
    assert validate_harness(root) == []  # statically fine: nothing ran
    with pytest.raises(ToolBindingError, match=r"tools_impl\.py failed to load: ValueError: no database configured"):
        ToolRegistry(load_harness(root))
    assert _local_module_key("tools_impl", root / "tools_impl.py") not in sys.modules  # a failed load leaves nothing


def test_context_provider_and_python_hook_from_the_folder(tmp_path):
    root = _harness(
        tmp_path,
        "mini",
        """\
        from dataclasses import replace

        from hat.harness import Hook

        def greet(who: str) -> str:
            return who

        def add_shop(request):
            return replace(request, context={**request.context, "shop": "Corner Shop"})

        class Quiet(Hook):
            name = "quiet"
        """,
    )
    text = (root / "harness.yaml").read_text()
    text = text.replace(
        "hooks:\n", "context_provider: python:tools_impl:add_shop\nhooks:\n  - name: python:tools_impl:Quiet\n"
    )
    (root / "harness.yaml").write_text(text)
    assert validate_harness(root) == []
    harness = load_harness(root)
    provider = load_context_provider(harness)
    assert provider is not None and provider(Request.of("hi")).context == {"shop": "Corner Shop"}
    agent = Agent(harness, ScriptedModel(['<reply>{"reply": "hi"}</reply>']), context_provider=provider)
    try:
        assert "quiet" in {h.name for h in agent.hooks}
        trace = agent.respond(Request.of("hi")).trace
    finally:
        agent.close()
    assert trace.status == "ok" and trace.context["request"]["shop"] == "Corner Shop"


def test_a_module_outside_the_folder_still_needs_trusted_modules(tmp_path, monkeypatch):
    root = _harness(tmp_path, "mini", "def greet(who: str) -> str:\n    return who\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "helpers.py").write_text("def shout(who: str) -> str:\n    return who.upper()\n")
    monkeypatch.syspath_prepend(str(other))
    _bind(root, "python:helpers:shout", "shout")
    problems = [str(p) for p in validate_harness(root)]
    assert len(problems) == 1 and "module 'helpers' is not trusted" in problems[0], problems
    with pytest.raises(HarnessError):
        load_harness(root)
