"""``hat compare …``: blind pairwise comparison (pairwise, judge, rate, tally) and A/B analysis
(ab, ab-sim). Thin shells over :mod:`hat.compare`; heavy imports (numpy, FastAPI, uvicorn) happen
inside the command that needs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from hat.cli.common import (
    RUN_BATCH_HELP,
    RUN_DTYPE_HELP,
    StepProgress,
    error_exit,
    fail,
    run_options_or_exit,
    simulator_policies,
    stdout_to_stderr,
)
from hat.errors import HatError

app = typer.Typer(help="Blind pairwise comparison of two systems, and A/B analysis.", no_args_is_help=True)
err = Console(stderr=True)
out = Console()

SYSTEM_HELP = "Model spec (smollm2-hat, smollm2, hf:…, openai:…, scripted:…) or simulator policy (oracle, polite, …)."
SUITES = ("t1", "t2", "t3-tool", "t3-prompt")


def _check_suite(suite: str) -> None:
    if suite not in SUITES:
        fail(f"unknown suite {suite!r}; pairwise and ab-sim run on the simulated suites: {', '.join(SUITES)}")


def _pct(share: dict[str, float] | None) -> str:
    if share is None:
        return "-"
    return f"{100 * share['estimate']:.1f} [{100 * share['low']:.1f}, {100 * share['high']:.1f}]"


def _print_tally(result: dict[str, Any]) -> None:
    """Counts and the two win shares with their Wilson intervals (tie and loss intervals: --json)."""
    o = result["overall"]
    title = (
        f"{result['model']} vs {result['baseline']} · rater {result['rater']} · "
        f"{result['n_rated']} of {result['n_pairs']} pairs rated"
    )
    table = Table(title=title)
    for col in ("intent", "n", "W/T/L", "win % [95% CI]", "win % of decided"):
        table.add_column(col, justify="left" if col == "intent" else "right")
    for intent, t in [("all", o), *result["by_intent"].items()]:
        wtl = f"{t['wins']}/{t['ties']}/{t['losses']}"
        table.add_row(intent, str(t["n"]), wtl, _pct(t["win"]), _pct(t["win_of_decided"]))
    out.print(table)


@app.command("pairwise")
def pairwise(
    model: str = typer.Option(..., "--model", help="The system under test. " + SYSTEM_HELP),
    baseline: str = typer.Option(..., "--baseline", help="The system it is compared with. " + SYSTEM_HELP),
    harness: str = typer.Option("livestream", help="The model's harness (folder or built-in name)."),
    baseline_harness: str | None = typer.Option(None, help="The baseline's harness (default: --harness)."),
    suite: str = typer.Option("t1", help="Simulated suite the comments come from: " + " | ".join(SUITES)),
    n: int = typer.Option(100, "--n", min=1, help="Comments (pairs)."),
    seed: int = typer.Option(0, help="Seed of the comments, the policies and the blinding."),
    out_dir: Path = typer.Option(..., "--out", help="Folder for pairs.jsonl, key.json and ratings-judges.jsonl."),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help=RUN_BATCH_HELP),
    dtype: str = typer.Option("auto", help=RUN_DTYPE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the judges' tally as one JSON object."),
) -> None:
    """Run both systems on the same comments, write blinded order-randomised pairs (pairs.jsonl for
    raters, key.json kept apart) and rate them with the judges: each task dimension votes for the
    side that scores higher; more votes wins, equal votes tie. Other raters: hat compare judge
    (an LLM), hat compare rate (a person); hat compare tally unblinds any of them."""
    from hat.compare.pairwise import System, ratings_path, run_pairwise, tally, write_pairs, write_ratings

    _check_suite(suite)
    simulator_policies()
    if (out_dir / "pairs.jsonl").exists():
        fail(f"{out_dir / 'pairs.jsonl'} exists; choose another --out folder (ratings there belong to those pairs)")
    systems = System(model, harness), System(baseline, baseline_harness or harness)
    runs = run_options_or_exit((model, baseline), n, dtype, batch_size)
    try:
        progress = StepProgress(f"pairwise {systems[0].label} vs {systems[1].label}", 2 * n)
        with progress, stdout_to_stderr(as_json):
            pairs, key, ratings = run_pairwise(
                *systems, suite=suite, n=n, seed=seed, run_options=runs, on_case=lambda _: progress.advance()
            )
    except (HatError, KeyError) as exc:
        fail(exc.args[0] if isinstance(exc, KeyError) else exc, error_exit(exc))
    pairs_file, key_file = write_pairs(out_dir, pairs, key)
    write_ratings(ratings_path(out_dir, "judges"), ratings)
    err.print(f"wrote {pairs_file} (for raters) and {key_file} (keep it from them)", markup=False, soft_wrap=True)
    result = tally(pairs, key, ratings, rater="judges").to_dict()
    print(json.dumps(result)) if as_json else _print_tally(result)


@app.command("judge")
def judge(
    folder: Path = typer.Argument(..., help="Folder written by hat compare pairwise."),
    judge_model: str = typer.Option(..., "--judge-model", help="Judge model spec, e.g. openai:<base_url>#<model>."),
    rater: str = typer.Option("llm", help="Rater name (ratings-<rater>.jsonl)."),
    swap: bool = typer.Option(True, "--swap/--no-swap", help="Ask in both orders; disagreeing answers are a tie."),
    as_json: bool = typer.Option(False, "--json", help="Print the tally as one JSON object."),
) -> None:
    """Rate the pairs with an LLM judge. Resumable: pairs this rater already rated are skipped."""
    from hat.compare.pairwise import (
        PairwiseLLMJudge,
        load_ratings,
        ratings_path,
        read_key,
        read_pairs,
        tally,
        write_ratings,
    )
    from hat.models import load_model

    try:
        pairs, key = read_pairs(folder), read_key(folder)
        path = ratings_path(folder, rater)
        done = {r.pair_id for r in load_ratings(path).get(rater, [])} if path.is_file() else set()
        rate = PairwiseLLMJudge(load_model(judge_model), name=rater, swap=swap)
        todo = [p for p in pairs if p.pair_id not in done]
        unread = 0
        with StepProgress(f"judging with {judge_model}", len(todo)) as update:
            for k, pair in enumerate(todo, 1):
                rating = rate(pair)
                unread += rating is None
                if rating is not None:
                    write_ratings(path, [rating])
                update(k)
        ratings = load_ratings(path).get(rater, []) if path.is_file() else []
    except HatError as exc:
        fail(exc, error_exit(exc))
    if unread:
        err.print(f"note: {unread} pair(s) got no readable verdict; rerun to retry them", markup=False)
    result = tally(pairs, key, ratings, rater=rater).to_dict()
    print(json.dumps(result)) if as_json else _print_tally(result)


@app.command("rate")
def rate(
    folder: Path = typer.Argument(..., help="Folder written by hat compare pairwise."),
    rater: str = typer.Option("human", help="Your name (ratings-<rater>.jsonl)."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (loopback: only this machine)."),
    port: int = typer.Option(8765, help="Port."),
) -> None:
    """Serve the blind rating page: pick A, B or tie for each pair; stop with Ctrl-C."""
    try:
        import uvicorn

        from hat.compare.rate import create_rating_app

        app_ = create_rating_app(folder, rater=rater)
    except ImportError as exc:
        fail(f"the rating page needs FastAPI and uvicorn ({exc.name} is missing): pip install 'hat-agent[serve]'")
    except HatError as exc:
        fail(exc)
    err.print(f"rating page on http://{host}:{port}/ (rater {rater})", markup=False)
    uvicorn.run(app_, host=host, port=port, log_level="warning")


@app.command("tally")
def tally_command(
    folder: Path = typer.Argument(..., help="Folder written by hat compare pairwise."),
    rater: str | None = typer.Option(None, help="Only this rater (default: every ratings-*.jsonl)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per rater, one per line."),
) -> None:
    """Unblind the ratings: wins, ties, losses of --model against --baseline with Wilson 95 %
    intervals, overall and per intent."""
    from hat.compare.pairwise import load_ratings, read_key, read_pairs, tally

    try:
        pairs, key = read_pairs(folder), read_key(folder)
        by_rater: dict[str, Any] = {}
        for path in sorted(Path(folder).glob("ratings-*.jsonl")):
            for name, ratings in load_ratings(path).items():
                by_rater.setdefault(name, []).extend(ratings)
    except HatError as exc:
        fail(exc)
    names = [rater] if rater else sorted(by_rater)
    if not names or (rater and rater not in by_rater):
        who = f" by {rater!r}" if rater else ""
        fail(f"no ratings{who} in {folder}; raters there: {', '.join(by_rater) or 'none'}")
    for name in names:
        result = tally(pairs, key, by_rater[name], rater=name).to_dict()
        print(json.dumps(result)) if as_json else _print_tally(result)


def _print_ab(result: dict[str, Any], truth: dict[str, float] | None = None) -> None:
    def row(label: str, i: dict[str, float], scale: float = 1.0, unit: str = "") -> tuple[str, str, str]:
        return (
            label,
            f"{scale * i['estimate']:+.4g}{unit}",
            f"[{scale * i['low']:+.4g}, {scale * i['high']:+.4g}]{unit}",
        )

    n, means = result["n"], result["means"]
    c, t = result["control"], result["treatment"]
    names = result.get("systems", {})
    for arm in (t, c):
        shown = f"{arm} ({names[arm]})" if arm in names else arm
        out.print(f"{shown}: n {n[arm]}, mean {means[arm]:.4g}", markup=False, highlight=False)
    table = Table()
    for col in ("uplift", "estimate", "95% bootstrap CI"):
        table.add_column(col, justify="left" if col == "uplift" else "right")
    table.add_row(*row("absolute", result["uplift"]))
    table.add_row(*row("relative", result["relative_uplift"], 100, "%"))
    cuped = result.get("cuped")
    if cuped:
        table.add_row(*row("absolute, CUPED", cuped["uplift"]))
        table.add_row(*row("relative, CUPED", cuped["relative_uplift"], 100, "%"))
    out.print(table)
    if cuped:
        out.print(
            f"CUPED: theta {cuped['theta']:.4g}, variance of the uplift -{100 * cuped['variance_reduction']:.1f}%, "
            f"CI width x{cuped['ci_width_ratio']}"
        )
    if truth:
        out.print(f"true uplift (simulation): {truth['absolute']:+.4g} ({100 * truth['relative']:+.2f}%)")


@app.command("ab")
def ab(
    data: Path = typer.Option(..., "--data", help="Visits: JSONL, or CSV/TSV with a header row."),
    metric: str = typer.Option("metric", help="Column of the outcome (GMV, conversion 0/1, …)."),
    arm: str = typer.Option("arm", help="Column naming each visit's arm."),
    covariate: str | None = typer.Option(None, help="Column of the pre-period covariate (enables CUPED)."),
    control: str = typer.Option("control", help="Name of the control arm."),
    treatment: str = typer.Option("treatment", help="Name of the treatment arm."),
    n_boot: int = typer.Option(2000, "--n-boot", min=100, help="Bootstrap replicates."),
    seed: int = typer.Option(0, help="Seed of the bootstrap."),
    level: float = typer.Option(0.95, min=0.5, max=0.999, help="Confidence level."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Uplift of treatment over control from logged visits: absolute and relative, with percentile-
    bootstrap intervals; with --covariate also CUPED (theta = cov(Y,X)/var(X))."""
    from hat.compare.ab import analyse_ab, read_visits

    try:
        rows = read_visits(data)
        result = analyse_ab(
            rows,
            control=control,
            treatment=treatment,
            arm=arm,
            metric=metric,
            covariate=covariate,
            n_boot=n_boot,
            seed=seed,
            level=level,
            source=str(data),
        ).to_dict()
    except HatError as exc:
        fail(exc, error_exit(exc))
    print(json.dumps(result)) if as_json else _print_ab(result)


