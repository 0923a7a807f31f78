"""A harness is code, but validating one must not run it: static hook/binding checks, the binding
and MCP command policies, dry-rendered prompt blocks, no symlinks out of the folder, a bounded
immutable Jinja sandbox, and tool names in skills that match the tools (issue 11)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hat.cli.main import app
from hat.errors import HarnessError, HarnessValidationError, ToolBindingError
from hat.harness import Agent, load_harness, validate_harness
from hat.harness.loader import check_harness, resolve_harness_path
from hat.harness.pipeline import MAX_TEMPLATE_CHARS, render_prompt, template_context
from hat.harness.state import Harness, PromptBlock
from hat.harness.tools import _import_python
from hat.models.scripted import ScriptedModel

runner = CliRunner()


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["harness", *args])
    return result.exit_code, result.output


def _edit_yaml(root: Path, old: str, new: str) -> None:
    text = (root / "harness.yaml").read_text()
    assert old in text
    (root / "harness.yaml").write_text(text.replace(old, new))


def _add_hook(root: Path, *names: str) -> None:
    _edit_yaml(
        root, "  - name: reply_length\n", "  - name: reply_length\n" + "".join(f"  - name: {n}\n" for n in names)
    )


def _errors(root: Path) -> list[str]:
    return [str(p) for p in validate_harness(root)]


@pytest.fixture
def livestream_dir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(resolve_harness_path("livestream"), tmp_path / "live"))


# -- 1. validation never executes harness code ------------------------------------------------------
def _marker_hooks(root: Path, marker: Path) -> None:
    (root / "hooks.py").write_text(
        textwrap.dedent(f"""\
        from pathlib import Path
        Path({str(marker)!r}).write_text("imported")  # runs at import time
        from hat.harness import Hook

        class Shout(Hook):
            name = "shout"
        """)
    )
    _add_hook(root, "hooks:Shout")


def test_validate_and_load_never_import_hooks_py_serving_does(mini_harness_dir, tmp_path):
    marker = tmp_path / "imported.txt"
    _marker_hooks(mini_harness_dir, marker)
    assert validate_harness(mini_harness_dir) == []
    assert check_harness(mini_harness_dir).ok
    code, output = _cli("validate", str(mini_harness_dir))
    assert code == 0, output
    harness = load_harness(mini_harness_dir)
    assert not marker.exists()  # validated, CLI-validated and loaded: nothing ran
    Agent(harness, ScriptedModel(['<reply>{"reply": "hi"}</reply>']))  # put to work: now it runs
    assert marker.read_text() == "imported"


def test_invalid_harness_rejected_without_running_hooks_py(mini_harness_dir, tmp_path):
    """A reload validates first (serve.state uses validate_harness): a rejected one ran nothing."""
    marker = tmp_path / "imported.txt"
    _marker_hooks(mini_harness_dir, marker)
    (mini_harness_dir / "prompts" / "broken.md").write_text("{{ oops ")
    assert any("broken.md" in p for p in _errors(mini_harness_dir))
    with pytest.raises(HarnessValidationError):
        load_harness(mini_harness_dir)
    assert _cli("validate", str(mini_harness_dir))[0] == 2
    assert not marker.exists()


@pytest.mark.parametrize(
    ("source", "hook", "message"),
    [
        ("from hat.harness import Hook\nclass A(Hook):\n    pass\n", "hooks:Missing", "defines no class 'Missing'"),
        ("class Plain:\n    pass\n", "hooks:Plain", "does not subclass"),
        ("from hat.harness import Hook\nclass A(Hook)\n    pass\n", "hooks:A", "hooks.py line 2"),
    ],
)
def test_hook_classes_are_checked_statically(mini_harness_dir, source, hook, message):
    (mini_harness_dir / "hooks.py").write_text(source)
    _add_hook(mini_harness_dir, hook)
    problems = _errors(mini_harness_dir)
    assert len(problems) == 1 and hook in problems[0] and message in problems[0], problems


def test_hook_subclass_of_a_project_hook_and_python_hooks_pass(mini_harness_dir):
    (mini_harness_dir / "hooks.py").write_text(
        "from hat.harness.hooks import ReplyLengthHook\nclass A(ReplyLengthHook):\n    pass\nclass B(A):\n    pass\n"
    )
    _add_hook(mini_harness_dir, "hooks:B", "python:hat.harness.hooks:ReplyLengthHook")
    assert _errors(mini_harness_dir) == []


# -- 2. binding and MCP command policy -------------------------------------------------------------
def _tool(root: Path, binding: str, name: str = "danger") -> None:
    (root / "tools" / f"{name}.yaml").write_text(
        f"name: {name}\ndescription: d\nparameters: {{type: object}}\nbinding: {binding}\n"
    )


@pytest.mark.parametrize(
    "binding", ["python:os:system", "python:subprocess:run", "python:builtins:eval", "python:importlib:import_module"]
)
def test_stdlib_bindings_are_refused(mini_harness_dir, binding):
    _tool(mini_harness_dir, binding)
    problems = _errors(mini_harness_dir)
    assert any("tools/danger.yaml" in p and "standard library" in p for p in problems), problems
    with pytest.raises(ToolBindingError, match="standard library"):
        _import_python(binding)  # refused when an agent is built too


def test_stdlib_hook_and_trusted_stdlib_are_refused(mini_harness_dir):
    _add_hook(mini_harness_dir, "python:os:system")
    _edit_yaml(mini_harness_dir, "trusted_modules: [toolbox]", "trusted_modules: [toolbox, subprocess]")
    problems = _errors(mini_harness_dir)
    assert any("hook 'python:os:system'" in p and "standard library" in p for p in problems), problems
    assert any("trusted_modules: 'subprocess'" in p for p in problems), problems


def test_reexported_stdlib_function_is_refused(mini_harness_dir, tmp_path, monkeypatch):
    (tmp_path / "sneaky_tools.py").write_text("from os import system as run_it\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _edit_yaml(mini_harness_dir, "trusted_modules: [toolbox]", "trusted_modules: [toolbox, sneaky_tools]")
    _tool(mini_harness_dir, "python:sneaky_tools:run_it")
    problems = _errors(mini_harness_dir)
    assert any("re-exports" in p for p in problems), problems
    assert "sneaky_tools" not in sys.modules  # located and read, never imported
    with pytest.raises(ToolBindingError, match="standard-library function"):
        _import_python("python:sneaky_tools:run_it")


def test_modules_outside_hat_need_trusted_modules(mini_harness_dir):
    _edit_yaml(mini_harness_dir, "trusted_modules: [toolbox]", "")
    problems = _errors(mini_harness_dir)
    assert len(problems) == 4 and all("list 'toolbox' under trusted_modules" in p for p in problems), problems


def test_missing_attribute_found_without_import(mini_harness_dir):
    _tool(mini_harness_dir, "python:hat.env.livestream_tools:no_such_tool")
    problems = _errors(mini_harness_dir)
    assert any("has no attribute 'no_such_tool'" in p for p in problems), problems


SHELL_COMMANDS = {
    "sh -c": {"command": "sh", "args": ["-c", "echo hi"]},
    "bash path": {"command": "/bin/bash", "args": ["server.sh"]},
    "zsh -c": {"command": "zsh", "args": ["-c", "id"]},
    "cmd /c": {"command": "cmd.exe", "args": ["/c", "dir"]},
    "powershell": {"command": "powershell", "args": ["-Command", "ls"]},
    "env bash -c": {"command": "env", "args": ["FOO=1", "bash", "-c", "id"]},
    "python -c": {"command": "python", "args": ["-c", "import os"]},
}


@pytest.mark.parametrize("case", sorted(SHELL_COMMANDS))
def test_mcp_shell_commands_are_refused(mini_harness_dir, case):
    entry = json.dumps(SHELL_COMMANDS[case])
    (mini_harness_dir / "harness.yaml").write_text(
        (mini_harness_dir / "harness.yaml").read_text() + f"mcp_servers:\n  shop: {entry}\n"
    )
    problems = _errors(mini_harness_dir)
    assert any("mcp_servers.shop" in p and "runs" in p for p in problems), problems


def test_legitimate_mcp_server_passes_and_its_command_is_reported(mini_harness_dir):
    entry = json.dumps({"command": "python", "args": ["-m", "my_mcp.server", "-c", "config.yaml"]})
    (mini_harness_dir / "harness.yaml").write_text(
        (mini_harness_dir / "harness.yaml").read_text() + f"mcp_servers:\n  shop: {entry}\n"
    )
    check = check_harness(mini_harness_dir)
    assert check.ok, check.errors
    assert check.mcp_commands["shop"].endswith("-m my_mcp.server -c config.yaml")
    code, output = _cli("validate", str(mini_harness_dir))
    assert code == 0 and "MCP server 'shop' runs:" in output and "my_mcp.server" in output


# -- 3. dry render -------------------------------------------------------------------------------
def test_block_that_cannot_render_fails_validation_naming_block_and_file(mini_harness_dir):
    (mini_harness_dir / "prompts" / "status.md").write_text("Room status\n{{ room.turns_left // 0 }} turns")
    with (mini_harness_dir / "harness.yaml").open("a") as f:  # a context like the real requests'
        f.write("sample_context: {room: {turns_left: 5}}\n")
    _edit_yaml(mini_harness_dir, "pipeline: [role, catalog, format]", "pipeline: [role, catalog, format, status]")
    problems = _errors(mini_harness_dir)
    assert len(problems) == 1, problems
    assert problems[0].startswith("prompts/status.md:2: prompt block 'status'") and "ZeroDivisionError" in problems[0]
    with pytest.raises(HarnessValidationError):
        load_harness(mini_harness_dir)  # so a reload refuses it instead of serving 500s


def test_jinja_error_in_a_pipeline_block_is_reported_once(mini_harness_dir):
    (mini_harness_dir / "prompts" / "role.md").write_text("You are {{ harness.name ")
    problems = _errors(mini_harness_dir)
    assert len(problems) == 1 and problems[0].startswith("prompts/role.md:1: Jinja syntax error"), problems


def test_block_needing_a_product_is_a_warning(mini_harness_dir):
    (mini_harness_dir / "prompts" / "role.md").write_text(
        "Specs: {% for key, value in product.specs.items() %}{{ key }}={{ value }} {% endfor %}"
    )
    with (mini_harness_dir / "harness.yaml").open("a") as f:
        f.write("sample_context: {product: {specs: {color: blue}}}\n")
    check = check_harness(mini_harness_dir)
    assert check.ok and len(check.warnings) == 1 and "when a request has no context" in check.warnings[0].message
    assert _cli("validate", str(mini_harness_dir))[0] == 0
    code, output = _cli("validate", "--strict", "--json", str(mini_harness_dir))
    data = json.loads(output)
    assert code == 2 and data["ok"] and not data["passed"] and data["warnings"][0]["file"] == "prompts/role.md"


# -- 4. symlinks -----------------------------------------------------------------------------------
def test_symlinks_out_of_the_harness_are_rejected_and_never_read(mini_harness_dir, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET {{ 1 // 0 }}")
    os.symlink(secret, mini_harness_dir / "prompts" / "leak.md")
    outside = tmp_path / "outside-skill"
    outside.mkdir()
    (outside / "SKILL.md").write_text("---\nname: linked\ndescription: x\n---\nbody\n")
    os.symlink(outside, mini_harness_dir / "skills" / "linked")
    os.symlink(mini_harness_dir / "prompts" / "role.md", mini_harness_dir / "prompts" / "alias.md")  # inside: fine
    problems = _errors(mini_harness_dir)
    assert sorted(p.split(":")[0] for p in problems) == ["prompts/leak.md", "skills/linked"], problems
    assert all("outside the harness folder" in p and "SECRET" not in p for p in problems)


# -- 5. bounded immutable sandbox ----------------------------------------------------------------
def _render(template: str, settings: dict[str, object] | None = None) -> str:
    harness = Harness("t", "1", blocks=(PromptBlock("b", template),), pipeline=("b",), settings=settings or {})
    return render_prompt(harness, template_context(harness)).text


# Each case stays within ~160 MB even without the bounds, so a regression fails instead of
# exhausting the machine's memory.
@pytest.mark.parametrize(
    "template",
    [
        "{{ 'a' * 20000000 }}",
        "{{ ['a'] * 2000000 }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
        "{{ 'a'|center(20000000) }}",
        "{{ 'a'.rjust(20000000) }}",
        "{{ '%20000000s'|format('a') }}",
        "{{ '{:>{}}'.format('a', 20000000) }}",
        "{{ range(100000)|join('0123456789') }}",
        "{{ ('x' * 1000).join(range(1000)) }}",
        "{{ ('a' * 1000).translate({97: 'b' * 1000}) }}",
        "{% for i in range(100000) %}{{ 'abcdef' }}{% endfor %}",
    ],
)
def test_templates_cannot_build_huge_strings(template):
    with pytest.raises(HarnessError, match=f"{MAX_TEMPLATE_CHARS:,}"):
        _render(template)


def test_templates_cannot_mutate_what_they_render():
    rules = ["be kind"]
    with pytest.raises(HarnessError, match="unsafe"):
        _render("{{ settings.rules.append('say anything') }}", {"rules": rules})
    with pytest.raises(HarnessError, match="unsafe"):
        _render("{% set l = [1] %}{{ l.append(2) }}")
    assert rules == ["be kind"]


def test_ordinary_templates_still_render():
    text = _render(
        "{{ '%.2f'|format(3.14159) }} {{ '{:,}'.format(12345678) }} {{ 'a' ~ 'b' * 3 }} {{ [1, 2]|join('/') }}"
    )
    assert text == "3.14 12,345,678 abbb 1/2"


# -- 6. tool names in skills and prompts ---------------------------------------------------------
def test_skill_naming_a_renamed_tool_is_an_error(livestream_dir):
    assert check_harness(livestream_dir).warnings == ()
    tool = livestream_dir / "tools" / "get_stock.yaml"
    tool.write_text(tool.read_text().replace("name: get_stock", "name: check_inventory"))
    problems = _errors(livestream_dir)
    assert len(problems) == 1, problems
    assert problems[0].startswith("skills/product-qa/SKILL.md:9:")
    assert "'get_stock'" in problems[0] and "'check_inventory'" in problems[0]


def test_unknown_tool_like_name_is_a_warning(livestream_dir):
    skill = livestream_dir / "skills" / "faq-replies" / "SKILL.md"
    skill.write_text(skill.read_text() + "4. For coupons call `lookup_coupon` first.\n")
    check = check_harness(livestream_dir)
    assert check.ok and [w.file for w in check.warnings] == ["skills/faq-replies/SKILL.md"]
    assert "'lookup_coupon'" in check.warnings[0].message and check.warnings[0].line is not None
    code, output = _cli("validate", str(livestream_dir))
    assert code == 0 and "lookup_coupon" in output
