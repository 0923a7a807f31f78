"""Crash-safe writes: torn trace lines are skipped and reported, ``hat eval --out`` appends cases as
they finish and writes its summary last, ``--resume`` continues an interrupted run to the same
results, and SFT resumes only from a complete checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from hat.cli.main import app
from hat.errors import HatError
from hat.harness import Agent, JSONLSink, Request, load_harness
from hat.harness.trace import TornLineWarning, read_jsonl, read_traces, write_traces
from hat.models.scripted import ScriptedModel

runner = CliRunner()


@pytest.fixture
def traces(mini_harness_dir: Path) -> list[Any]:
    agent = Agent(load_harness(mini_harness_dir), ScriptedModel(['<reply>{"reply": "Hi!"}</reply>'], loop=True))
    return [agent.respond(Request.of(f"hello {i}")).trace for i in range(3)]


# -- traces ------------------------------------------------------------------------------------------
def test_torn_trace_line_is_skipped_and_reported(tmp_path: Path, traces: list[Any]) -> None:
    path = tmp_path / "traces.jsonl"
    write_traces(path, traces[:2])
    with open(path, "a", encoding="utf-8") as fh:  # a crash mid-write: half a record, no newline
        fh.write(traces[2].to_json()[:150])
    write_traces(path, traces[2:])  # the next writer starts on a fresh line
    with pytest.warns(TornLineWarning, match=r"skipped 1 torn line\(s\) \(line 3\)"):
        read = read_traces(path)
    assert [t.comments for t in read] == [t.comments for t in traces]


def test_jsonl_sink_starts_on_a_fresh_line(tmp_path: Path, traces: list[Any]) -> None:
    path = tmp_path / "sink.jsonl"
    path.write_text(traces[0].to_json()[:99], encoding="utf-8")  # torn by a crash
    sink = JSONLSink(path)
    for trace in traces:
        sink.emit(trace)
    read = read_jsonl(path)
    assert read.torn == (1,) and [r["comments"] for r in read.rows] == [list(t.comments) for t in traces]


def test_a_record_glued_onto_a_torn_line_is_salvaged(tmp_path: Path, traces: list[Any]) -> None:
    path = tmp_path / "old.jsonl"  # written before writers started on fresh lines
    path.write_text(traces[0].to_json()[:120] + traces[1].to_json() + "\n" + traces[2].to_json() + "\n")
    with pytest.warns(TornLineWarning, match="salvaged 1 record"):
        read = read_traces(path)
    assert [t.comments for t in read] == [t.comments for t in traces[1:]]


# -- hat eval --out / --resume -----------------------------------------------------------------------
EVAL = ["eval", "--suite", "t1", "--model", "oracle", "--n", "8", "--seed", "4", "--json"]


def _eval(out: Path, *extra: str) -> Any:
    return runner.invoke(app, [*EVAL, "--out", str(out), *extra])


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, k: int) -> list[str]:
    """Make the runner fail on the (k+1)-th case, as a crash would; returns the ids it ran."""
    import hat.eval.runner as runner_module

    real, ran = runner_module._run_case, []

    def run_case(case: Any, *args: Any) -> Any:
        if len(ran) == k:
            raise RuntimeError("simulated crash")
        ran.append(case.episode.episode_id)
        return real(case, *args)

    monkeypatch.setattr(runner_module, "_run_case", run_case)
    return ran


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _same_results(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert [r["episode_id"] for r in a] == [r["episode_id"] for r in b]
    assert [r["scores"] for r in a] == [r["scores"] for r in b]
    assert [r["trace"]["reply"] for r in a] == [r["trace"]["reply"] for r in b]


def test_interrupted_eval_resumes_to_the_same_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _eval(tmp_path / "whole")
    assert whole.exit_code == 0, whole.output
    out = tmp_path / "resumed"
    ran = _interrupt_after(monkeypatch, 3)
    assert _eval(out).exit_code != 0
    cases = out / "t1_oracle_cases.jsonl"
    assert len(_rows(cases)) == 3 and not (out / "t1_oracle.json").exists()  # cases kept, no summary
    with open(cases, "a", encoding="utf-8") as fh:
        fh.write('{"episode_id": "4-000')  # and a line torn by the crash
    monkeypatch.undo()
    ran = _interrupt_after(monkeypatch, 99)
    resumed = _eval(out, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert len(ran) == 5 and "resuming: 3 case(s)" in resumed.output and "1 torn line" in resumed.output
    _same_results(_rows(cases), _rows(tmp_path / "whole" / "t1_oracle_cases.jsonl"))
    summary, reference = (json.loads((d / "t1_oracle.json").read_text()) for d in (out, tmp_path / "whole"))
    for key in ("n", "score", "dims", "by_intent", "statuses"):
        assert summary[key] == reference[key], key
    assert summary["n"] == 8 and summary["options"]["resumed_cases"] == 3


def test_resume_refuses_another_run_and_a_rerun_never_truncates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _interrupt_after(monkeypatch, 2)
    assert _eval(tmp_path).exit_code != 0
    cases = tmp_path / "t1_oracle_cases.jsonl"
    before = cases.read_bytes()
    monkeypatch.undo()
    other = runner.invoke(app, [*EVAL[:-3], "--seed", "5", "--json", "--out", str(tmp_path), "--resume"])
    assert other.exit_code == 2 and "seed: 4 there, 5 now" in other.output
    fresh = _eval(tmp_path)  # no --resume: refused, not truncated
    assert fresh.exit_code == 2 and "--resume" in fresh.output
    assert cases.read_bytes() == before


@pytest.mark.parametrize("suite", ["t1", "t2", "t3-tool", "t3-prompt"])
def test_a_suite_s_first_cases_do_not_depend_on_n(suite: str) -> None:
    """What growing a run with --resume --n relies on: n = 4 is the first 4 of n = 9."""
    from hat.eval.suites import build_cases

    def ids(n: int) -> list[tuple[str, str]]:
        return [(c.episode.episode_id, c.harness.content_hash()) for c in build_cases(suite, n=n, seed=3)]

    assert ids(4) == ids(9)[:4]


def test_resume_with_a_larger_n_grows_a_finished_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = [*EVAL[:-5], "--n", "5", *EVAL[-3:]]
    assert runner.invoke(app, [*small, "--out", str(tmp_path)]).exit_code == 0
    cases = tmp_path / "t1_oracle_cases.jsonl"
    first = _rows(cases)
    ran = _interrupt_after(monkeypatch, 99)
    grown = _eval(tmp_path, "--resume")  # n = 8
    assert grown.exit_code == 0, grown.output
    assert len(ran) == 3 and "from n = 5 to n = 8" in grown.output  # only the new cases ran
    assert _rows(cases)[:5] == first
    _same_results(_rows(cases), [*first, *_rows(cases)[5:]])
    whole = _eval(tmp_path / "whole")
    _same_results(_rows(cases), _rows(tmp_path / "whole" / "t1_oracle_cases.jsonl"))
    summary = json.loads((tmp_path / "t1_oracle.json").read_text())
    assert summary["n"] == 8 and summary["options"]["resumed_cases"] == 5, whole.output
    assert json.loads((tmp_path / "t1_oracle.run.json").read_text())["n"] == 8
    smaller = runner.invoke(app, [*small, "--out", str(tmp_path), "--resume"])  # shrinking is refused
    assert smaller.exit_code == 2 and "n: 8 there, 5 now" in smaller.output
    other = runner.invoke(app, [*EVAL[:-3], "--seed", "5", "--n", "9", "--json", "--out", str(tmp_path), "--resume"])
    assert other.exit_code == 2 and "seed: 4 there, 5 now" in other.output  # growing keeps every other key


# -- hat train sft --resume --------------------------------------------------------------------------
def _checkpoint(folder: Path, *, state: str | None, weights: bool) -> None:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    if state is not None:
        (folder / "trainer_state.json").write_text(state)
    if weights:
        (folder / "adapter_model.safetensors").write_bytes(b"\0" * 8)


def test_half_written_checkpoint_is_skipped_on_resume(tmp_path: Path) -> None:
    from hat.train.checkpoints import resume_checkpoint

    _checkpoint(tmp_path / "checkpoint-2", state='{"global_step": 2}', weights=True)
    _checkpoint(tmp_path / "checkpoint-4", state='{"global_st', weights=True)  # torn trainer_state.json
    _checkpoint(tmp_path / "checkpoint-6", state=None, weights=False)  # crash before the weights landed
    config = SimpleNamespace(resume_from_checkpoint="latest", output_dir=str(tmp_path))
    assert resume_checkpoint(config) == str(tmp_path / "checkpoint-2")  # type: ignore[arg-type]
    named = SimpleNamespace(resume_from_checkpoint=str(tmp_path / "checkpoint-4"), output_dir=str(tmp_path))
    with pytest.raises(HatError, match="incomplete"):
        resume_checkpoint(named)  # type: ignore[arg-type]
    (tmp_path / "checkpoint-2" / "adapter_model.safetensors").unlink()
    with pytest.raises(HatError, match=r"no complete checkpoint.*checkpoint-6.*checkpoint-4.*checkpoint-2"):
        resume_checkpoint(config)  # type: ignore[arg-type]
