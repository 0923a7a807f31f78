"""``hat eval`` and ``hat sim …``: simulated episodes and the evaluation suites."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from hat.allocator import prefer_jemalloc
from hat.cli.common import DEFAULT_MODEL, StepProgress, error_exit, fail, simulator_policies, stdout_to_stderr
from hat.errors import HatError
from hat.eval.run_options import is_local_weights, resolve_run_options

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
        fail(f"--mode must be single or multi, not {mode!r}")
    eps = generate_episodes(n, seed, mode=mode, fault_rate=fault_rate)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    write_episodes(out_file, eps)
    counts = {k: 0 for k in INTENT_MIX}
    for ep in eps:
        counts[ep.gold.intent] = counts.get(ep.gold.intent, 0) + 1
    mix = ", ".join(f"{k} {100 * v / n:.1f}%" for k, v in counts.items())
    err.print(f"wrote {n} episodes to {out_file} (sha256 {episodes_hash(eps)[:16]}); intent mix: {mix}")


SUITE_HELP = "Suite: t1 | t2 | t3-tool | t3-prompt (simulated room) or ifeval | rotbench | bfcl (external data)."
MODEL_HELP = (
    "Model spec (smollm2-hat, smollm2, hf:…, llamacpp:…, openai:…, scripted:…) or, for t1-t3 only, a "
    "simulator policy (oracle, polite, invent-prices, wrong-tool, no-tools, memorise)."
)


def _known_suites() -> list[str]:
    from hat.eval.external_suites import EXTERNAL_SUITES
    from hat.eval.suites import SUITES

    return [*sorted(SUITES), *EXTERNAL_SUITES]


def _check_options(suite: str, data: str | None, hsa: bool) -> None:
    """Refuse (exit 2) what does not fit together, before anything is built or loaded."""
    from hat.eval.external_suites import EXTERNAL_SUITES

    known = _known_suites()
    if suite not in known:
        fail(f"unknown suite {suite!r}; known suites: {', '.join(known)}")
    if suite not in EXTERNAL_SUITES and (data is not None or hsa):
        fail(f"--data and --hsa apply to the external suites ({', '.join(EXTERNAL_SUITES)}), not {suite}")


def eval_command(
    suite: str = typer.Option("t1", help=SUITE_HELP),
    model: str = typer.Option(DEFAULT_MODEL, help=MODEL_HELP),
    n: int = typer.Option(100, "--n", min=1, help="Episodes (or prompts) to evaluate."),
    seed: int = typer.Option(0, help="Seed of the episodes and policies."),
    harness: str = typer.Option("livestream", help="Production harness (folder or built-in name)."),
    episodes: Path | None = typer.Option(
        None,
        "--episodes",
        help="A JSONL file of labelled requests for --harness, instead of --suite: no simulator; each is "
        "scored on tool calls, skill and required facts (format: hat.eval.episodes_file).",
    ),
    fault_rate: float = typer.Option(0.0, min=0.0, max=1.0, help="Tool fault probability per call."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON summary object on stdout."),
    out_dir: Path | None = typer.Option(
        None,
        "--out",
        help="Write <suite>_<model>_cases.jsonl here as cases finish, then the .md report and .json summary.",
    ),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue the interrupted run in --out (same suite, model, seed, n, harness, fault rate, dtype).",
    ),
    data: str | None = typer.Option(None, help="External data path (ifeval: input_data.jsonl; rotbench/bfcl: folder)."),
    hsa: bool = typer.Option(False, "--hsa", help="rotbench/bfcl: show tools under held-out HSA names."),
    max_new_tokens: int = typer.Option(256, help="External suites: generation budget per item."),
    batch_size: int | None = typer.Option(
        None,
        "--batch-size",
        min=1,
        help="Episodes in flight at once. Local models (smollm2, smollm2-hat, hf:) decode their rounds "
        "together, with the outputs of one-at-a-time greedy decoding; openai: gets concurrent requests; "
        "1 runs episodes one after another (policies, scripted: and llamacpp: always do). Default: 16, "
        "or with batch-invariant decoding 16 per usable core (one decode engine per core).",
    ),
    dtype: str = typer.Option(
        "auto",
        help="Local models (smollm2, smollm2-hat, hf:): weight dtype. auto (default): bfloat16 on CPUs with "
        "native bf16 (AVX-512 BF16 or AMX), ~5x faster batched, else float32. bfloat16's greedy outputs "
        "differ a little from float32's; it decodes batch-invariantly (the same outputs at every "
        "--batch-size; see --batch-invariant). The report records the dtype used.",
    ),
    batch_invariant: bool | None = typer.Option(
        None,
        "--batch-invariant/--no-batch-invariant",
        help="Local models: fixed-shape kernels so an episode's outputs do not depend on the episodes "
        "decoded beside it. Default: on for bfloat16/float16, off for float32 (already equal).",
    ),
) -> None:
    """Evaluate a model on a suite: per-dimension scores, overall score, per-intent breakdown, worst
    failures. Suite, model, options and data are checked before a model is loaded; progress goes to
    stderr (one line per step when stderr is not a terminal), so --json keeps stdout pure JSON. A
    local model on a CPU takes seconds to minutes per episode: start with a small --n. With
    --episodes, the harness's own labelled requests instead (no simulator, nothing of hat.env)."""
    if episodes is not None:
        _episodes_file(harness, episodes, model, out_dir, as_json)
        return
    simulator_policies()
    from hat.eval.external_suites import EXTERNAL_SUITES
    from hat.eval.runner import run_cases
    from hat.eval.suites import build_cases

    _check_options(suite, data, hsa)
    try:
        run = resolve_run_options(model, n, dtype=dtype, batch_invariant=batch_invariant, batch_size=batch_size)
    except HatError as exc:
        fail(exc)
    if is_local_weights(model):
        prefer_jemalloc()  # a long run on local weights: re-executed under jemalloc where installed
    weights, batch_invariant, batch_size, load = run.dtype, run.batch_invariant, run.batch_size, run.load_options
    if suite in EXTERNAL_SUITES:
        _external(suite, model, data, n, hsa, out_dir, max_new_tokens, as_json, load)
        return
    try:
        cases = build_cases(suite, n=n, seed=seed, harness=harness, fault_rate=fault_rate)
    except (KeyError, HatError) as exc:
        fail(exc.args[0] if isinstance(exc, KeyError) else exc)
    command = "hat " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    identity = {"suite": suite, "model": model, "seed": seed, "n": n, "harness": harness}
    identity |= {"fault_rate": fault_rate, "dtype": weights, "cases": _cases_hash(cases)}
    if batch_invariant:  # a new key only when on: earlier runs' identities (resume) stay valid
        identity["batch_invariant"] = True
    try:
        log, done = _case_log(out_dir, suite, model, identity, resume, grows_from=_grows_from(identity, cases))
        progress = StepProgress(f"{suite} · {model}", len(cases), completed=len(done))
        with progress, stdout_to_stderr(as_json):

            def on_case(case: Any) -> None:
                if log is not None:  # written as it finishes: an interrupted run keeps it
                    log.append(case)
                progress.advance()

            result = run_cases(
                suite,
                cases,
                model,
                seed=seed,
                on_case=on_case,
                options={"fault_rate": fault_rate, "harness": harness, "batch_size": batch_size, "dtype": weights}
                | ({"batch_invariant": True} if batch_invariant else {})
                | ({"resumed_cases": len(done)} if done else {}),
                batch_size=batch_size,
                load_options=load or None,
                done=done,
            )
    except HatError as exc:
        fail(exc, error_exit(exc))
    summary = result.summary()
    if out_dir is not None:
        markdown, summary_json = _summary_paths(out_dir, suite, model)
        _write_summary(result, markdown, summary_json, command)
        err.print(f"report: {markdown} · {summary_json}")
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


