"""The comparison tools: statistics, blind pairwise comparison (judges, LLM, rating page), A/B.

Everything runs on simulator policies and scripted models: no SmolLM2, a few seconds in all."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from hat.cli.main import app
from hat.compare.ab import ConversionModel, analyse_ab, read_visits, simulate_ab, simulate_visits
from hat.compare.pairwise import (
    Key,
    Pair,
    PairwiseLLMJudge,
    Rating,
    Side,
    System,
    judge_verdict,
    load_ratings,
    parse_verdict,
    ratings_path,
    read_key,
    read_pairs,
    run_pairwise,
    tally,
    write_pairs,
)
from hat.compare.stats import bootstrap_diff, cuped_adjust, cuped_theta, wilson_interval
from hat.errors import HatError
from hat.harness.loader import resolve_harness_path
from hat.models import load_model

runner = CliRunner()
POLITE = "Thanks so much for your comment! So happy to have you here."


# -- stats -----------------------------------------------------------------------------------------
def test_wilson_interval_matches_the_hand_computed_value() -> None:
    # 8/10 at 95 % (z = 1.959964): centre (0.8 + z²/20)/(1 + z²/10) = 0.716740, half-width
    # z/(1 + z²/10)·sqrt(0.016 + z²/400) = 0.226578; the textbook interval is [0.4902, 0.9433]
    i = wilson_interval(8, 10)
    assert i.estimate == 0.8
    assert i.low == pytest.approx(0.490162, abs=1e-6)
    assert i.high == pytest.approx(0.943318, abs=1e-6)
    # 0/10: the lower bound is 0 and the upper z²/(n + z²) = 0.277533, not the Wald interval's 0
    zero = wilson_interval(0, 10)
    assert (zero.low, zero.high) == (0.0, pytest.approx(0.277533, abs=1e-6))
    assert wilson_interval(0, 0).to_dict()["high"] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_cuped_on_a_toy_set_matches_the_hand_computation() -> None:
    y, x = [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 5.0]
    # cov(Y, X) / var(X) = 6.5 / 8.75 (sums of centred products; the n-1 cancels)
    assert cuped_theta(y, x) == pytest.approx(6.5 / 8.75)
    adjusted = cuped_adjust(y, x)
    assert adjusted == pytest.approx([2.3, 2.557143, 2.814286, 2.328571], abs=1e-6)
    assert sum(adjusted) / 4 == pytest.approx(2.5)  # the mean is kept
    assert np.var(adjusted) < np.var(y)
    assert cuped_theta(y, [3.0, 3.0, 3.0, 3.0]) == 0.0  # a constant covariate adjusts nothing


def test_bootstrap_is_deterministic_with_a_seed() -> None:
    rng = np.random.default_rng(1)
    c, t = rng.normal(10, 2, 300).tolist(), rng.normal(11, 2, 300).tolist()
    first, again, other = (bootstrap_diff(c, t, n_boot=500, seed=s) for s in (7, 7, 8))
    assert first == again
    assert first[0].low != other[0].low
    assert first[0].estimate == pytest.approx(np.mean(t) - np.mean(c))
    assert first[1].estimate == pytest.approx((np.mean(t) - np.mean(c)) / np.mean(c))


def test_cuped_bootstrap_estimate_is_the_difference_of_adjusted_means() -> None:
    """The bootstrap's sufficient-statistics path agrees with :func:`cuped_adjust` on pooled data."""
    yc, yt = [3.0, 5.0, 4.0, 9.0, 2.0], [6.0, 8.0, 5.0, 7.0]
    xc, xt = [1.0, 3.0, 2.0, 6.0, 0.5], [2.0, 4.0, 1.0, 3.0]
    adj = cuped_adjust(yc + yt, xc + xt)
    expected = np.mean(adj[5:]) - np.mean(adj[:5])
    interval, relative = bootstrap_diff(yc, yt, control_x=xc, treatment_x=xt, n_boot=200)
    assert interval.estimate == pytest.approx(expected)
    assert relative.estimate == pytest.approx(expected / np.mean(adj[:5]))
    assert interval.low < interval.estimate < interval.high


