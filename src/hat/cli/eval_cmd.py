"""``hat eval`` and ``hat sim …``: simulated episodes and the evaluation suites."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from hat.cli.common import progress_columns
from hat.errors import HatError

sim_app = typer.Typer(help="The simulated live room.", no_args_is_help=True)
err = Console(stderr=True)
out = Console()


@sim_app.command("episodes")
def episodes(
    n: int = typer.Option(100, "--n", min=1, help="How many episodes."),
    seed: int = typer.Option(0, help="Seed (same seed → byte-identical episodes)."),
    out_file: Path = typer.Option(..., "--out", help="JSONL file to write."),
    mode: str = typer.Option("single", help="single | multi (several comments per request)."),
    fault_rate: float = typer.Option(0.0, min=0.0, max=1.0, help="Per-call tool fault probability."),
) -> None:
    """Generate simulated viewer episodes with gold labels."""
    from hat.env.episode import INTENT_MIX, episodes_hash, write_episodes
    from hat.env.viewers import generate_episodes

    if mode not in ("single", "multi"):
        err.print("error: --mode must be single or multi")
        raise typer.Exit(2)
    eps = generate_episodes(n, seed, mode=mode, fault_rate=fault_rate)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    write_episodes(out_file, eps)
    counts = {k: 0 for k in INTENT_MIX}
    for ep in eps:
        counts[ep.gold.intent] = counts.get(ep.gold.intent, 0) + 1
    mix = ", ".join(f"{k} {100 * v / n:.1f}%" for k, v in counts.items())
    err.print(f"wrote {n} episodes to {out_file} (sha256 {episodes_hash(eps)[:16]}); intent mix: {mix}")


LOCAL_SPECS = ("smollm2", "smollm2-hat", "hf")
SUITE_HELP = "Suite: t1 | t2 | t3-tool | t3-prompt (simulated room) or ifeval | rotbench | bfcl (external data)."


def eval_command(
    suite: str = typer.Option("t1", help=SUITE_HELP),
    model: str = typer.Option(..., help="Model spec (smollm2, hf:…, openai:…, scripted:…) or policy (oracle, …)."),
    n: int = typer.Option(100, "--n", min=1, help="Episodes (or prompts) to evaluate."),
    seed: int = typer.Option(0, help="Seed of the episodes and policies."),
    harness: str = typer.Option("livestream", help="Production harness (folder or built-in name)."),
    fault_rate: float = typer.Option(0.0, min=0.0, max=1.0, help="Tool fault probability per call."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON summary object on stdout."),
    out_dir: Path | None = typer.Option(None, "--out", help="Write <suite>_<model>.md/.json/_cases.jsonl here."),
    data: str | None = typer.Option(None, help="External data path (ifeval: input_data.jsonl; rotbench/bfcl: folder)."),
    hsa: bool = typer.Option(False, "--hsa", help="rotbench/bfcl: show tools under held-out HSA names."),
    max_new_tokens: int = typer.Option(256, help="External suites: generation budget per item."),
    batch_size: int = typer.Option(
        16,
        "--batch-size",
        min=1,
        help="Episodes in flight at once. Local models (smollm2, smollm2-hat, hf:) decode their rounds "
        "together, with the outputs of one-at-a-time greedy decoding; openai: gets concurrent requests; "
        "1 runs episodes one after another (policies, scripted: and llamacpp: always do).",
    ),
    dtype: str | None = typer.Option(
        None,
        help="Local models (smollm2, smollm2-hat, hf:): weight dtype, default float32 on CPU. bfloat16 is "
        "~2x faster on CPUs with AVX-512 BF16, but its greedy outputs differ from float32's and can "
        "differ between batch sizes.",
    ),
) -> None:
    """Evaluate a model on a suite: per-dimension scores, overall score, per-intent breakdown, worst failures."""
    from hat.eval.external_suites import EXTERNAL_SUITES
    from hat.eval.report import write_report
    from hat.eval.runner import CaseResult, run_cases
    from hat.eval.suites import build_cases

    if suite in EXTERNAL_SUITES:
        _external(suite, model, data, n, hsa, out_dir, max_new_tokens, as_json)
        return
    if dtype is not None and model.partition(":")[0] not in LOCAL_SPECS:
        err.print(f"error: --dtype applies to local models ({', '.join(LOCAL_SPECS)}), not {model!r}", markup=False)
        raise typer.Exit(2)
    try:
        cases = build_cases(suite, n=n, seed=seed, harness=harness, fault_rate=fault_rate)
    except (KeyError, HatError) as exc:
        err.print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", markup=False)
        raise typer.Exit(2) from exc
    columns = progress_columns()
    command = "hat " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    partial = _partial_log(out_dir, suite, model)
    try:
        with Progress(*columns, console=err, transient=True) as progress:
            task = progress.add_task(f"{suite} · {model}", total=len(cases))

            def on_case(case: CaseResult) -> None:
                progress.advance(task)
                if partial is not None:  # long runs (a CPU model: minutes per case) stay observable
                    with open(partial, "a", encoding="utf-8") as fh:
                        fh.write(
                            json.dumps(
                                {
                                    "episode_id": case.episode_id,
                                    "intent": case.intent,
                                    "scores": case.scores,
                                    "status": case.trace.status,
                                    "latency_ms": case.trace.latency_ms,
                                }
                            )
                            + "\n"
                        )

            result = run_cases(
                suite,
                cases,
                model,
                seed=seed,
                on_case=on_case,
                options={"fault_rate": fault_rate, "harness": harness, "batch_size": batch_size, "dtype": dtype},
                batch_size=batch_size,
                load_options={"dtype": dtype} if dtype else None,
            )
    except HatError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from exc
    summary = result.summary()
    if out_dir is not None:
        paths = write_report(result, out_dir, command)
        err.print(f"report: {paths['markdown']} · {paths['json']}")
    if as_json:
        print(
            json.dumps(
                {
                    k: summary[k]
                    for k in ("suite", "model", "n", "seed", "score", "dims", "by_intent", "statuses", "wall_s")
                }
            )
        )
    else:
        _print_summary(summary)


def _partial_log(out_dir: Path | None, suite: str, model: str) -> Path | None:
    """``<out>/<suite>_<model>.progress.jsonl``: one line per finished case, written as it finishes."""
    if out_dir is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{suite}_{''.join(c if c.isalnum() or c in '-_.' else '_' for c in model)}.progress.jsonl"
    path.write_text("", encoding="utf-8")
    return path


def _external(
    suite: str,
    model: str,
    data: str | None,
    n: int,
    hsa: bool,
    out_dir: Path | None,
    max_new_tokens: int,
    as_json: bool,
) -> None:
    from hat.eval.external_suites import run_external

    columns = progress_columns()
    command = "hat " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        with Progress(*columns, console=err, transient=True) as progress:
            task = progress.add_task(f"{suite} · {model}", total=None)
            summary = run_external(
                suite,
                model,
                data=data,
                n=n,
                hsa=hsa,
                out_dir=out_dir,
                max_new_tokens=max_new_tokens,
                progress=lambda done, total: progress.update(task, completed=done, total=total),
                command=command,
            )
    except (HatError, OSError, ValueError) as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from exc
    if as_json:
        print(json.dumps({k: v for k, v in summary.items() if k != "command"}))
    else:
        table = Table(title=f"{summary['suite']} · {model} · n={summary['n']} · score {summary['score']:.1f}")
        table.add_column("dimension")
        table.add_column("score", justify="right")
        for dim, value in summary["dims"].items():
            table.add_row(dim, f"{value:.1f}")
        out.print(table)


def _print_summary(summary: dict) -> None:
    table = Table(title=f"{summary['suite']} · {summary['model']} · n={summary['n']} · score {summary['score']:.1f}")
    table.add_column("dimension")
    table.add_column("score", justify="right")
    for dim, value in summary["dims"].items():
        table.add_row(dim, f"{value:.1f}")
    out.print(table)
    intents = Table(title="per intent")
    for col in ("intent", "n", "score"):
        intents.add_column(col)
    for intent, row in summary["by_intent"].items():
        intents.add_row(intent, str(row["n"]), f"{row['score']:.1f}")
    out.print(intents)