def _episodes_file(harness: str, episodes: Path, model: str, out_dir: Path | None, as_json: bool) -> None:
    """``--episodes``: the harness's own labelled requests (:mod:`hat.eval.episodes_file`)."""
    from hat.eval.episodes_file import evaluate_file, read_episodes_file, write_results

    command = "hat " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        progress = StepProgress(f"episodes · {model}", len(read_episodes_file(episodes)))
        with progress, stdout_to_stderr(as_json):
            result = evaluate_file(harness, episodes, model, on_case=lambda _case: progress.advance())
        summary = result.summary()
        if out_dir is not None:
            paths = write_results(result, out_dir, _stem("episodes", model), command)
            err.print(f"report: {paths[0]} · {paths[1]}", soft_wrap=True)
    except HatError as exc:
        fail(exc, error_exit(exc))
    if as_json:
        print(json.dumps(summary, ensure_ascii=False))
        return
    _print_summary(summary)
    for case in summary["worst"]:
        line = f"{case['episode_id']} {case['score']:.1f}: {'; '.join(case['reasons'].values())}"
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def _stem(suite: str, model: str) -> str:
    """The file stem of a run's outputs (as :func:`hat.eval.report.write_report` names them)."""
    return f"{suite}_{''.join(c if c.isalnum() or c in '-_.' else '_' for c in model)[:60]}"


