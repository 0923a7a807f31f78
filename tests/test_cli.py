"""The ``hat`` CLI end to end (scripted model: no weights needed)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from hat.cli.main import app

runner = CliRunner()
REQUIRED = {"comment", "reply", "harness_hash", "rounds", "tool_calls", "latency_ms", "trace"}


def _script(tmp_path: Path, outputs: list[str]) -> str:
    path = tmp_path / "script.jsonl"
    path.write_text("\n".join(json.dumps({"output": o}) for o in outputs) + "\n")
    return f"scripted:{path}"


def test_init_validate_hash_diff(tmp_path):
    target = tmp_path / "mine"
    assert runner.invoke(app, ["harness", "init", str(target)]).exit_code == 0
    assert (target / "harness.yaml").is_file() and (target / "skills" / "product-qa" / "SKILL.md").is_file()
    assert runner.invoke(app, ["harness", "validate", str(target)]).exit_code == 0
    h1 = runner.invoke(app, ["harness", "hash", str(target)]).output.strip()
    assert h1 == runner.invoke(app, ["harness", "hash", "livestream"]).output.strip()
    # rename a tool the way an operator would: edit its YAML and the skills that mention it
    tool = target / "tools" / "get_price.yaml"
    tool.write_text(tool.read_text().replace("name: get_price", "name: price_lookup"))
    tool.rename(target / "tools" / "price_lookup.yaml")
    for skill in (target / "skills").glob("*/SKILL.md"):
        skill.write_text(skill.read_text().replace("`get_price`", "`price_lookup`"))
    result = runner.invoke(app, ["harness", "diff", "livestream", str(target), "--json"])
    assert result.exit_code == 1
    diff = json.loads(result.output)
    assert diff["tools"]["renamed"] == [["get_price", "price_lookup"]]
    assert runner.invoke(app, ["harness", "hash", str(target)]).output.strip() != h1
    assert runner.invoke(app, ["harness", "init", str(target)]).exit_code == 2  # refuses a non-empty folder


def test_run_json_with_tool_call(tmp_path):
    spec = _script(
        tmp_path,
        [
            '<tool_call>{"name": "get_price", "arguments": {}}</tool_call>',
            '<reply>{"reply": "Great choice, check the price on screen!"}</reply>',
        ],
    )
    result = runner.invoke(app, ["run", "--model", spec, "--comment", "how much is this dress?", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert set(record) >= REQUIRED
    assert record["rounds"] == 2 and record["tool_calls"][0]["name"] == "get_price"
    assert record["tool_calls"][0]["status"] == "ok"
    assert record["trace"]["rounds"][0]["tool_calls"][0]["result"]["product"] == "p-dress-01"  # the product on display


def test_demo_json_lines(tmp_path):
    spec = _script(tmp_path, ['<reply>{"reply": "Thanks for joining the stream!"}</reply>'] * 3)
    result = runner.invoke(app, ["demo", "--comments", "3", "--model", spec, "--json", "--seed", "1"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 3
    for line in lines:
        assert set(line) >= REQUIRED and line["reply"] == "Thanks for joining the stream!"
    assert len({line["comment"] for line in lines}) == 3


def test_unknown_model_spec_lists_valid_forms():
    result = runner.invoke(app, ["run", "--model", "gpt5", "--comment", "hi"])
    assert result.exit_code == 2
    assert "smollm2" in result.output and "openai:<base_url>#<model>" in result.output


def test_broken_harness_exits_2(tmp_path):
    (tmp_path / "bad").mkdir()
    result = runner.invoke(app, ["run", "--harness", str(tmp_path / "bad"), "--model", "smollm2", "--comment", "hi"])
    assert result.exit_code == 2 and "harness.yaml" in result.output


def test_run_passes_context_to_the_request_and_keeps_live_room_labels(tmp_path):
    spec = _script(tmp_path, ['<reply>{"reply": "Thanks for joining the stream!"}</reply>'] * 2)
    result = runner.invoke(app, ["run", "--model", spec, "-c", "hi", "--context", '{"campaign": "winter", "n": 2}'])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:2] == ["viewer: hi", "avatar: Thanks for joining the stream!"]
    record = json.loads(
        runner.invoke(app, ["run", "--model", spec, "-c", "hi", "--context", '{"campaign": "w"}', "--json"]).stdout
    )
    request = record["trace"]["context"]["request"]
    assert request["campaign"] == "w" and "room" in request  # the caller's key, and the live room's provider ran


def test_run_refuses_a_bad_context_before_the_model_loads(tmp_path):
    missing_model = f"scripted:{tmp_path / 'no-such-script.jsonl'}"  # loading it would fail with another message
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"name": "caf\xe9"}')
    cases = {
        ("--context", "{bad"): "--context is not valid JSON",
        ("--context", "[1, 2]"): "--context must be a JSON object ({...}), not an array",
        ("--context", '"text"'): "not a string",
        ("--context", "null"): "not null",
        ("--context-file", str(tmp_path / "none.json")): "cannot read the context file",
        ("--context-file", str(latin1)): "latin1.json:1:14: the context file is not UTF-8",
        ("--context", "{}", "--context-file", str(latin1)): "give --context or --context-file, not both",
    }
    for args, message in cases.items():
        result = runner.invoke(app, ["run", "--model", missing_model, "-c", "hi", *args])
        assert result.exit_code == 2, (args, result.output)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], (args, result.stderr)


def test_diagnose_default_grouping_comes_from_the_library():
    from hat.evolve.diagnose import GROUP_KEYS

    assert ",".join(GROUP_KEYS) in runner.invoke(app, ["evolve", "diagnose", "--help"]).stdout


POLICY_RUN = """
import sys
from typer.testing import CliRunner
from hat.cli.main import app
assert "hat.evolve.policy" not in sys.modules  # nothing registered it at import
result = CliRunner().invoke(app, ["eval", "--suite", "t1", "--model", "rule-reader", "--n", "2", "--json"])
print(result.exit_code, result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.output)
"""


def test_rule_reader_policy_still_works_from_the_cli():
    """hat.evolve is imported on use now; the commands that take a policy register rule-reader."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", POLICY_RUN], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    code, _, summary = proc.stdout.strip().splitlines()[-1].partition(" ")
    assert code == "0", proc.stdout
    assert json.loads(summary)["model"] == "rule-reader" and json.loads(summary)["n"] == 2


def test_the_cli_keeps_the_hub_offline_unless_the_user_says_otherwise(monkeypatch) -> None:
    import sys

    from hat.cli import main as cli_main

    seen = []
    monkeypatch.setattr(cli_main, "app", lambda: seen.append(__import__("os").environ.get("HF_HUB_OFFLINE")))
    monkeypatch.setattr(sys, "argv", ["hat", "--help"])
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    cli_main.main()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    cli_main.main()
    assert seen == ["1", "0"]
