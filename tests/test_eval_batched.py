"""Batched evaluation: the scheduler (:class:`BatchingModel`), the batched decoder of the transformers
backend, and ``run_cases(batch_size=…)``, which must give the episodes of one-at-a-time greedy runs.

The exactness tests use a tiny random Llama (hidden 32, 2 layers) with a byte-level BPE tokenizer
trained on the suite's own prompts, in float32, so a few episodes run in seconds. Its outputs are
gibberish, so episodes end in ``fallback`` after their retries; what matters is that every round's
raw output and token counts are the same batched and unbatched, including rows that stop early
(the random model ends its turn after 1 to 160 tokens). The scheduler tests use a fake backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from hat.errors import HatError, ModelError
from hat.eval.runner import run_cases
from hat.eval.suites import Case, build_cases
from hat.models.base import Generation, GenerationConfig, Message
from hat.models.batching import BatchingModel, supports_batching

# -- the scheduler, with a fake backend -----------------------------------------------------------


class _Echo:
    """Answers each conversation with its last message; records every batch it was given."""

    name = "echo"

    def __init__(self, fail_batches: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.keys: list[list[str | None]] = []
        self.fail_batches = fail_batches
        self.sessions = 0

    def reserve_sessions(self, n: int) -> None:
        self.sessions = n

    def generate(self, messages: Sequence[Message], config: GenerationConfig | None = None, **kw: Any) -> Generation:
        text = messages[-1]["content"]
        if text == "bad":
            raise ModelError("echo: bad prompt")
        return Generation(text=text)

    def generate_batch(
        self,
        conversations: Sequence[Sequence[Message]],
        config: GenerationConfig | None = None,
        *,
        cache_keys: Sequence[str | None] | None = None,
    ) -> list[Generation]:
        self.batches.append([c[-1]["content"] for c in conversations])
        self.keys.append(list(cache_keys or []))
        if self.fail_batches:
            raise ModelError("echo: the batch fell over")
        return [self.generate(c) for c in conversations]


def _workers(batcher: BatchingModel, plans: dict[int, list[str]], delays: dict[int, float] | None = None) -> dict:
    """One thread per tag; each asks for its prompts in turn, then retires. Returns replies/errors."""
    out: dict[int, list[str]] = {}

    def work(tag: int) -> None:
        try:
            with batcher.tagged(tag):
                for prompt in plans[tag]:
                    time.sleep((delays or {}).get(tag, 0.0))
                    try:
                        reply = batcher.generate([{"role": "user", "content": prompt}], cache_key="h").text
                    except HatError as exc:
                        reply = f"error: {exc}"
                    out.setdefault(tag, []).append(reply)
        finally:
            batcher.retire()

    threads = [threading.Thread(target=work, args=(tag,)) for tag in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive(), "a worker is stuck: the scheduler deadlocked"
    return out


def test_batches_hold_every_live_worker_in_tag_order() -> None:
    inner = _Echo()
    with BatchingModel(inner, workers=3) as batcher:
        plans = {2: ["c1", "c2"], 0: ["a1", "a2", "a3"], 1: ["b1"]}
        out = _workers(batcher, plans, delays={0: 0.05, 2: 0.02})
    assert out == {0: ["a1", "a2", "a3"], 1: ["b1"], 2: ["c1", "c2"]}
    # A batch waits for the slow worker; a retired worker is not waited for.
    assert inner.batches == [["a1", "b1", "c1"], ["a2", "c2"], ["a3"]]
    assert inner.keys[0] == ["h#0", "h#1", "h#2"]  # one KV session per conversation
    assert batcher.batches == [3, 2, 1] and inner.sessions == 6


def test_failed_batch_is_retried_row_by_row() -> None:
    inner = _Echo(fail_batches=True)
    with BatchingModel(inner, workers=2) as batcher:
        out = _workers(batcher, {0: ["fine"], 1: ["bad"]})
    assert out == {0: ["fine"], 1: ["error: echo: bad prompt"]}


def test_untagged_calls_and_closed_scheduler() -> None:
    inner = _Echo()
    batcher = BatchingModel(inner, workers=1)
    assert batcher.generate([{"role": "user", "content": "direct"}]).text == "direct"
    assert inner.batches == []  # not a worker: straight to the inner model
    batcher.close()
    with batcher.tagged(0), pytest.raises(ModelError, match="closed"):
        batcher.generate([{"role": "user", "content": "late"}])


def test_only_backends_with_session_batches_are_batched() -> None:
    from hat.models import ScriptedModel

    assert supports_batching(_Echo())
    assert not supports_batching(ScriptedModel(["x"]))
    with pytest.raises(TypeError):
        BatchingModel(ScriptedModel(["x"]), workers=2)


# -- run_cases with a fake batched backend ----------------------------------------------------------


class _Crashing(_Echo):
    """A backend whose batches raise a non-model error for one conversation (a bug, not a backend fault)."""

    def generate(self, messages: Sequence[Message], config: GenerationConfig | None = None, **kw: Any) -> Generation:
        if "refund" in messages[-1]["content"].lower():
            raise RuntimeError("boom")
        return Generation(text='<reply>{"reply": "Thanks for asking!"}</reply>')


def _fake_model(monkeypatch: pytest.MonkeyPatch, model: Any) -> None:
    monkeypatch.setattr("hat.eval.runner.load_model", lambda spec, **kw: model)


def test_run_cases_batched_reports_each_case_and_keeps_order(monkeypatch: pytest.MonkeyPatch) -> None:
    inner = _Echo()
    inner.generate = lambda messages, config=None, **kw: Generation(text='<reply>{"reply": "Hi there!"}</reply>')  # type: ignore[method-assign]
    _fake_model(monkeypatch, inner)
    cases = build_cases("t1", n=7, seed=2)
    seen: list[tuple[str, str]] = []
    result = run_cases(
        "t1",
        cases,
        "echo",
        batch_size=3,
        on_case=lambda c: seen.append((c.episode_id, threading.current_thread().name)),
    )
    assert [c.episode_id for c in result.cases] == [c.episode.episode_id for c in cases]
    assert sorted(e for e, _ in seen) == sorted(c.episode.episode_id for c in cases)
    assert {name for _, name in seen} == {threading.current_thread().name}  # progress in the caller's thread
    assert max(len(b) for b in inner.batches) == 3 and sum(len(b) for b in inner.batches) == 7
    assert all(c.trace.status == "ok" for c in result.cases)


def test_run_cases_raises_a_worker_error_without_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [c for c in build_cases("t1", n=40, seed=1)]
    assert any("refund" in " ".join(c.episode.comments).lower() for c in cases)
    _fake_model(monkeypatch, _Crashing())
    with pytest.raises(RuntimeError, match="boom"):
        run_cases("t1", cases, "crashing", batch_size=4)


# -- exactness on a tiny random Llama ---------------------------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread: None) -> None:
    """The tests below run tiny models: one torch thread (conftest's ``one_torch_thread``)."""


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return build_cases("t1", n=5, seed=4)


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory: pytest.TempPathFactory, cases: list[Case]) -> str:
    from conftest import save_tiny_llama
    from test_datagen import build_tokenizer

    oracle = run_cases("t1", cases, "oracle")
    texts = [m["content"] for c in oracle.cases for m in c.trace.to_messages()]
    tokenizer = build_tokenizer(texts, vocab_size=1500)
    folder = tmp_path_factory.mktemp("tiny-llama-eval")
    save_tiny_llama(folder, tokenizer)
    return f"hf:{folder}"


