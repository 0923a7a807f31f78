"""``hat bench latency`` (issue 15): in-process runs, Tables 6 and 7, the bandwidth bound, the files.

Fast: the served model is a scripted one that reports fixed engine figures (10 tokens per reply,
9 of them decoded in 10 ms, and with speculative decoding 8 drafted / 6 accepted tokens), so every
number the bench derives from them is known in advance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import typer
from typer.testing import CliRunner

from hat.cli.bench_cmd import bench_app
from hat.models import ScriptedModel, register_model_spec
from hat.models.base import Generation, GenerationConfig, Message, ModelBackend
from hat.serve.bench import (
    EngineRecorder,
    bandwidth_bound,
    engine_summary,
    measure_bandwidth_gbps,
    speculative_rows,
)

REPLY = '<reply>{"reply": "Hello there, welcome to the stream!"}</reply>'


class _Drafting(ModelBackend):
    """A scripted reply with fixed engine figures; ``path`` is a 1 MB "weights" file."""

    def __init__(self, path: Path, speculative: int = 0) -> None:
        self.name = "bench-drafting"
        self.path = path
        self.speculative = speculative
        self._inner = ScriptedModel([REPLY], loop=True)

    def _generate(self, messages: list[Message], config: GenerationConfig, cache_key: str | None) -> Generation:
        text = self._inner.generate(messages, config).text
        drafts = (8, 6) if self.speculative else (0, 0)
        return Generation(text, 50, 10, 40, 0.011, 0.001, draft_tokens=drafts[0], accepted_tokens=drafts[1])


@pytest.fixture
def drafting_spec(tmp_path: Path) -> str:
    weights = tmp_path / "weights.gguf"
    weights.write_bytes(b"\0" * 1_000_000)
    register_model_spec(
        "bench-drafting", lambda argument, name, **kw: _Drafting(weights, **kw), takes_argument=False, replace=True
    )
    return "bench-drafting"


def _cli() -> typer.Typer:
    cli = typer.Typer()
    cli.add_typer(bench_app, name="bench")  # as hat.cli.main registers it
    return cli


def test_in_process_bench_writes_tables_6_and_7_plots_and_the_bound(drafting_spec, tmp_path):
    args = ["bench", "latency", "--model", drafting_spec, "--speculative", "0,4", "--concurrency", "1,2"]
    args += ["--n", "4", "--warmup", "1", "--bandwidth", "10", "--json", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(r["spec"], r["speculative"], r["engine"]) for r in report["runs"]] == [
        ("bench-drafting", 0, "_Drafting"),
        ("bench-drafting", 4, "_Drafting"),
    ]
    for run in report["runs"]:
        for row in run["levels"]:
            assert row["n"] == 4 and row["errors"] == 0 and row["under_15s"] == 1.0
            assert 0 < row["wall_p50_s"] <= row["wall_p95_s"]
            engine = row["engine"]
            assert engine["generations"] == 4  # one round per request; the warm-up is not counted
            assert engine["decode_tokens_per_s"] == pytest.approx(900, rel=1e-3)
            assert engine["acceptance"] == (0.75 if run["speculative"] else None)
    bound = report["bandwidth"]["runs"][0]
    assert report["bandwidth"]["gbps"] == 10.0 and bound["weight_bytes"] == 1_000_000
    assert bound["bound_tokens_per_s"] == pytest.approx(10_000) and bound["engine_share"] == pytest.approx(0.09)
    rows = report["speculative"]
    assert [(r["concurrency"], r["acceptance"], r["same_reply"]) for r in rows] == [(1, 0.75, 1.0), (2, 0.75, 1.0)]
    assert all(r["speedup_decode"] == 1.0 and r["speedup_wall_p50"] > 0 for r in rows)

    out = tmp_path / "out"
    saved = json.loads((out / "latency.json").read_text())
    assert saved["runs"][1]["levels"][1]["concurrency"] == 2 and saved["command"].startswith("hat ")
    md = (out / "latency.md").read_text()
    assert "## Table 6 layout" in md and "## Table 7 layout" in md and "75.0 %" in md
    assert "| bench-drafting (_Drafting, speculative 4) | 2 | 4 |" in md
    assert "Bandwidth 10.0 GB/s (given with --bandwidth)" in md and "9.0 %" in md
    if __import__("importlib").util.find_spec("matplotlib"):
        for name in ("latency_cdf_c1.png", "latency_cdf_c2.png", "latency_cdf.png"):
            assert (out / name).stat().st_size > 1000, name


def test_bench_refuses_mixed_or_impossible_options(drafting_spec):
    runner, cli = CliRunner(), _cli()
    both = runner.invoke(cli, ["bench", "latency", "--url", "http://x", "--model", drafting_spec])
    assert both.exit_code == 2 and "not both" in both.output
    alone = runner.invoke(cli, ["bench", "latency", "--speculative", "0,8"])
    assert alone.exit_code == 2 and "--speculative needs --model" in alone.output
    levels = runner.invoke(cli, ["bench", "latency", "--model", drafting_spec, "--concurrency", "0"])
    assert levels.exit_code == 2 and "--concurrency" in levels.output
    scripted = runner.invoke(cli, ["bench", "latency", "--model", "scripted:none.jsonl", "--bandwidth", "none"])
    assert scripted.exit_code == 2 and "none.jsonl" in scripted.output


def test_engine_recorder_is_the_model_to_the_server_and_keeps_each_generation():
    inner = ScriptedModel([REPLY, "<reply>{}</reply>"])
    inner.count_tokens = lambda text: 7  # type: ignore[attr-defined]
    recorder = EngineRecorder(inner)
    assert recorder.name == "scripted" and recorder.count_tokens("x") == 7 and recorder.remaining == 2
    stream = recorder.stream([{"role": "user", "content": "hi"}])
    assert "".join(stream) == REPLY and stream.generation is not None
    recorder.generate([{"role": "user", "content": "hi"}])
    kept = recorder.drain()
    assert [g.text for g in kept] == [REPLY, "<reply>{}</reply>"] and recorder.drain() == []


def test_engine_summary_bound_and_table_7_rows_by_hand():
    gens = [
        Generation("a", 100, 11, 90, 1.1, 0.1, draft_tokens=10, accepted_tokens=4),
        Generation("b", 100, 21, 10, 2.1, 0.1, draft_tokens=10, accepted_tokens=6),
        Generation("c", 100, 1, 0, 0.1, 0.1),  # one token: no decode rate
    ]
    summary = engine_summary(gens)
    assert summary["decode_tokens_per_s"] == 10.0 and summary["acceptance"] == 0.5
    assert summary["cached_prompt_share"] == round(100 / 300, 4) and summary["generations"] == 3
    level = {
        "concurrency": 1,
        "n": 2,
        "wall_p50_s": 4.0,
        "replies": ["x", "y"],
        "engine": {"decode_tokens_per_s": 10.0},
    }
    faster = {**level, "wall_p50_s": 2.0, "replies": ["x", "z"], "engine": {**summary, "decode_tokens_per_s": 15.0}}
    runs: list[dict[str, Any]] = [
        {"spec": "m", "speculative": 0, "engine": "llama.cpp", "levels": [level], "weight_bytes": 2_000_000_000},
        {"spec": "m", "speculative": 8, "engine": "llama.cpp", "levels": [faster], "weight_bytes": 2_000_000_000},
    ]
    (row,) = speculative_rows(runs)
    assert (row["speedup_wall_p50"], row["speedup_decode"], row["acceptance"], row["same_reply"]) == (
        2.0,
        1.5,
        0.5,
        0.5,
    )
    bound = bandwidth_bound(runs[0], 20.0)  # 20 GB/s over 2 GB of weights: 10 tokens/s at most
    assert bound["bound_tokens_per_s"] == 10.0 and bound["engine_share"] == 1.0
    assert bandwidth_bound(runs[0], None)["engine_share"] is None
    assert measure_bandwidth_gbps(size_mb=8, repeats=2) > 0