@app.command("ab-sim")
def ab_sim(
    control: str = typer.Option("polite", help="Control system. " + SYSTEM_HELP),
    treatment: str = typer.Option("oracle", help="Treatment system. " + SYSTEM_HELP),
    control_harness: str = typer.Option("livestream", help="Control's harness."),
    treatment_harness: str = typer.Option("livestream", help="Treatment's harness."),
    suite: str = typer.Option("t1", help="Suite the comment pool comes from: " + " | ".join(SUITES)),
    comments: int = typer.Option(200, min=1, help="Comments in the pool (each system answers each once)."),
    viewers: int = typer.Option(20000, min=4, help="Simulated viewers (one visit each)."),
    seed: int = typer.Option(0, help="Seed of comments, viewers and bootstrap."),
    n_boot: int = typer.Option(2000, "--n-boot", min=100, help="Bootstrap replicates."),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help=RUN_BATCH_HELP),
    dtype: str = typer.Option("auto", help=RUN_DTYPE_HELP),
    out_file: Path | None = typer.Option(None, "--out", help="Write the visits here (JSONL; hat compare ab reads it)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """A simulated A/B: both systems answer a pool of simulated comments, the judges score every
    reply, and viewers convert with a probability driven by the quality of the reply they got
    (with a pre-period covariate per viewer). Prints the estimated uplift, with and without CUPED,
    beside the population's true uplift."""
    from hat.compare.ab import analyse_ab, simulate_ab

    _check_suite(suite)
    simulator_policies()
    runs = run_options_or_exit((control, treatment), comments, dtype, batch_size)
    try:
        with stdout_to_stderr(as_json):
            sim = simulate_ab(
                control,
                treatment,
                n_viewers=viewers,
                n_comments=comments,
                seed=seed,
                suite=suite,
                control_harness=control_harness,
                treatment_harness=treatment_harness,
                run_options=runs,
            )
        result = analyse_ab(sim.numbered(), covariate="pre_gmv", n_boot=n_boot, seed=seed, source="simulation")
    except HatError as exc:
        fail(exc, error_exit(exc))
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text("".join(json.dumps(r) + "\n" for r in sim.rows), encoding="utf-8")
        err.print(f"wrote {len(sim.rows)} visits to {out_file}", markup=False, soft_wrap=True)
    summary = result.to_dict()
    truth = {"absolute": sim.true_uplift, "relative": sim.true_relative}
    summary["systems"] = {"control": control, "treatment": treatment}
    summary["true_uplift"] = {k: round(v, 6) for k, v in truth.items()}
    summary["true_in_ci"] = {
        "raw": result.uplift.contains(sim.true_uplift),
        "cuped": bool(result.cuped_uplift and result.cuped_uplift.contains(sim.true_uplift)),
    }
    print(json.dumps(summary)) if as_json else _print_ab(summary, truth)