def _rounds(result: Any) -> list[list[tuple[Any, ...]]]:
    return [
        [(r.raw_output, r.action, r.prompt_tokens, r.completion_tokens) for r in c.trace.rounds] for c in result.cases
    ]


def test_batched_episodes_equal_unbatched_ones(tiny_spec: str, cases: list[Case]) -> None:
    one = run_cases("t1", cases, tiny_spec, batch_size=1)
    many = run_cases("t1", cases, tiny_spec, batch_size=3)
    assert [c.episode_id for c in many.cases] == [c.episode_id for c in one.cases]
    assert _rounds(many) == _rounds(one)
    assert [c.scores for c in many.cases] == [c.scores for c in one.cases]
    assert [c.trace.status for c in many.cases] == [c.trace.status for c in one.cases]
    lengths = {r.completion_tokens for c in one.cases for r in c.trace.rounds}
    assert len(lengths) > 3, "rows did not stop at different lengths"
    reused = [r.cached_tokens for c in many.cases for r in c.trace.rounds[1:]]
    assert reused and min(reused) > 0  # later rounds extend the episode's own KV session


def test_generate_batch_equals_generate(tiny_spec: str, cases: list[Case]) -> None:
    from hat.models import TransformersModel, load_model

    model = load_model(tiny_spec)
    assert isinstance(model, TransformersModel)
    chats = [c.trace.to_messages()[:2] for c in run_cases("t1", cases, "oracle").cases]
    chats.append([{"role": "user", "content": "hi"}])
    plain = GenerationConfig(max_new_tokens=40)
    texts = [model.generate(c, plain).text for c in chats]
    stop = next(t[3:5] for t in texts if len(t) > 8 and t[3:5].strip())  # a stop string some rows hit early
    seen = set()
    for config in (plain, GenerationConfig(max_new_tokens=40, stop=(stop,)), GenerationConfig(max_new_tokens=1)):
        single = [model.generate(c, config) for c in chats]
        batched = model.generate_batch(chats, config, cache_keys=[f"k{i}" for i in range(len(chats))])
        fields = [(g.text, g.prompt_tokens, g.completion_tokens, g.finish_reason) for g in single]
        assert [(g.text, g.prompt_tokens, g.completion_tokens, g.finish_reason) for g in batched] == fields
        seen |= {(g.finish_reason, g.completion_tokens < config.max_new_tokens) for g in single}
    assert {("stop", True), ("length", False)} <= seen  # rows ended early (stop string, end of turn) and at the budget
    # Each row kept its session: the next round re-encodes only what is new.
    follow = [
        [*c, {"role": "assistant", "content": g.text}, {"role": "tool", "content": "ok"}]
        for c, g in zip(chats, batched, strict=True)
    ]
    again = model.generate_batch(follow, plain, cache_keys=[f"k{i}" for i in range(len(chats))])
    assert [g.text for g in again] == [model.generate(c, plain).text for c in follow]
    assert all(g.cached_tokens >= b.prompt_tokens - 1 for g, b in zip(again, batched, strict=True))
    # Sampling is batched too: each row draws with its own seed exactly what it draws alone.
    sampled = GenerationConfig(max_new_tokens=8, temperature=1.5, seed=3)
    assert [g.text for g in model.generate_batch(chats[:2], sampled)] == [
        model.generate(c, sampled).text for c in chats[:2]
    ]


