"""A new user's first hour (issue 12): honest output, clear failures, checks before slow work.

Each case listed under "Why" in the issue, driven through the real ``hat`` app with the scripted
model or the simulator policies (no weights are loaded): the exit code, the one-line message, and
that stdout stays valid JSON under ``--json``. Where the point is "checked before the model
loads", loading a model is patched to fail the test.
"""

from __future__ import annotations

import inspect
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hat.cli.common import DEFAULT_MODEL, ExitCode, StepProgress
from hat.cli.main import app

runner = CliRunner()
REPLY = '<reply>{"reply": "Thanks for joining the stream!"}</reply>'
LATIN1 = "café".encode("latin-1")  # b"caf\xe9": not UTF-8


def _script(tmp_path: Path, outputs: list[str], name: str = "script.jsonl") -> str:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps({"output": o}) for o in outputs) + "\n", encoding="utf-8")
    return f"scripted:{path}"


def _hat(*args: str) -> Any:
    return runner.invoke(app, list(args))


def _error_line(result: Any) -> str:
    """The one ``error: …`` line on stderr (and nothing that looks like a traceback)."""
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model for an external suite fails the test: the checks must come first."""
    import hat.eval.external_suites as external

    def refuse(spec: str, **kw: Any) -> None:
        raise AssertionError(f"a model ({spec}) was loaded before the cheap checks")

    monkeypatch.setattr(external, "load_model", refuse)


# -- silence during slow work ------------------------------------------------------------------------
def test_eval_json_reports_progress_on_stderr_and_keeps_stdout_pure_json():
    result = _hat("eval", "--suite", "t1", "--model", "oracle", "--n", "3", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n"] == 3  # the whole of stdout is one JSON document
    lines = result.stderr.splitlines()
    assert lines[0].startswith("t1 · oracle: 0/3") and "starting" in lines[0]
    assert any(line.startswith("t1 · oracle: 3/3 (100%)") for line in lines)


def test_plain_progress_lines_carry_done_total_and_eta(capsys: pytest.CaptureFixture[str]):
    with StepProgress("work", 4, interval=0.0) as update:
        update(1)
        update(2)
        update(4)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "work: 0/4 (0%) · 0s elapsed · starting"
    assert lines[1].startswith("work: 1/4 (25%) · ") and "ETA" in lines[1]
    assert lines[-1].startswith("work: 4/4 (100%)") and "ETA" not in lines[-1]


def test_a_resumed_run_s_eta_counts_only_the_steps_since_it_resumed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    import hat.cli.common as common

    clock = iter([0.0, 0.0, 300.0, 400.0])  # enter; resume after a 300 s model load; one step 100 s later
    monkeypatch.setattr(common.time, "monotonic", lambda: next(clock))
    progress = StepProgress("train", None, interval=0.0)
    with progress as update:
        progress.resume(360, 508)  # what the Trainer knows once it has loaded checkpoint-360
        update(361)
    line = capsys.readouterr().err.splitlines()[-1]
    # 147 steps left at the 100 s of the one step timed since the resume, not 361 steps in 400 s
    assert line == "train: 361/508 (71%) · 6m40s elapsed · ETA 4h05m"


def test_the_training_callback_starts_the_eta_at_the_resumed_step():
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from hat.cli.train_cmd import _step_callback

    progress = StepProgress("train", None)
    callback = _step_callback(progress)
    callback.on_train_begin(None, SimpleNamespace(global_step=360, max_steps=508), None)
    assert (progress.start_done, progress.done, progress.total) == (360, 360, 508)


def test_model_loading_is_quiet_unless_verbose(monkeypatch: pytest.MonkeyPatch):
    import warnings

    transformers = pytest.importorskip("transformers")
    from hat.models.transformers_backend import _gguf_module, quiet_loading

    logs = transformers.utils.logging
    before = logs.get_verbosity()
    gguf = _gguf_module()
    monkeypatch.delenv("HAT_VERBOSE", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_loading():
            warnings.warn("`x` is deprecated", FutureWarning, stacklevel=1)
            assert logs.get_verbosity() == logs.ERROR and not logs.is_progress_bar_enabled()
            if gguf is not None:  # the de-quantisation bar is a plain tqdm: it is disabled
                assert gguf.tqdm(range(2)).disable
        assert not caught
        assert logs.get_verbosity() == before
        monkeypatch.setenv("HAT_VERBOSE", "1")
        with quiet_loading():
            warnings.warn("`x` is deprecated", FutureWarning, stacklevel=1)
        assert len(caught) == 1


# -- failures that look like success -----------------------------------------------------------------
def test_unreachable_backend_exits_5_and_says_why_on_one_line():
    spec = f"openai:http://127.0.0.1:{_closed_port()}/v1#m"
    result = _hat("run", "--model", spec, "--comment", "hi")
    assert result.exit_code == ExitCode.BACKEND_ERROR == 5
    status = [line for line in result.stdout.splitlines() if line.strip().startswith("error:")]
    assert len(status) == 1 and "cannot reach" in status[0] and "round(s)" in status[0]
    as_json = _hat("run", "--model", spec, "--comment", "hi", "--json")
    record = json.loads(as_json.stdout)
    assert as_json.exit_code == 5 and record["status"] == "error" and "cannot reach" in record["status_reason"]


def test_empty_comment_is_refused_with_exit_4_and_its_reason(tmp_path):
    result = _hat("run", "--model", _script(tmp_path, [REPLY]), "--comment", "")
    assert result.exit_code == ExitCode.REFUSED == 4
    assert "refused: the comment is empty" in result.stdout
    record = json.loads(_hat("run", "--model", _script(tmp_path, [REPLY]), "--comment", " ", "--json").stdout)
    assert record["status"] == "refused" and "empty" in record["status_reason"]


def test_fallback_exits_3_with_its_reason(tmp_path):
    spec = _script(tmp_path, ["I am not following the protocol."] * 10)
    result = _hat("run", "--model", spec, "--comment", "how much is the dress?")
    assert result.exit_code == ExitCode.FALLBACK == 3
    status = [line for line in result.stdout.splitlines() if line.strip().startswith("fallback:")]
    assert len(status) == 1 and ("rounds" in status[0] or "attempts" in status[0])


def test_a_truncated_comment_is_announced(tmp_path):
    comment = "is it in stock? " * 3200  # 51,200 characters
    result = _hat("run", "--model", _script(tmp_path, [REPLY]), "--comment", comment, "--json")
    assert result.exit_code == 0
    record = json.loads(result.stdout)
    assert record["input_notes"] and "cut to 2000" in record["input_notes"][0]
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "cut to 2000" in notes[0]


def test_an_ok_reply_exits_0_and_prints_no_notes(tmp_path):
    result = _hat("run", "--model", _script(tmp_path, [REPLY]), "--comment", "hi there", "--json")
    assert result.exit_code == ExitCode.OK and result.stderr == ""
    assert json.loads(result.stdout)["status_reason"] == ""


# -- slow work before cheap checks -------------------------------------------------------------------
@pytest.mark.parametrize("suite", ["ifeval", "rotbench", "bfcl"])
def test_missing_data_fails_before_the_model_loads(suite, tmp_path, no_model_load):
    result = _hat("eval", "--suite", suite, "--model", "smollm2-hat", "--data", str(tmp_path / "none"), "--json")
    assert result.exit_code == ExitCode.BAD_INPUT and result.stdout == ""
    line = _error_line(result)
    assert str(tmp_path / "none") in line and "--data" in line


def test_bad_ifeval_data_names_file_and_line(tmp_path, no_model_load):
    data = tmp_path / "input_data.jsonl"
    data.write_text('{"key": 1, "prompt": "x", "instruction_id_list": [], "kwargs": []}\n{not json\n')
    line = _error_line(_hat("eval", "--suite", "ifeval", "--data", str(data)))
    assert f"{data}:2:" in line and "not valid JSON" in line
    data.write_bytes(b'{"key": 1, "prompt": "' + LATIN1 + b'", "instruction_id_list": [], "kwargs": []}\n')
    result = _hat("eval", "--suite", "ifeval", "--data", str(data))
    assert result.exit_code == 2 and f"{data}:1:" in _error_line(result) and "not UTF-8" in _error_line(result)


def test_bad_rotbench_and_bfcl_data_name_the_file(tmp_path, no_model_load):
    (tmp_path / "First_Turn_clean.json").write_text("[\n  {oops}\n]")
    line = _error_line(_hat("eval", "--suite", "rotbench", "--data", str(tmp_path)))
    assert f"{tmp_path / 'First_Turn_clean.json'}:2:" in line
    bfcl = tmp_path / "bfcl"
    bfcl.mkdir()
    (bfcl / "BFCL_v4_irrelevance.json").write_bytes(b'{"id": "a", "question": "' + LATIN1 + b'"}\n')
    line = _error_line(_hat("eval", "--suite", "bfcl", "--data", str(bfcl)))
    assert f"{bfcl / 'BFCL_v4_irrelevance.json'}:1:" in line and "not UTF-8" in line


def test_a_simulator_policy_with_an_external_suite_is_refused_in_plain_words(no_model_load):
    result = _hat("eval", "--suite", "ifeval", "--model", "oracle", "--json")
    assert result.exit_code == ExitCode.BAD_INPUT and result.stdout == ""
    line = _error_line(result)
    assert "simulator policy" in line and "t1" in line and "smollm2-hat" in line
    assert "episode=" not in line and "harness=" not in line


def test_eval_defaults_to_the_same_model_as_the_other_commands(tmp_path, no_model_load):
    from hat.cli.eval_cmd import eval_command
    from hat.cli.main import run

    for command in (eval_command, run):
        assert inspect.signature(command).parameters["model"].default.default == DEFAULT_MODEL
    result = _hat("eval", "--suite", "ifeval", "--data", str(tmp_path / "none"))  # no --model: no usage error
    assert "Missing option" not in result.output and "no IFEval data" in _error_line(result)


# -- wrong or missing hints --------------------------------------------------------------------------
def test_llamacpp_without_the_engine_points_at_make_install_fast(monkeypatch: pytest.MonkeyPatch):
    import importlib

    import hat.models.llamacpp_backend as backend

    real = importlib.import_module

    def no_engine(name: str, *args: Any) -> Any:
        if name == "llama_cpp":
            raise ImportError("No module named 'llama_cpp'")
        return real(name, *args)

    monkeypatch.setattr(backend.importlib, "import_module", no_engine)
    result = _hat("run", "--model", "llamacpp:smollm2", "--comment", "hi")
    assert result.exit_code == ExitCode.BAD_INPUT
    line = _error_line(result)
    assert "`make install-fast`" in line and "`make install`" not in line


def test_unknown_suite_lists_every_suite():
    result = _hat("eval", "--suite", "t9", "--model", "oracle", "--json")
    assert result.exit_code == 2 and result.stdout == ""
    line = _error_line(result)
    for suite in ("t1", "t2", "t3-tool", "t3-prompt", "ifeval", "rotbench", "bfcl"):
        assert suite in line


def test_readme_documents_exit_codes_and_harness_diff():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in ExitCode:
        assert re.search(rf"^\| `{int(code)}` \|", section, re.M), code
    assert "diff(1)" in section and "hat harness diff" in section
    assert "ExitCode" not in _hat("--help").stdout and "Exit codes:" in _hat("--help").stdout


# -- validation gaps (hook configs; skill bodies and prompt blocks: test_harness_validation.py) -------
def test_hook_config_naming_a_missing_tool_warns_and_fails_strict(tmp_path):
    target = tmp_path / "h"
    assert _hat("harness", "init", str(target)).exit_code == 0
    yaml_file = target / "harness.yaml"
    text = yaml_file.read_text(encoding="utf-8")
    assert "switch_product_link: {max_calls: 1}" in text
    yaml_file.write_text(text.replace("switch_product_link: {max_calls: 1}", "switch_link: {max_calls: 1}"))
    lenient = _hat("harness", "validate", str(target))
    assert lenient.exit_code == 0 and "1 warning(s)" in lenient.stderr
    warning = [line for line in lenient.stderr.splitlines() if "switch_link" in line]
    assert len(warning) == 1 and re.match(r"\s+harness\.yaml:\d+: hook 'tool_policy' names the tool", warning[0])
    assert _hat("harness", "validate", str(target), "--strict").exit_code == ExitCode.BAD_INPUT


# -- decoding errors ---------------------------------------------------------------------------------
def test_non_utf8_scripted_file_is_one_line_naming_file_and_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'"ok"\n"' + LATIN1 + b'"\n')
    result = _hat("run", "--model", f"scripted:{path}", "--comment", "hi", "--json")
    assert result.exit_code == ExitCode.BAD_INPUT and result.stdout == ""
    line = _error_line(result)
    assert f"{path}:2:5:" in line and "not UTF-8" in line and "0xe9" in line
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["augment", "--n", "1"],
        ["datagen", "--n", "1"],
        ["datagen-general", "--n", "1"],
        ["train", "sft", "--data", "nowhere"],
    ],
)
def test_non_utf8_config_names_file_and_line(command, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_bytes(b"seed: 1\n# " + LATIN1 + b"\n")
    result = _hat(*command, "--out", str(tmp_path / "out"), "--config", str(config))
    assert result.exit_code == ExitCode.BAD_INPUT
    line = _error_line(result)
    assert f"{config}:2:6:" in line and "not UTF-8" in line


# -- small inconsistencies ---------------------------------------------------------------------------
def test_boolean_flags_show_as_flags_in_help():
    for command in (["eval"], ["run"], ["demo"], ["harness", "validate"], ["augment"], ["train", "sft"]):
        result = _hat(*command, "--help")
        assert result.exit_code == 0 and "<bool>" not in result.stdout, command
    assert re.search(r"^\s+--resume\s", _hat("eval", "--help").stdout, re.M)
    rejected = _hat("eval", "--suite", "t1", "--model", "oracle", "--json", "true")
    assert rejected.exit_code == 2 and "true" in rejected.output


def test_serve_defaults_follow_the_model(tmp_path, monkeypatch: pytest.MonkeyPatch):
    import typer
    import uvicorn

    import hat.serve.cli as serve_cli
    from hat.models import ScriptedModel

    assert serve_cli.serve_defaults("smollm2-hat")[:2] == (1, 120.0)
    assert serve_cli.serve_defaults("llamacpp:smollm2?threads=1")[:2] == (1, 120.0)
    assert serve_cli.serve_defaults("hf:runs/sft")[:2] == (1, 120.0)
    assert serve_cli.serve_defaults("openai:http://x/v1#m")[:2] == (4, 30.0)
    assert serve_cli.serve_defaults("scripted:x.jsonl")[:2] == (4, 30.0)
    on_gpu = type("Loaded", (), {"model": type("Weights", (), {"device": "cuda:0"})()})()
    assert serve_cli.serve_defaults("hf:runs/sft", on_gpu)[:2] == (1, 30.0)

    captured: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: captured.update(app=app))
    monkeypatch.setattr(serve_cli, "_load", lambda spec: ScriptedModel([REPLY], loop=True))  # no weights
    cli = typer.Typer()
    cli.command()(serve_cli.serve_command)
    cli.command("other")(lambda: None)
    args = ["serve-command", "--model", "smollm2-hat", "--admin-token", "t", "--harness-root", str(tmp_path)]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    startup = [line for line in result.stderr.splitlines() if line.startswith("serving ")]
    assert len(startup) == 1 and "max concurrency 1, deadline 120 s (defaults for a local CPU model" in startup[0]
    assert captured["app"].state.server.timeout_s == 120.0
    given = runner.invoke(cli, [*args, "--max-concurrency", "2", "--timeout", "9"])
    assert "max concurrency 2, deadline 9 s (as given)" in given.stderr


def test_harness_init_hint_puts_the_command_on_its_own_unwrapped_line(tmp_path):
    target = tmp_path / ("a-long-folder-name-" * 4) / "my-harness"
    result = _hat("harness", "init", str(target))
    assert result.exit_code == 0, result.output
    assert f"  hat harness validate {target}" in result.stdout.splitlines()


def test_augment_prints_a_table_and_json_not_a_python_dict(tmp_path):
    result = _hat("augment", "--n", "2", "--out", str(tmp_path / "a"))
    assert result.exit_code == 0, result.output
    assert "transform families" in result.stdout and "{'" not in result.output
    as_json = _hat("augment", "--n", "2", "--out", str(tmp_path / "b"), "--json")
    summary = json.loads(as_json.stdout)
    assert as_json.exit_code == 0 and summary["n"] == 2 and summary["distinct_hashes"] == 2
    assert summary["families"] and "variants" not in summary


def test_demo_ends_with_a_summary_and_keeps_json_lines_pure(tmp_path):
    spec = _script(tmp_path, [REPLY] * 3)
    result = _hat("demo", "--comments", "3", "--model", spec, "--seed", "1")
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("summary: 3 replies · ok 3 · P50 ") and "0 tool calls (0 failed)" in last
    as_json = _hat("demo", "--comments", "3", "--model", _script(tmp_path, [REPLY] * 3, "b.jsonl"), "--json")
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]  # every stdout line is JSON
    assert len(rows) == 3 and all(r["status"] == "ok" for r in rows)
    assert "summary: 3 replies" in as_json.stderr and "live session: 3/3" in as_json.stderr


def test_demo_with_a_dead_backend_exits_5():
    spec = f"openai:http://127.0.0.1:{_closed_port()}/v1#m"
    result = _hat("demo", "--comments", "2", "--model", spec)
    assert result.exit_code == ExitCode.BACKEND_ERROR
    assert "summary: 2 replies · error 2" in result.stdout


# -- the shared reader -------------------------------------------------------------------------------
def test_text_reader_names_line_and_column_and_accepts_a_bom(tmp_path):
    from hat.errors import HatError
    from hat.textio import read_jsonl, read_text

    path = tmp_path / "f.txt"
    path.write_bytes(b"\xef\xbb\xbfline one\nab" + LATIN1 + b"\n")
    with pytest.raises(HatError, match=rf"^{re.escape(str(path))}:2:6: the notes is not UTF-8 text \(byte 0xe9"):
        read_text(path, what="notes")
    path.write_bytes(b'\xef\xbb\xbf"a"\n\n{"b": 1}\n')
    assert read_jsonl(path) == [(1, "a"), (3, {"b": 1})]
    with pytest.raises(HatError, match="cannot read the data"):
        read_text(tmp_path / "missing", what="data")
