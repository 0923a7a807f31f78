"""Every kind of broken harness is rejected with the file (and line) named; nothing half-loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hat.cli.main import app
from hat.errors import HarnessValidationError
from hat.harness import load_harness, validate_harness

runner = CliRunner()


def _validate_cli(path: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["harness", "validate", str(path)])
    return result.exit_code, result.output


def test_valid_harness_passes(mini_harness_dir):
    assert validate_harness(mini_harness_dir) == []
    code, output = _validate_cli(mini_harness_dir)
    assert code == 0 and "ok" in output


def _break(path: Path, rel: str, text: str) -> None:
    target = path / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


CASES = {
    "invalid_yaml": (
        "harness.yaml",
        "name: mini\npipeline: [role, catalog\nlimits: {}\n",
        "harness.yaml:",
        "invalid YAML",
    ),
    "skill_name_rules": (
        "skills/Bad_Name/SKILL.md",
        "---\nname: Bad_Name\ndescription: x\n---\nbody\n",
        "skills/Bad_Name/SKILL.md:2",
        "a-z, 0-9",
    ),
    "skill_name_not_folder": (
        "skills/folder-a/SKILL.md",
        "---\nname: other-name\ndescription: x\n---\nbody\n",
        "skills/folder-a/SKILL.md:2",
        "must equal its folder name",
    ),
    "skill_description_too_long": (
        "skills/long-desc/SKILL.md",
        "---\nname: long-desc\ndescription: " + "x" * 1100 + "\n---\nbody\n",
        "skills/long-desc/SKILL.md:3",
        "limit is 1024",
    ),
    "skill_no_front_matter": (
        "skills/plain/SKILL.md",
        "just text\n",
        "skills/plain/SKILL.md:1",
        "front matter",
    ),
    "duplicate_tool": (
        "tools/zz_copy.yaml",
        "name: get_price\ndescription: again\nparameters: {type: object}\nbinding: python:toolbox:get_price\n",
        "tools/",
        "duplicate tool name 'get_price'",
    ),
    "invalid_json_schema": (
        "tools/bad_schema.yaml",
        "name: bad_schema\ndescription: d\nparameters:\n  type: object\n  properties:\n    x: {type: 12}\n"
        "binding: python:toolbox:boom\n",
        "tools/bad_schema.yaml:3",
        "invalid JSON schema",
    ),
    "unimportable_binding": (
        "tools/ghost.yaml",
        "name: ghost\ndescription: d\nparameters: {type: object}\nbinding: python:no_such_module_xyz:fn\n",
        "tools/ghost.yaml",
        "cannot be imported",
    ),
    "undeclared_mcp_server": (
        "tools/remote.yaml",
        "name: remote\ndescription: d\nparameters: {type: object}\nbinding: mcp:nowhere/tool\n",
        "tools/remote.yaml",
        "not declared under mcp_servers",
    ),
    "jinja_syntax": ("prompts/broken.md", "Hello {{ name ", "prompts/broken.md:1", "Jinja syntax error"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_broken_kind_is_rejected_with_file(mini_harness_dir, case):
    rel, text, where, message = CASES[case]
    _break(mini_harness_dir, rel, text)
    problems = validate_harness(mini_harness_dir)
    rendered = [str(p) for p in problems]
    assert any(where in r and message in r for r in rendered), rendered
    code, output = _validate_cli(mini_harness_dir)
    assert code == 2
    assert message.split("'")[0] in output
    with pytest.raises(HarnessValidationError):
        load_harness(mini_harness_dir)


def _edit_yaml(path: Path, old: str, new: str) -> None:
    text = (path / "harness.yaml").read_text()
    assert old in text
    (path / "harness.yaml").write_text(text.replace(old, new))


def test_missing_pipeline_block_names_line(mini_harness_dir):
    _edit_yaml(mini_harness_dir, "pipeline: [role, catalog, format]", "pipeline: [role, catalog, format, nope]")
    problems = [str(p) for p in validate_harness(mini_harness_dir)]
    assert any(p.startswith("harness.yaml:4") and "'nope' does not exist" in p for p in problems), problems


def test_unknown_hook_names_line(mini_harness_dir):
    _edit_yaml(mini_harness_dir, "  - name: reply_length\n", "  - name: reply_length\n  - name: no_such_hook\n")
    problems = [str(p) for p in validate_harness(mini_harness_dir)]
    assert any("harness.yaml:" in p and "unknown hook 'no_such_hook'" in p for p in problems), problems


def test_project_hook_with_missing_class(mini_harness_dir):
    (mini_harness_dir / "hooks.py").write_text("from hat.harness import Hook\nclass Shout(Hook):\n    name = 'shout'\n")
    _edit_yaml(mini_harness_dir, "  - name: reply_length\n", "  - name: hooks:Shout\n  - name: hooks:Missing\n")
    problems = [str(p) for p in validate_harness(mini_harness_dir)]
    assert len(problems) == 1 and "hooks:Missing" in problems[0], problems


def test_every_problem_is_reported_not_just_the_first(mini_harness_dir):
    for case in ("skill_name_rules", "duplicate_tool", "jinja_syntax"):
        rel, text, *_ = CASES[case]
        _break(mini_harness_dir, rel, text)
    assert len(validate_harness(mini_harness_dir)) >= 3


def test_unknown_harness_name():
    problems = validate_harness("definitely-not-a-harness")
    assert problems and "built-in" in str(problems[0])