def test_sampled_rows_draw_alone_what_they_draw_in_a_batch(tiny_spec: str, cases: list[Case]) -> None:
    from hat.models import TransformersModel, load_model

    model = load_model(tiny_spec)
    assert isinstance(model, TransformersModel)
    chats = [c.trace.to_messages()[:2] for c in run_cases("t1", cases, "oracle").cases]
    config = GenerationConfig(max_new_tokens=30, temperature=1.0, top_p=0.9)
    seeds = [11, 12, 13, 11, 12]
    batched = model.generate_batch(chats, config, cache_keys=[f"s{i}" for i in range(len(chats))], seeds=seeds)
    alone = [model.generate(c, GenerationConfig(max_new_tokens=30, temperature=1.0, top_p=0.9, seed=s)) for c, s in
             zip(chats, seeds, strict=True)]  # fmt: skip
    fields = [(g.text, g.completion_tokens, g.finish_reason) for g in alone]
    assert [(g.text, g.completion_tokens, g.finish_reason) for g in batched] == fields
    # It samples (other seeds, other tokens) and a seed repeats its draw.
    other = model.generate_batch(chats, config, seeds=[21, 22, 23, 24, 25])
    assert [g.text for g in other] != [g.text for g in batched]
    assert [g.text for g in model.generate_batch(chats, config, seeds=seeds)] == [g.text for g in batched]
    with pytest.raises(ValueError, match="seeds"):
        model.generate_batch(chats, config, seeds=[1])


