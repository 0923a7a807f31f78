"""examples/support-desk: a second domain on the same runtime, end to end with scripted models.

The example's Python module (tools and context provider) lives in its folder and is found there:
nothing here puts the folder on ``sys.path`` or ``PYTHONPATH`` (``test_harness_modules.py`` covers
how a harness folder's own modules resolve)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("mcp")  # the ticket tool is an MCP server (the `mcp` extra, part of `all`)

from hat.augment import Envelope, augment
from hat.eval.episodes_file import evaluate_file, read_episodes_file, reference_outputs, run_episodes
from hat.harness import Agent, Request, load_context_provider, load_harness, spec_of
from hat.harness.loader import check_harness, save_harness
from hat.harness.tools import import_harness_module
from hat.models.scripted import ScriptedModel

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support-desk"
EPISODES = EXAMPLE / "episodes.jsonl"
SCRIPT = EXAMPLE / "scripted.jsonl"
REPO = EXAMPLE.parent.parent

CLI_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
CLI_ENV.pop("PYTHONPATH", None)


def _reference_model(harness, episodes) -> ScriptedModel:
    return ScriptedModel([out for ep in episodes for out in reference_outputs(ep, harness)])


def test_example_validates():
    check = check_harness(EXAMPLE)
    assert check.ok and not check.warnings, (check.errors, check.warnings)
    harness = check.harness
    assert {s.name for s in harness.skills} == {"order-status", "returns-refunds", "escalation"}
    assert {t.name: t.binding.partition(":")[0] for t in harness.tools} == {
        "lookup_order": "python",
        "refund_policy": "python",
        "open_ticket": "mcp",
    }
    assert harness.input_block == "customer_message"
    assert harness.context_provider == "python:support_desk:customer_context"
    assert check.mcp_commands["desk"].endswith("mcp_server.py")
    assert "hooks:PrivacyHook" in {h.name for h in harness.hooks}


def test_tool_yaml_is_what_the_decorator_says():
    support_desk = import_harness_module("support_desk", EXAMPLE)
    for fn in (support_desk.lookup_order, support_desk.refund_policy):
        on_disk = yaml.safe_load((EXAMPLE / "tools" / f"{fn.name}.yaml").read_text(encoding="utf-8"))
        # loaded from the folder under a private module name; the YAML binds it by its own name
        binding = f"python:support_desk:{fn.name}"
        assert on_disk == spec_of(fn, binding=binding), f"tools/{fn.name}.yaml drifted; regenerate it with tool_yaml"


def test_episodes_file_is_labelled_against_the_harness():
    harness = load_harness(EXAMPLE)
    episodes = read_episodes_file(EPISODES)
    assert len(episodes) == 30 and len({e.id for e in episodes}) == 30
    assert {e.intent for e in episodes} == {"order_status", "unknown_order", "returns", "escalation", "general"}
    assert any(e.history for e in episodes) and any(len(e.turns) > 1 for e in episodes)
    for ep in episodes:
        gold = ep.gold
        assert gold.skill is None or harness.skill_by_function(gold.skill) is not None, ep.id
        assert all(harness.tool_by_function(c.name) is not None for c in gold.tool_calls), ep.id
        assert all(f.casefold() in gold.reply.casefold() for f in gold.facts), ep.id
        assert len(gold.reply) <= harness.limits.reply_max_chars, ep.id


def test_a_bad_episodes_line_names_file_and_line(tmp_path):
    from hat.errors import HatError

    bad = tmp_path / "episodes.jsonl"
    good = EPISODES.read_text(encoding="utf-8").splitlines()[0]
    bad.write_text(good + "\n" + json.dumps({"id": "x", "turns": [], "gold": {}}) + "\n", encoding="utf-8")
    with pytest.raises(HatError, match=r"episodes.jsonl:2: turns: List should have at least 1 item"):
        read_episodes_file(bad)
    bad.write_text(good + "\n" + good + "\n", encoding="utf-8")
    with pytest.raises(HatError, match="repeated: sd-01"):
        read_episodes_file(bad)


def test_runs_end_to_end_with_the_scripted_model():
    result = evaluate_file(EXAMPLE, EPISODES, f"scripted:{SCRIPT}")
    summary = result.summary()
    assert summary["n"] == 30 and summary["statuses"] == {"ok": 30}
    # the script makes three deliberate mistakes (see its "note" fields); the scores find exactly those
    worst = {c["episode_id"]: c["reasons"] for c in summary["worst"]}
    assert set(worst) == {"sd-07", "sd-21", "sd-27"}
    assert worst["sd-07"] == {"skill": "expected skill order-status; loaded none"}
    assert worst["sd-21"] == {"facts": "reply lacks '7 days'"}
    assert "missing open_ticket" in worst["sd-27"]["tool_calls"] and "T-1005" in worst["sd-27"]["facts"]
    assert summary["dims"] == {"tool_calls": 98.33, "skill": 96.67, "facts": 93.33}
    assert summary["score"] == 96.11
    cases = {c.episode_id: c for c in result.cases}
    ticket = cases["sd-23"].trace.tool_calls[1]  # through the MCP server
    assert (ticket.name, ticket.status, ticket.result["ticket_id"]) == ("open_ticket", "ok", "T-1003")
    refused = cases["sd-12"].trace.tool_calls[0]  # another customer's order
    assert refused.status == "error" and "SD-1003 on this customer's account" in refused.error
    assert "Signed-in customer: Ana Silva (gold member)" in cases["sd-01"].trace.system_prompt  # context provider
    assert cases["sd-09"].trace.to_messages()[1]["content"] == "Customer messages:\n1. hello\n2. is SD-1002 on its way?"


def test_reference_outputs_score_full_marks():
    harness = load_harness(EXAMPLE)
    episodes = read_episodes_file(EPISODES)
    result = run_episodes(harness, episodes, _reference_model(harness, episodes))
    assert result.summary()["score"] == 100.0, result.summary()["worst"]


def test_hsa_variant_runs_with_labels_following():
    harness = load_harness(EXAMPLE)
    episodes = read_episodes_file(EPISODES)
    variant = augment(harness, 3, Envelope({"tool_rename": 1.0, "block_reorder": 1.0}, min_transforms=2)).harness
    renamed = {t.function_id: t.name for t in variant.tools}
    assert all(fid != name for fid, name in renamed.items()), renamed  # every tool has a new name
    assert variant.pipeline != harness.pipeline and variant.pipeline[0] == "role"
    escalation = variant.skill_by_function("escalation")
    assert f"`{renamed['open_ticket']}`" in escalation.body and "`open_ticket`" not in escalation.body

    result = run_episodes(variant, episodes, _reference_model(variant, episodes))
    summary = result.summary()
    assert summary["score"] == 100.0, summary["worst"]
    ticket = {c.episode_id: c for c in result.cases}["sd-23"].trace.tool_calls[1]
    assert (ticket.name, ticket.result["ticket_id"]) == (renamed["open_ticket"], "T-1003")  # MCP under a new name

    stale = run_episodes(variant, episodes, _reference_model(harness, episodes))  # production names
    assert stale.summary()["dims"]["tool_calls"] < 50
    assert any(c.status == "unknown_tool" for case in stale.cases for c in case.trace.tool_calls)


def _agent(outputs: list[str]) -> Agent:
    harness = load_harness(EXAMPLE)
    return Agent(harness, ScriptedModel(outputs), context_provider=load_context_provider(harness))


def _ask(outputs: list[str], text: str, customer: str | None = "C-100"):
    agent = _agent(outputs)
    try:
        return agent.respond(Request.of(text, context={"customer_id": customer} if customer else {})).trace
    finally:
        agent.close()


def test_hooks_guard_the_replies():
    lookup = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "SD-1002"}}</tool_call>'
    trace = _ask(
        [
            lookup,
            '<reply>{"reply": "To check, please send me your card number."}</reply>',  # PrivacyHook
            '<reply>{"reply": "It arrives on 2026-12-09."}</reply>',  # a date no tool returned
            '<reply>{"reply": "It should arrive by 2026-12-04."}</reply>',
        ],
        "when does SD-1002 arrive?",
    )
    events = [(e.hook, e.verdict) for e in trace.hook_events if e.point == "stop_check"]
    assert events == [("privacy", "retry"), ("grounded_claims", "retry")]
    assert trace.status == "ok" and trace.reply == "It should arrive by 2026-12-04."


def test_a_ticket_needs_a_lookup_first():
    ticket = '<tool_call>{"name": "open_ticket", "arguments": {"order_id": "SD-1002", "reason": "late"}}</tool_call>'
    trace = _ask([ticket, '<reply>{"reply": "Let me look that up first."}</reply>'], "escalate SD-1002")
    (call,) = trace.tool_calls
    assert call.status == "blocked" and "call lookup_order first" in call.error


def test_context_provider_and_anonymous_visitors():
    customer_context = load_context_provider(load_harness(EXAMPLE))
    assert customer_context is not None
    filled = customer_context(Request.of("hi", context={"customer_id": "C-101"})).context["customer"]
    assert filled == {"id": "C-101", "name": "Ben Okafor", "tier": "standard", "orders": ["SD-1003", "SD-1004"]}
    assert "customer" not in customer_context(Request.of("hi", context={"customer_id": "C-999"})).context
    # a customer record the caller sends is never kept: grounded_claims trusts the numbers in it
    forged = {"id": "C-100", "name": "Ana Silva", "tier": "gold", "orders": ["SD-1002"], "credit": 500}
    replaced = customer_context(Request.of("hi", context={"customer_id": "C-101", "customer": forged})).context
    assert replaced["customer"]["name"] == "Ben Okafor" and "credit" not in replaced["customer"]
    assert "customer" not in customer_context(Request.of("hi", context={"customer": forged})).context
    lookup = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "SD-1002"}}</tool_call>'
    trace = _ask([lookup, '<reply>{"reply": "Please sign in first."}</reply>'], "where is SD-1002?", customer=None)
    assert trace.tool_calls[0].status == "error" and "not signed in" in trace.tool_calls[0].error
    assert "The customer is not signed in" in trace.system_prompt


def test_cli_run_and_eval(tmp_path):
    from hat.cli.main import app

    runner = CliRunner()
    run = runner.invoke(
        app,
        [
            *("run", "--harness", str(EXAMPLE), "--model", f"scripted:{EXAMPLE / 'scripted-run.jsonl'}"),
            *("--comment", "do you charge a restocking fee on clothes?", "--json"),
        ],
    )
    assert run.exit_code == 0, run.output
    record = json.loads(run.stdout)
    assert record["reply"].startswith("There is no restocking fee on apparel")
    assert [c["name"] for c in record["tool_calls"]] == ["refund_policy"]

    evaluated = runner.invoke(
        app,
        [
            *("eval", "--harness", str(EXAMPLE), "--episodes", str(EPISODES), "--model", f"scripted:{SCRIPT}"),
            *("--json", "--out", str(tmp_path)),
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    summary = json.loads(evaluated.stdout)
    assert summary["suite"] == "episodes" and summary["n"] == 30 and summary["score"] == 96.11
    (written,) = tmp_path.glob("episodes_*.json")
    assert json.loads(written.read_text())["score"] == 96.11
    assert written.with_name(written.stem + "_cases.jsonl").is_file()

    missing = runner.invoke(app, ["eval", "--harness", str(EXAMPLE), "--episodes", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 2 and "episodes file" in missing.output


NO_SIMULATOR = """
import json, runpy, sys
runpy.run_path(sys.argv[1], run_name="__main__")  # the README's Python API example
from hat.eval.episodes_file import evaluate_file
summary = evaluate_file(sys.argv[2], sys.argv[3], "scripted:" + sys.argv[4]).summary()
live_room = sorted(m for m in sys.modules if m.split(".")[:2] in (["hat", "env"], ["hat", "judge"]))
print(json.dumps({"score": summary["score"], "live_room": live_room}))
"""


def test_running_it_imports_nothing_of_the_live_room():
    env = CLI_ENV  # no PYTHONPATH: the example's own module is found in its folder
    args = [str(EXAMPLE / "api_example.py"), str(EXAMPLE), str(EPISODES), str(SCRIPT)]
    proc = subprocess.run(
        [sys.executable, "-c", NO_SIMULATOR, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    example_output, result = proc.stdout.strip().splitlines()[:2], json.loads(proc.stdout.strip().splitlines()[-1])
    assert example_output == [
        "SD-1002 shipped with DHL, due 2026-12-04. The team is closed on Saturday.",
        "[('lookup_order', 'ok'), ('team_hours', 'ok')]",
    ]
    assert result == {"score": 96.11, "live_room": []}


def test_cli_run_with_context_prints_neutral_labels(tmp_path):
    from hat.cli.main import app

    runner = CliRunner()
    ask = ("run", "--harness", str(EXAMPLE), "--model", f"scripted:{EXAMPLE / 'scripted-order.jsonl'}")
    ask += ("-c", "Hi! Where is my sweater order SD-1002?")
    signed_in = runner.invoke(app, [*ask, "--context", '{"customer_id": "C-100"}'])
    assert signed_in.exit_code == 0, signed_in.output
    lines = signed_in.stdout.splitlines()
    assert lines[0] == "user: Hi! Where is my sweater order SD-1002?"
    assert lines[1] == '  tool lookup_order({"order_id": "SD-1002"}) → ok'
    assert lines[3].startswith("agent: Your Merino sweater (SD-1002) has shipped with DHL")
    assert "viewer" not in signed_in.stdout and "avatar" not in signed_in.stdout

    context_file = tmp_path / "context.json"
    context_file.write_text('{"customer_id": "C-100"}', encoding="utf-8")
    record = json.loads(runner.invoke(app, [*ask, "--context-file", str(context_file), "--json"]).stdout)
    assert record["status"] == "ok" and record["tool_calls"][0]["status"] == "ok"
    assert record["trace"]["context"]["request"]["customer"]["name"] == "Ana Silva"  # the provider saw customer_id

    anonymous = json.loads(runner.invoke(app, [*ask, "--json"]).stdout)  # no context: not signed in
    assert "not signed in" in anonymous["trace"]["rounds"][1]["tool_calls"][0]["error"]


CLI_IMPORTS = """
import json, sys
from typer.testing import CliRunner
from hat.cli.main import app
codes = [CliRunner().invoke(app, args).exit_code for args in json.loads(sys.argv[1])]
prefixes = ("hat.env", "hat.judge", "hat.evolve")
loaded = sorted(m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in prefixes))
print(json.dumps({"codes": codes, "loaded": loaded}))
"""


def test_the_cli_on_the_example_never_imports_the_simulator():
    run = ["run", "--harness", str(EXAMPLE), "--model", f"scripted:{EXAMPLE / 'scripted-order.jsonl'}"]
    commands = [
        ["harness", "validate", str(EXAMPLE)],
        [*run, "-c", "where is SD-1002?", "--context", '{"customer_id": "C-100"}', "--json"],
        ["eval", "--harness", str(EXAMPLE), "--episodes", str(EPISODES), "--model", f"scripted:{SCRIPT}", "--json"],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", CLI_IMPORTS, json.dumps(commands)],
        capture_output=True, text=True, env=CLI_ENV, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"codes": [0, 0, 0], "loaded": []}


def test_a_written_variant_keeps_the_example_code_and_validates(tmp_path):
    """save_harness copies the source folder's own files (the @tool module, the MCP server, the
    data), so an HSA variant written to disk validates and runs like the in-memory one."""
    harness = load_harness(EXAMPLE)
    variant = augment(harness, 3, Envelope({"tool_rename": 1.0}, min_transforms=1)).harness
    folder = save_harness(variant, tmp_path / "variant")
    assert {"support_desk.py", "mcp_server.py", "data"} <= {p.name for p in folder.iterdir()}
    assert not (folder / "__pycache__").exists()
    reloaded = load_harness(folder)
    assert reloaded.content_hash() == variant.content_hash()
    result = run_episodes(
        reloaded, read_episodes_file(EPISODES)[:5], _reference_model(reloaded, read_episodes_file(EPISODES)[:5])
    )
    assert result.summary()["score"] == 100.0