def test_bootstrap_intervals_cover_a_known_uplift_and_cuped_narrows_them() -> None:
    """60 synthetic experiments with true uplift 0.5 and a covariate with rho = 0.8: both intervals
    cover the truth about 95 % of the time; CUPED's are about sqrt(1 - 0.64) = 0.6 as wide."""
    rng = np.random.default_rng(0)
    covered = {"raw": 0, "cuped": 0}
    widths: dict[str, list[float]] = {"raw": [], "cuped": []}
    for rep in range(60):
        xc, xt = rng.normal(0, 1, 400), rng.normal(0, 1, 400)
        noise = np.sqrt(1 - 0.64)
        yc = 10 + 0.8 * xc + noise * rng.normal(0, 1, 400)
        yt = 10.5 + 0.8 * xt + noise * rng.normal(0, 1, 400)
        raw, _ = bootstrap_diff(yc, yt, n_boot=400, seed=rep)
        cuped, _ = bootstrap_diff(yc, yt, control_x=xc, treatment_x=xt, n_boot=400, seed=rep)
        for name, interval in (("raw", raw), ("cuped", cuped)):
            covered[name] += interval.contains(0.5)
            widths[name].append(interval.width)
    assert covered["raw"] >= 53 and covered["cuped"] >= 53  # >= 88 % of 60
    assert np.mean(widths["cuped"]) / np.mean(widths["raw"]) == pytest.approx(0.6, abs=0.08)


# -- A/B from logged visits -------------------------------------------------------------------------
def _write_visits(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(600):
        arm = "B" if i % 2 else "A"
        pre = float(rng.gamma(2.0, 5.0))
        rows.append(
            {"arm": arm, "gmv": round(pre * 0.9 + (2.0 if arm == "B" else 0.0) + rng.normal(0, 2), 3), "pre": pre}
        )
    jsonl = tmp_path / "visits.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    table = tmp_path / "visits.csv"
    with table.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["arm", "gmv", "pre"])
        writer.writeheader()
        writer.writerows(rows)
    return jsonl, table


def test_ab_reads_jsonl_and_csv_alike_and_cuped_cuts_the_variance(tmp_path: Path) -> None:
    jsonl, table = _write_visits(tmp_path)
    opts = {"control": "A", "treatment": "B", "metric": "gmv", "covariate": "pre", "n_boot": 500}
    a, b = analyse_ab(read_visits(jsonl), **opts), analyse_ab(read_visits(table), **opts)
    assert a.to_dict() == b.to_dict()
    assert a.n == {"A": 300, "B": 300}
    assert a.theta == pytest.approx(0.9, abs=0.1)
    assert a.cuped_uplift is not None and a.cuped_uplift.contains(2.0)
    assert a.variance_reduction is not None and a.variance_reduction > 0.8
    assert a.cuped_uplift.width < 0.5 * a.uplift.width
    plain = analyse_ab(read_visits(jsonl), control="A", treatment="B", metric="gmv", n_boot=500)
    assert plain.cuped_uplift is None and "cuped" not in plain.to_dict()


def test_ab_input_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arm": "control", "metric": 1}\n{"arm": "treatment"}\n', encoding="utf-8")
    with pytest.raises(HatError, match=r"bad.jsonl:2: no value in column 'metric'"):
        analyse_ab(read_visits(bad), source=str(bad))
    bad.write_text('{"arm": "control", "metric": "n/a"}\n', encoding="utf-8")
    with pytest.raises(HatError, match=r"bad.jsonl:1: column 'metric' must be a number"):
        analyse_ab(read_visits(bad), source=str(bad))
    bad.write_text('{"arm": "a", "metric": 1}\n{"arm": "a", "metric": 2}\n', encoding="utf-8")
    with pytest.raises(HatError, match=r"arm 'control' needs at least 2 visits.*arms found: a \(2\)"):
        analyse_ab(read_visits(bad))