def test_sampling_warps_logits_as_transformers_does() -> None:
    import torch
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    from hat.models.transformers_batch import Sampling

    logits = torch.randn(200, generator=torch.Generator().manual_seed(0)) * 3
    for temperature, top_p in ((1.0, 1.0), (0.7, 0.9), (1.3, 0.5), (1.0, 1e-6)):
        ours = Sampling(temperature, top_p).warp(logits)
        scores = TemperatureLogitsWarper(temperature)(None, logits.unsqueeze(0).clone())
        if top_p < 1.0:
            scores = TopPLogitsWarper(top_p)(None, scores)
        assert torch.equal(torch.isinf(ours), torch.isinf(scores[0]))
        assert torch.allclose(ours[~torch.isinf(ours)], scores[0][~torch.isinf(scores[0])])
    assert int((~torch.isinf(Sampling(1.0, 1e-6).warp(logits))).sum()) == 1  # at least one token is kept


def test_map_batched_runs_items_together_in_order() -> None:
    from hat.models.batching import map_batched

    echo = _Echo()
    out = map_batched(echo, ["a", "b", "c"], lambda item, m: m.generate([{"role": "user", "content": item}]).text)
    assert out == ["a", "b", "c"]
    assert echo.batches == [["a", "b", "c"]]  # one batch of three, in item order
    with pytest.raises(ModelError, match="bad prompt"):
        map_batched(echo, ["x", "bad"], lambda item, m: m.generate([{"role": "user", "content": item}]).text)
    plain = object()  # no generate_batch: runs in this thread, one after another
    assert map_batched(plain, [1, 2], lambda item, m: (item, m is plain)) == [(1, True), (2, True)]  # type: ignore[arg-type]


def test_sampled_requests_with_their_own_seeds_share_a_batch() -> None:
    class _Seeded(_Echo):
        seeds: list[list[int]]

        def generate_batch(self, conversations: Any, config: Any = None, *, cache_keys: Any = None,
                           seeds: Any = None) -> list[Generation]:  # fmt: skip
            self.seeds.append(list(seeds))
            return super().generate_batch(conversations, config, cache_keys=cache_keys)

    seeded, plain = _Seeded(), _Echo()
    seeded.seeds = []
    for inner in (seeded, plain):
        batcher = BatchingModel(inner, workers=3)
        out: dict[int, str] = {}

        def work(i: int, batcher: BatchingModel = batcher, out: dict[int, str] = out) -> None:
            config = GenerationConfig(temperature=1.0, seed=100 + i)
            with batcher.tagged(i):
                out[i] = batcher.generate([{"role": "user", "content": f"m{i}"}], config).text
            batcher.retire()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        batcher.close()
        assert out == {0: "m0", 1: "m1", 2: "m2"}
    assert seeded.batches == [["m0", "m1", "m2"]] and seeded.seeds == [[100, 101, 102]]
    assert plain.batches == [["m0"], ["m1"], ["m2"]]  # without per-row seeds, each seed is its own batch