def _cases_hash(cases: list[Any]) -> str:
    """What a resumed run must share with the interrupted one: its episodes and harness states."""
    import hashlib

    text = "".join(f"{c.episode.episode_id} {c.harness.content_hash()}\n" for c in cases)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _summary_paths(out_dir: Path, suite: str, model: str) -> tuple[Path, Path]:
    stem = _stem(suite, model)
    return out_dir / f"{stem}.md", out_dir / f"{stem}.json"


def _grows_from(identity: dict[str, Any], cases: list[Any]) -> Callable[[dict[str, Any]], bool]:
    """``--resume`` with a larger ``--n`` grows a run (finished or not): allowed when everything but n
    and the cases is the same and the stored cases are exactly the first ones of the new run. A
    suite's first n episodes do not depend on n (tested per suite), so this holds unless the episodes
    or harness states changed - then the stored run is refused as before."""

    def check(stored: dict[str, Any]) -> bool:
        rest = {k for k in identity if k not in ("n", "cases")}
        if any(stored.get(k) != identity[k] for k in rest) or set(stored) - set(identity):
            return False
        old_n = stored.get("n")
        return (
            isinstance(old_n, int) and 0 < old_n < identity["n"] and stored.get("cases") == _cases_hash(cases[:old_n])
        )

    return check


def _case_log(
    out_dir: Path | None,
    suite: str,
    model: str,
    identity: dict,
    resume: bool,
    grows_from: Callable[[dict[str, Any]], bool] | None = None,
) -> tuple[Any, list[Any]]:
    """The case log of ``--out`` (None without it) and the cases an interrupted run already judged."""
    from hat.eval.runner import CaseLog

    if out_dir is None:
        if resume:
            raise HatError("--resume needs --out: the folder of the interrupted run")
        return None, []
    summary = _summary_paths(out_dir, suite, model)
    log = CaseLog(out_dir, _stem(suite, model), identity, summary=summary, grows_from=grows_from)
    done = log.start(resume=resume)
    if log.grown_from is not None:
        err.print(f"growing the run in {out_dir} from n = {log.grown_from['n']} to n = {identity['n']}")
    if log.torn:
        err.print(f"warning: skipped {len(log.torn)} torn line(s) of {log.cases} (a crash mid-write)")
    if done:
        err.print(f"resuming: {len(done)} case(s) already in {log.cases}")
    return log, done


def _write_summary(result: Any, markdown: Path, summary_json: Path, command: str) -> None:
    """The Markdown report, then the JSON summary - last, each by temp file + ``os.replace``: a
    summary on disk always describes a finished run whose cases are all written."""
    from hat.eval.report import render_markdown
    from hat.eval.runner import write_atomic
    from hat.provenance import code_version

    write_atomic(markdown, render_markdown(result, command))
    summary = {**result.summary(), "command": command, "code": code_version()}
    write_atomic(summary_json, json.dumps(summary, indent=2))


def _external(
    suite: str,
    model: str,
    data: str | None,
    n: int,
    hsa: bool,
    out_dir: Path | None,
    max_new_tokens: int,
    as_json: bool,
    load_options: dict[str, Any],
) -> None:
    from hat.eval.external_suites import check_external, run_external

    command = "hat " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        check_external(suite, model, data)  # before the model loads: policy, data, scorer
    except (HatError, OSError, ValueError) as exc:
        fail(exc)
    try:
        with StepProgress(f"{suite} · {model}") as update, stdout_to_stderr(as_json):
            summary = run_external(
                suite,
                model,
                data=data,
                n=n,
                hsa=hsa,
                out_dir=out_dir,
                max_new_tokens=max_new_tokens,
                progress=update,
                command=command,
                checked=True,
                load_options=load_options or None,
            )
    except (HatError, OSError, ValueError) as exc:
        fail(exc, error_exit(exc))
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