# -- simulated A/B ----------------------------------------------------------------------------------
def test_simulated_ab_recovers_the_true_uplift_and_cuped_narrows_the_ci() -> None:
    """End to end: polite vs oracle answer the same 40 simulated comments through the runtime, the
    judges score them, 20,000 viewers convert by reply quality."""
    sim = simulate_ab("polite", "oracle", n_viewers=20000, n_comments=40, seed=0)
    result = analyse_ab(sim.numbered(), covariate="pre_gmv", n_boot=1000)
    assert sim.true_uplift > 0
    assert result.uplift.contains(sim.true_uplift)
    assert result.cuped_uplift is not None and result.cuped_uplift.contains(sim.true_uplift)
    assert result.cuped_uplift.width < result.uplift.width
    assert result.relative.contains(sim.true_relative)
    assert {r["arm"] for r in sim.rows} == {"control", "treatment"}
    # the same system in both arms: true uplift 0 and the interval says so
    null = simulate_ab("oracle", "oracle", n_viewers=5000, n_comments=20, seed=1)
    assert null.true_uplift == 0.0
    assert analyse_ab(null.numbered(), covariate="pre_gmv", n_boot=500).cuped_uplift.contains(0.0)  # type: ignore[union-attr]


def test_simulated_visits_cover_the_truth_across_seeds() -> None:
    qc, qt = [0.3, 0.5, 0.9, 0.2], [0.6, 0.7, 1.0, 0.4]
    hits = 0
    for seed in range(20):
        sim = simulate_visits(qc, qt, n_viewers=4000, seed=seed)
        hits += analyse_ab(sim.numbered(), covariate="pre_gmv", n_boot=300, seed=seed).cuped_uplift.contains(  # type: ignore[union-attr]
            sim.true_uplift
        )
    assert hits >= 16
    assert simulate_visits(qc, qt, n_viewers=50, seed=3).rows == simulate_visits(qc, qt, n_viewers=50, seed=3).rows
    stronger = simulate_visits(qc, qt, n_viewers=50, seed=3, model=ConversionModel(quality_effect=3.0))
    assert stronger.true_uplift > simulate_visits(qc, qt, n_viewers=50, seed=3).true_uplift


# -- pairwise: generation and the judges as raters --------------------------------------------------
@pytest.fixture(scope="module")
def oracle_vs_polite() -> tuple[list[Pair], Key, list[Rating]]:
    return run_pairwise(System("oracle"), System("polite"), n=40, seed=0)


def test_pairs_are_blinded_and_order_randomised(oracle_vs_polite, tmp_path: Path) -> None:
    pairs, key, _ = oracle_vs_polite
    pairs_file, key_file = write_pairs(tmp_path, pairs, key)
    text = pairs_file.read_text(encoding="utf-8")
    assert "oracle" not in text and "polite" not in text and "harness" not in text
    assert set(key.model_position.values()) == {"A", "B"}
    # the model's reply is where the key says, the baseline's in the other position
    for pair in pairs:
        baseline_side = pair.b if key.model_position[pair.pair_id] == "A" else pair.a
        assert baseline_side.reply == POLITE
    assert [p.episode_id for p in pairs] != sorted(p.episode_id for p in pairs)  # shuffled
    assert read_pairs(tmp_path) == pairs and read_key(key_file) == key
    again, _, _ = run_pairwise(System("oracle"), System("polite"), n=40, seed=0)
    assert again == pairs
    _, other_key, _ = run_pairwise(System("oracle"), System("polite"), n=40, seed=1)
    assert other_key.model_position != key.model_position


