"""The fast path's defaults (hat.eval.run_options), shared by hat eval, hat evolve and hat compare."""

from __future__ import annotations

import pytest

import hat.cpu
from hat.errors import HatError
from hat.eval.run_options import RunOptions, is_local_weights, resolve_run_options


@pytest.mark.parametrize(
    ("spec", "local"),
    [
        ("smollm2", True),
        ("smollm2-hat", True),
        ("smollm2-hat?engine=transformers", True),  # options after "?" do not hide the model
        ("hf:/models/x", True),
        ("openai:http://localhost:8000/v1#m", False),
        ("llamacpp:smollm2", False),
        ("oracle", False),
    ],
)
def test_local_weights_are_recognised_with_their_options(spec: str, local: bool) -> None:
    assert is_local_weights(spec) is local


def test_auto_is_bf16_batch_invariant_on_a_bf16_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hat.cpu, "cpu_supports_bf16", lambda: True)
    monkeypatch.setattr(hat.cpu, "usable_cores", lambda: 2)
    run = resolve_run_options("smollm2-hat?engine=transformers", 100)
    assert run == RunOptions(batch_size=32, dtype="bfloat16", batch_invariant=True)
    assert run.load_options == {"dtype": "bfloat16", "batch_invariant": True}
    assert resolve_run_options("smollm2-hat", 5).batch_size == 5  # never more in flight than episodes


def test_auto_is_float32_batched_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hat.cpu, "cpu_supports_bf16", lambda: False)
    run = resolve_run_options("smollm2-hat", 100)
    assert run == RunOptions(batch_size=16, dtype=None, batch_invariant=False)
    assert run.load_options == {}
    # a server or a policy: no dtype, 16 in flight (run_cases runs policies one at a time anyway)
    assert resolve_run_options("oracle", 100) == RunOptions(batch_size=16)


def test_explicit_values_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hat.cpu, "cpu_supports_bf16", lambda: True)
    assert resolve_run_options("smollm2-hat", 100, dtype="float32", batch_size=1) == RunOptions(batch_size=1)
    assert resolve_run_options("smollm2", 100, batch_invariant=False).batch_size == 16


@pytest.mark.parametrize(
    ("spec", "kwargs", "message"),
    [
        ("oracle", {"dtype": "bfloat16"}, "--dtype applies to local models"),
        ("smollm2", {"dtype": "int3"}, "--dtype must be one of"),
        ("openai:http://x/v1#m", {"batch_invariant": True}, "--batch-invariant applies to local models"),
    ],
)
def test_combinations_that_cannot_work_are_refused(spec: str, kwargs: dict, message: str) -> None:
    with pytest.raises(HatError, match=message):
        resolve_run_options(spec, 10, **kwargs)


def test_the_gate_runs_both_versions_with_the_options_and_records_them() -> None:
    from hat.evolve.gate import evaluate
    from hat.harness.loader import resolve_harness_path

    folder = resolve_harness_path("livestream")
    result = evaluate(
        folder, folder, None, model="oracle", suites=("t1",), n=4, seed=0, batch_size=3, load_options={}
    )
    assert result.settings["batch_size"] == 3
    assert all(c.diff == 0 for c in result.cells)  # the same harness twice: every pair equal


@pytest.mark.parametrize(
    "argv",
    [
        ["evolve", "gate", "abc123", "--harness", "livestream", "--model", "oracle", "--dtype", "bfloat16"],
        ["compare", "pairwise", "--model", "oracle", "--baseline", "polite", "--out", "x", "--dtype", "bfloat16"],
        ["compare", "ab-sim", "--control", "polite", "--treatment", "oracle", "--dtype", "float16"],
    ],
)
def test_the_commands_refuse_a_dtype_no_system_can_take_before_running(argv: list[str]) -> None:
    from typer.testing import CliRunner

    from hat.cli.main import app

    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "--dtype applies to local models" in result.output