def test_eval_cli_batch_size_and_dtype(tiny_spec: str, tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from hat.cli.main import app

    runner = CliRunner()
    args = ["eval", "--suite", "t1", "--model", tiny_spec, "--n", "2", "--seed", "4", "--json", "--out", str(tmp_path)]
    result = runner.invoke(app, [*args, "--batch-size", "2", "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["n"] == 2
    report = next(p for p in tmp_path.glob("t1_*.json") if not p.name.endswith(("_cases.json", ".run.json")))
    assert json.loads(report.read_text())["options"]["batch_size"] == 2
    bad = runner.invoke(app, ["eval", "--suite", "t1", "--model", "oracle", "--n", "2", "--dtype", "bfloat16"])
    assert bad.exit_code == 2 and "local models" in bad.output


@pytest.mark.parametrize("bf16_cpu", [True, False])
def test_eval_cli_default_dtype_follows_the_cpu(
    tiny_spec: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, bf16_cpu: bool
) -> None:
    """``--dtype auto`` (the default): bfloat16, batch-invariant, one engine of 16 rows per core on a
    CPU with native bf16; float32 and 16 episodes in flight elsewhere."""
    import json

    from typer.testing import CliRunner

    from hat.cli.main import app

    monkeypatch.setattr("hat.cpu.cpu_supports_bf16", lambda: bf16_cpu)
    monkeypatch.setattr("hat.cpu.usable_cores", lambda: 2)
    args = ["eval", "--suite", "t1", "--model", tiny_spec, "--n", "40", "--seed", "4", "--json", "--out", str(tmp_path)]
    monkeypatch.setattr("hat.eval.runner.run_cases", _options_only)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = next(p for p in tmp_path.glob("t1_*.json") if not p.name.endswith(("_cases.json", ".run.json")))
    options = json.loads(report.read_text())["options"]
    if bf16_cpu:
        assert options["dtype"] == "bfloat16" and options["batch_invariant"] is True
        assert options["batch_size"] == 32  # 16 decode rows x 2 cores
    else:
        assert options["dtype"] is None and "batch_invariant" not in options and options["batch_size"] == 16


def _options_only(suite: str, cases: list[Case], model: str, **kw: Any) -> Any:
    """``run_cases`` that runs nothing: what the CLI asked for, with no case judged."""
    from hat.eval.runner import SuiteResult

    return SuiteResult(suite, model, len(cases), kw["seed"], options=kw["options"] | {"load": kw["load_options"]})


def test_bfloat16_runs_batched_and_keeps_case_order(tiny_spec: str, cases: list[Case]) -> None:
    """bf16 is not bit-exact between batched and unbatched shapes (rounding differs with the matmul
    shape, and a greedy tie can flip), so only the float32 path is held to identical outputs."""
    many = run_cases("t1", cases[:3], tiny_spec, batch_size=3, load_options={"dtype": "bfloat16"})
    assert [c.episode_id for c in many.cases] == [c.episode.episode_id for c in cases[:3]]
    assert all(r.trace.rounds for r in many.cases)


def test_bfloat16_batch_invariant_episodes_equal_unbatched_ones(tiny_spec: str, cases: list[Case]) -> None:
    """What ``hat eval --dtype bfloat16`` runs: batch-invariant decoding, so episodes decoded three
    at a time equal episodes decoded one by one, round by round."""
    load = {"dtype": "bfloat16", "batch_invariant": True}
    one = run_cases("t1", cases, tiny_spec, batch_size=1, load_options=load)
    many = run_cases("t1", cases, tiny_spec, batch_size=3, load_options=load)
    assert _rounds(many) == _rounds(one)
    assert [c.scores for c in many.cases] == [c.scores for c in one.cases]


def test_eval_cli_bfloat16_is_batch_invariant(tiny_spec: str, tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from hat.cli.main import app

    runner = CliRunner()
    args = ["eval", "--suite", "t1", "--model", tiny_spec, "--n", "2", "--seed", "4", "--json", "--out", str(tmp_path)]
    result = runner.invoke(app, [*args, "--dtype", "bfloat16"])
    assert result.exit_code == 0, result.output
    report = next(p for p in tmp_path.glob("t1_*.json") if not p.name.endswith(("_cases.json", ".run.json")))
    assert json.loads(report.read_text())["options"]["batch_invariant"] is True
    bad = runner.invoke(app, ["eval", "--suite", "t1", "--model", "oracle", "--n", "2", "--batch-invariant"])
    assert bad.exit_code == 2 and "local models" in bad.output


def test_stopper_matches_stop_strings_on_short_and_long_rows(tiny_spec: str) -> None:
    from transformers import AutoTokenizer, StopStringCriteria

    from hat.models.transformers_batch import BatchRow, Stopper

    tokenizer = AutoTokenizer.from_pretrained(tiny_spec.removeprefix("hf:"))
    reply = tokenizer("</reply>", add_special_tokens=False)["input_ids"]
    filler = tokenizer("the price is 19.9 " * 30, add_special_tokens=False)["input_ids"]
    stopper = Stopper({tokenizer.eos_token_id}, 50, StopStringCriteria(tokenizer, ["</reply>"]))
    rows = [
        BatchRow(filler[:1], None, 0, new_ids=list(reply)),  # shorter than the criterion's window
        BatchRow(filler, None, 0, new_ids=[*filler[:3], *reply]),
        BatchRow(filler, None, 0, new_ids=[*reply, *filler[:3]]),  # the stop string is not at the end
        BatchRow(filler, None, 0, new_ids=[tokenizer.eos_token_id]),
        BatchRow(filler, None, 0, new_ids=filler[:50]),  # the budget
    ]
    assert stopper(rows) == [True, True, False, True, True]
    assert stopper(rows[1:3]) == [True, False]  # the same verdicts when every row fills the window