def test_the_judges_prefer_the_oracle_per_intent(oracle_vs_polite) -> None:
    pairs, key, ratings = oracle_vs_polite
    result = tally(pairs, key, ratings)
    o = result.overall
    assert result.rater == "judges" and result.n_rated == result.n_pairs == 40
    assert o.wins >= 30 and o.losses <= 2
    assert sum(t.n for t in result.by_intent.values()) == 40
    shares = result.to_dict()["overall"]
    assert shares["win"]["low"] == pytest.approx(wilson_interval(o.wins, 40).low, abs=1e-4)
    assert shares["win_of_decided"]["estimate"] == pytest.approx(o.wins / (o.wins + o.losses), abs=1e-4)


def test_the_same_system_on_two_harness_versions_ties(tmp_path: Path) -> None:
    """Two harness versions (the built-in and a copy of its folder) with the same policy: every
    pair is a tie, so the comparison measures the systems, not the blinding."""
    copy = tmp_path / "livestream-copy"
    shutil.copytree(resolve_harness_path("livestream"), copy)
    pairs, key, ratings = run_pairwise(System("oracle"), System("oracle", str(copy)), n=12, seed=2)
    assert key.baseline.label == f"oracle @ {copy}"
    assert tally(pairs, key, ratings).overall.ties == 12


def test_a_scripted_model_is_a_system(tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    script.write_text((json.dumps('<reply>{"reply": "Hello there!"}</reply>') + "\n") * 6, encoding="utf-8")
    pairs, key, _ = run_pairwise(System(f"scripted:{script}"), System("polite"), n=6, seed=0)
    model_replies = {p.side(key.model_position[p.pair_id]).reply for p in pairs}
    assert model_replies == {"Hello there!"}


def test_judge_verdict_counts_one_vote_per_dimension() -> None:
    dims = ("accuracy", "effectiveness", "tool_rationality", "skill_selection")
    a = dict.fromkeys(dims, 1.0)
    assert judge_verdict(a, a)[0] == "tie"
    assert judge_verdict(a, {**a, "accuracy": 0.0})[0] == "A"
    assert judge_verdict({**a, "accuracy": 0.0, "effectiveness": 0.5}, {**a, "skill_selection": 0.0})[0] == "B"
    mixed = judge_verdict({**a, "accuracy": 0.0}, {**a, "effectiveness": 0.0})
    assert mixed == ("tie", "A better on: effectiveness; B better on: accuracy")
    assert judge_verdict({**a, "cot_length": 0.0}, a)[0] == "tie"  # CoT length does not vote


def _toy(tmp_path: Path, comment: str = "how much?") -> tuple[list[Pair], Key]:
    pairs = [
        Pair(
            f"p{i}",
            f"e{i}",
            "product_qa" if i < 3 else "faq",
            (comment,),
            (),
            ("$10",),
            Side("good $10", "ok"),
            Side("meh", "ok"),
        )
        for i in range(4)
    ]
    key = Key(System("m"), System("b"), "t1", 0, {"p0": "A", "p1": "B", "p2": "A", "p3": "B"})
    write_pairs(tmp_path, pairs, key)
    return pairs, key


def test_tally_unblinds_through_the_key_and_keeps_the_last_rating(tmp_path: Path) -> None:
    pairs, key = _toy(tmp_path)
    ratings = [
        Rating("p0", "r", "B"),  # replaced below
        Rating("p0", "r", "A"),  # model is A: win
        Rating("p1", "r", "A"),  # model is B: loss
        Rating("p2", "r", "tie"),
        Rating("p3", "r", "B"),  # model is B: win
    ]
    result = tally(pairs, key, ratings)
    assert (result.overall.wins, result.overall.ties, result.overall.losses) == (2, 1, 1)
    assert result.by_intent["faq"].wins == 1 and result.by_intent["product_qa"].n == 3
    only_ties = tally(pairs, key, [Rating("p0", "r", "tie")]).to_dict()
    assert only_ties["overall"]["win_of_decided"] is None and only_ties["overall"]["tie"]["estimate"] == 1.0
    with pytest.raises(HatError, match="not in this comparison"):
        tally(pairs, key, [Rating("p9", "r", "A")])


# -- the LLM judge -----------------------------------------------------------------------------------
def _judge_transport(prefer_not: str, calls: list[dict]) -> httpx.MockTransport:
    """An OpenAI-compatible server whose judge picks the reply that is not ``prefer_not``."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        user = body["messages"][-1]["content"]
        one = user.split("=== Reply 1 ===")[1].split("=== Reply 2 ===")[0]
        two = user.split("=== Reply 2 ===")[1]
        verdict = "tie" if (prefer_not in one) == (prefer_not in two) else "2" if prefer_not in one else "1"
        text = f"<think>comparing</think>Verdict: {verdict}\nThe other reply ignores the question."
        return httpx.Response(200, json={"choices": [{"message": {"content": text}}], "usage": {}})

    return httpx.MockTransport(handler)


def test_llm_judge_over_an_openai_endpoint_rates_blind_pairs(oracle_vs_polite) -> None:
    pairs, key, _ = oracle_vs_polite
    calls: list[dict] = []
    model = load_model("openai:http://judge.test/v1#grader", transport=_judge_transport(POLITE, calls))
    judge = PairwiseLLMJudge(model)
    ratings = [r for p in pairs if (r := judge(p)) is not None]
    assert len(calls) == 2 * len(pairs)  # both orders
    assert calls[0]["model"] == "grader" and calls[0]["temperature"] == 0.0
    result = tally(pairs, key, ratings)
    assert result.rater == "llm"
    assert result.overall.wins == 40  # every oracle reply differs from the polite template


def test_llm_judge_swap_turns_position_bias_into_ties(oracle_vs_polite) -> None:
    pairs, _, _ = oracle_vs_polite

    def always_first(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "Verdict: 1"}}]})

    model = load_model("openai:http://judge.test#g", transport=httpx.MockTransport(always_first))
    assert {PairwiseLLMJudge(model)(p).verdict for p in pairs[:5]} == {"tie"}  # type: ignore[union-attr]
    assert {PairwiseLLMJudge(model, swap=False)(p).verdict for p in pairs[:5]} == {"A"}  # type: ignore[union-attr]


def test_parse_verdict() -> None:
    assert parse_verdict("Verdict: 2\nbecause") == "2"
    assert parse_verdict("<think>Verdict: 1?</think>**Verdict:** tie") == "tie"
    assert parse_verdict("verdict is reply 1") == "1"
    assert parse_verdict("2") == "2"
    assert parse_verdict("Both are fine. Verdict: both") == "tie"
    assert parse_verdict("I like the first one") is None


# -- the rating page ---------------------------------------------------------------------------------
def _client(tmp_path: Path, rater: str = "ann"):
    from fastapi.testclient import TestClient

    from hat.compare.rate import create_rating_app

    return TestClient(create_rating_app(tmp_path, rater=rater), base_url="http://127.0.0.1")


def _token(html: str) -> str:
    match = re.search(r'name="token" value="([^"]+)"', html)
    assert match
    return match.group(1)


def test_rating_page_records_choices_blind_and_escaped(tmp_path: Path) -> None:
    pairs, key = _toy(tmp_path, comment="<script>alert(1)</script> price?")
    client = _client(tmp_path)
    page = client.get("/")
    assert page.status_code == 200 and 'value="p0"' in page.text
    assert "<script>" not in page.text and "&lt;script&gt;" in page.text
    assert "good $10" in page.text and "meh" in page.text
    assert "System" not in page.text and '"m"' not in page.text  # neither the key nor the systems
    token = _token(page.text)
    assert client.post("/rate", data={"pair_id": "p0", "verdict": "A", "token": "forged"}).status_code == 403
    assert client.post("/rate", data={"pair_id": "p0", "verdict": "C", "token": token}).status_code == 422
    done = client.post("/rate", data={"pair_id": "p0", "verdict": "A", "token": token}, follow_redirects=False)
    assert done.status_code == 303
    assert 'value="p1"' in client.get("/").text  # on to the next unrated pair
    assert load_ratings(ratings_path(tmp_path, "ann")) == {"ann": [Rating("p0", "ann", "A", "rating page")]}
    for pid, verdict in (("p1", "A"), ("p2", "tie"), ("p3", "B")):
        client.post("/rate", data={"pair_id": pid, "verdict": verdict, "token": token})
    assert "All pairs rated" in client.get("/").text
    result = tally(pairs, key, load_ratings(ratings_path(tmp_path, "ann"))["ann"])
    assert (result.overall.wins, result.overall.ties, result.overall.losses) == (2, 1, 1)
    # a restarted server resumes; a foreign Host header is refused
    again = _client(tmp_path)
    assert "4 of 4 rated" in again.get("/").text
    assert again.get("/", headers={"host": "evil.example"}).status_code == 400
    assert again.get("/pair/p2").status_code == 200 and again.get("/pair/nope").status_code == 404


# -- CLI ---------------------------------------------------------------------------------------------
def test_cli_pairwise_judge_and_tally(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    res = runner.invoke(
        app,
        ["compare", "pairwise", "--model", "oracle", "--baseline", "polite", "--n", "12", "--out", str(out), "--json"],
    )
    assert res.exit_code == 0, res.output
    judges = json.loads(res.stdout.strip().splitlines()[-1])
    assert judges["rater"] == "judges" and judges["n_rated"] == 12 and judges["overall"]["wins"] >= 9
    assert {p.name for p in out.iterdir()} == {"pairs.jsonl", "key.json", "ratings-judges.jsonl"}
    again = runner.invoke(app, ["compare", "pairwise", "--model", "oracle", "--baseline", "polite", "--out", str(out)])
    assert again.exit_code == 2 and "choose another --out" in again.output
    script = tmp_path / "judge.jsonl"
    script.write_text(json.dumps("Verdict: tie") + "\n", encoding="utf-8")
    judge = ["compare", "judge", str(out), "--judge-model", f"scripted:{script}", "--no-swap", "--json"]
    res = runner.invoke(app, judge)  # the script runs out after one pair: a backend error
    assert res.exit_code == 5 and "ran out of outputs" in res.output
    assert len(load_ratings(ratings_path(out, "llm"))["llm"]) == 1  # kept
    script.write_text((json.dumps("Verdict: 2") + "\n") * 11, encoding="utf-8")
    res = runner.invoke(app, judge)  # resumes with the 11 pairs left
    assert res.exit_code == 0, res.output
    llm = json.loads(res.stdout.strip().splitlines()[-1])
    assert llm["n_rated"] == 12 and llm["overall"]["ties"] == 1
    res = runner.invoke(app, ["compare", "tally", str(out), "--json"])
    rows = [json.loads(line) for line in res.stdout.strip().splitlines()]
    assert [r["rater"] for r in rows] == ["judges", "llm"]


def test_cli_ab_and_ab_sim(tmp_path: Path) -> None:
    _, table = _write_visits(tmp_path)
    res = runner.invoke(
        app,
        [
            "compare",
            "ab",
            "--data",
            str(table),
            "--metric",
            "gmv",
            "--covariate",
            "pre",
            "--control",
            "A",
            "--treatment",
            "B",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["cuped"]["ci_width_ratio"] < 0.5 and out["uplift"]["low"] < 2.0 < out["uplift"]["high"] + 1
    missing = runner.invoke(app, ["compare", "ab", "--data", str(table), "--metric", "spend"])
    assert missing.exit_code == 2 and "visits.csv:2: no value in column 'spend'" in missing.output
    visits = tmp_path / "sim.jsonl"
    res = runner.invoke(
        app,
        [
            "compare",
            "ab-sim",
            "--comments",
            "20",
            "--viewers",
            "4000",
            "--n-boot",
            "300",
            "--out",
            str(visits),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    sim = json.loads(res.stdout)
    assert sim["systems"] == {"control": "polite", "treatment": "oracle"} and sim["true_uplift"]["absolute"] > 0
    assert math.isfinite(sim["cuped"]["theta"]) and len(read_visits(visits)) == 4000
