"""``hat evolve …``: the harness evolution loop — init, diagnose, propose, review, gate, history, log.

A cycle::

    hat harness init shop --from livestream && hat evolve init shop
    hat eval --suite t1 --model rule-reader --harness shop --n 200 --out runs/base
    hat evolve diagnose --eval-report runs/base --out runs/diagnosis.json
    hat evolve propose --harness shop --diagnosis runs/diagnosis.json --reference livestream \\
        --evaluate --model rule-reader --n 200
    hat evolve review --harness shop          # approve / reject / edit in the browser
    hat evolve gate <version> --harness shop --model rule-reader --suites t1,t3-prompt --n 200
    hat evolve history --harness shop --out runs/history.png

Each command is a thin shell over :mod:`hat.evolve`, imported inside the command: :mod:`hat.evolve`
imports the simulator (:mod:`hat.env`), which ``hat run``, ``hat harness`` and ``hat eval
--episodes`` on another domain's harness never need. The commands that accept a simulator policy
register ``rule-reader`` (:mod:`hat.evolve.policy`) when they run
(:func:`hat.cli.common.simulator_policies`).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from hat.cli.common import (
    DEFAULT_MODEL,
    RUN_BATCH_HELP,
    RUN_DTYPE_HELP,
    ExitCode,
    StepProgress,
    fail,
    run_options_or_exit,
)
from hat.errors import HatError

if TYPE_CHECKING:
    from hat.evolve.lineage import Lineage

app = typer.Typer(help="The harness evolution loop: diagnose → propose → review → gate.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)

LINEAGE_HELP = "Lineage folder (default: <harness folder>.lineage beside --harness)."
MODEL_HELP = "Model spec or simulator policy (rule-reader follows the skills' rules; oracle ignores them)."


def _line(text: str, console: Console = out) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _lineage(lineage: Path | None, harness: str | None, *, must_exist: bool = True) -> Lineage:
    from hat.evolve.lineage import Lineage, lineage_for

    if lineage is None and harness is None:
        fail("give --lineage or --harness (the folder whose lineage to use)")
    try:
        found = Lineage(lineage or lineage_for(str(harness)))
    except HatError as exc:
        fail(exc)
    if must_exist and not found.exists():
        fail(f"{found.root} has no lineage yet; start one with `hat evolve init <harness folder>`")
    return found


def _suites(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


@app.command()
def init(
    harness: str = typer.Argument(..., help="Harness folder whose versions to track."),
    lineage: Path | None = typer.Option(None, help=LINEAGE_HELP),
) -> None:
    """Start a lineage at the harness as it is now (its root version)."""
    found = _lineage(lineage, None if lineage else harness, must_exist=False)
    try:
        root = found.init(harness)
    except HatError as exc:
        fail(exc)
    _line(f"lineage {found.root}: root {root.short}")


@app.command("diagnose")
def diagnose_command(
    eval_report: Path | None = typer.Option(None, help="A `hat eval --out` folder (or its *_cases.jsonl)."),
    traces: Path | None = typer.Option(None, help="Traces JSONL to judge (with --episodes and --harness)."),
    episodes: Path | None = typer.Option(None, help="The episodes the traces ran (`hat sim episodes`)."),
    harness: str | None = typer.Option(None, help="Harness the traces ran under (with --traces)."),
    by: str | None = typer.Option(
        None, help="Grouping keys, comma-separated (default: dimension,intent,part,tool,skill; also: kind)."
    ),
    threshold: float = typer.Option(1.0, help="A dimension below this score is a failure."),
    examples: int = typer.Option(3, min=1, help="Representative traces per cluster."),
    text_backend: str = typer.Option("auto", help="auto | wordllama | tfidf (text of failure reasons)."),
    top: int = typer.Option(10, min=1, help="Clusters to print."),
    out_file: Path | None = typer.Option(None, "--out", help="Write the diagnosis as JSON here."),
    as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON."),
) -> None:
    """Cluster failed episodes (dimension, intent, harness part, tool, skill), ranked by impact."""
    from hat.evolve.diagnose import GROUP_KEYS, diagnose, load_eval_report, load_traces

    by = ",".join(GROUP_KEYS) if by is None else by
    try:
        if eval_report is not None:
            judged, source = load_eval_report(eval_report)
        elif traces is not None and episodes is not None and harness is not None:
            judged, source = load_traces(traces, episodes, harness)
        else:
            fail("give --eval-report, or --traces with --episodes and --harness")
        result = diagnose(
            judged,
            by=[k.strip() for k in by.split(",") if k.strip()],
            threshold=threshold,
            examples=examples,
            text_backend=text_backend,
            source=source,
        )
    except (HatError, ValueError, OSError) as exc:
        fail(exc)
    data = result.to_dict()
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if as_json:
        print(json.dumps(data, ensure_ascii=False))
        return
    _line(f"{data['n_failed']} of {data['n_cases']} episodes failed somewhere; text backend {data['text_backend']}")
    _line("clusters by impact (points of the overall score a full fix wins back):")
    for c in data["clusters"][:top]:
        top_reason = c["reasons"][0]
        _line(f"{c['id']}  impact {c['impact']:.2f}  n={c['n']}  {c['kind']}")
        _line("    " + "  ".join(f"{k}={c['key'].get(k, '')}" for k in result.by))
        _line(f"    top reason: {top_reason['reason']} (x{top_reason['n']})")
        _line(f"    representative traces: {', '.join(c['representatives'])}")
    for theme in data["themes"][:top]:
        _line(f"theme {'/'.join(theme['terms'])}: {theme['n']} failure(s) in {', '.join(theme['clusters'])}")


def _cluster(diagnosis: Path, ref: str | None) -> dict[str, Any]:
    try:
        data = json.loads(diagnosis.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        fail(f"cannot read {diagnosis}: {exc}")
    clusters = data.get("clusters") or []
    if not clusters:
        fail(f"{diagnosis} has no failure clusters: nothing to propose")
    chosen = (
        clusters[0]
        if ref is None
        else next((c for c in clusters if c["id"] == ref or c["id"].startswith(f"{ref}-")), None)
    )
    if chosen is None:
        fail(f"no cluster {ref!r} in {diagnosis}; clusters: {', '.join(c['id'] for c in clusters)}")
    return dict(chosen)


def _run_kwargs(model: str, n: int, dtype: str, batch_size: int | None) -> dict[str, Any]:
    """``batch_size`` and ``load_options`` for the paired runs: hat eval's fast path, both versions alike."""
    run = run_options_or_exit((model,), n, dtype, batch_size)[model]
    return {"batch_size": run.batch_size, "load_options": run.load_options}


@contextlib.contextmanager
def _episode_progress(label: str, total: int) -> Iterator[Callable[[Any], None]]:
    """Progress on stderr, one step per episode of a paired run (old and new, every suite): a live bar
    on a terminal, else a line at most every 30 s with done/total and an ETA (as hat eval)."""
    progress = StepProgress(label, total, interval=30.0)
    with progress:
        yield lambda _case: progress.advance()


@app.command("propose")
def propose_command(
    diagnosis: Path | None = typer.Option(None, help="A diagnosis JSON (`hat evolve diagnose --out`)."),
    cluster: str | None = typer.Option(None, help="Cluster id (c1, c2-…); default: the top one."),
    harness: str | None = typer.Option(None, help="Harness folder (its lineage is <folder>.lineage)."),
    lineage: Path | None = typer.Option(None, help=LINEAGE_HELP),
    base: str | None = typer.Option(None, help="Lineage version to edit (default: the head)."),
    reference: list[str] = typer.Option([], help="Known-good harness(es) to restore rules from (repeatable)."),
    llm: str | None = typer.Option(None, help="Also ask this model for an edit (openai:<url>#<model>)."),
    from_folder: Path | None = typer.Option(None, help="A person's edited copy of the harness, as a proposal."),
    rationale: str = typer.Option("", help="Why (with --from-folder)."),
    evaluate: bool = typer.Option(False, "--evaluate", help="Run the paired evaluation for the review page."),
    model: str = typer.Option(DEFAULT_MODEL, help=MODEL_HELP),
    suites: str = typer.Option("t1", help="Suites for --evaluate, comma-separated."),
    n: int = typer.Option(200, "--n", min=1, help="Episodes per suite for --evaluate."),
    seed: int = typer.Option(0, help="Seed of the episodes for --evaluate."),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help=RUN_BATCH_HELP),
    dtype: str = typer.Option("auto", help=RUN_DTYPE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the proposals as JSON."),
) -> None:
    """Propose validated edits for a failure cluster (rules; optionally an LLM; or an edited folder)."""
    from hat.evolve.gate import evaluate_proposal
    from hat.evolve.propose import ProposalStore, propose
    from hat.harness.loader import load_harness
    from hat.models import load_model

    found = _lineage(lineage, harness)
    chosen = _cluster(diagnosis, cluster) if diagnosis else {}
    run = _run_kwargs(model, n, dtype, batch_size) if evaluate else {}
    try:
        if from_folder is not None:
            store = ProposalStore(found)
            version = found.get(base) if base else found.head()
            proposal = store.add(
                found.load(version.hash), load_harness(from_folder), kind="manual", proposer="person",
                rationale=rationale or "edited by hand", cluster=chosen,
            )  # fmt: skip
            proposals, notes = [proposal], list[str]()
        else:
            if not chosen:
                fail("give --diagnosis (and optionally --cluster), or --from-folder")
            refs = [load_harness(r) for r in reference]
            llm_model = load_model(llm) if llm else None
            proposals, notes = propose(
                found, chosen, base=base, references=refs, model=llm_model, model_name=f"llm:{llm}"
            )
        suite_list = _suites(suites)
        for p in proposals if evaluate else []:
            with _episode_progress(f"evaluate {p.id} · {model}", 2 * n * len(suite_list)) as on_case:
                evaluate_proposal(found, p.id, model=model, suites=suite_list, n=n, seed=seed, on_case=on_case, **run)
    except HatError as exc:
        fail(exc)
    proposals = [ProposalStore(found).get(p.id) for p in proposals]
    if as_json:
        print(json.dumps({"proposals": [p.to_dict() for p in proposals], "notes": notes}, ensure_ascii=False))
    else:
        for p in proposals:
            verdict = f" · gate preview: {p.evaluation['decision']}" if p.evaluation else ""
            _line(f"{p.id} ({p.proposer}){verdict}\n  {p.rationale}\n{p.patch}")
        for note in notes:
            _line(f"note: {note}", err)
    if not proposals:
        raise typer.Exit(int(ExitCode.FAILED))


@app.command()
def review(
    harness: str | None = typer.Option(None, help="Harness folder (its lineage is <folder>.lineage)."),
    lineage: Path | None = typer.Option(None, help=LINEAGE_HELP),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8765, help="Port."),
    token: str | None = typer.Option(None, envvar="HAT_REVIEW_TOKEN", help="Review token (default: random)."),
) -> None:
    """Serve the review page (approve / reject / edit-and-approve); prints the address to open."""
    import uvicorn

    from hat.evolve.review import create_review_app

    found = _lineage(lineage, harness)
    token = token or secrets.token_urlsafe(24)
    shown = "localhost" if host in ("127.0.0.1", "::1", "localhost") else host
    application = create_review_app(found, token, allowed_hosts=None if shown == "localhost" else [host])
    _line(f"review page: http://{shown}:{port}/login?token={token}")
    uvicorn.run(application, host=host, port=port, log_level="warning")


@app.command("gate")
def gate_command(
    version: str = typer.Argument(..., help="Lineage version to gate (hash or prefix)."),
    harness: str | None = typer.Option(None, help="Harness folder (its lineage is <folder>.lineage)."),
    lineage: Path | None = typer.Option(None, help=LINEAGE_HELP),
    against: str | None = typer.Option(None, help="Version to compare with (default: its parent)."),
    model: str = typer.Option(DEFAULT_MODEL, help=MODEL_HELP),
    suites: str = typer.Option("t1", help="Suites, comma-separated (t1, t2, t3-tool, t3-prompt)."),
    n: int = typer.Option(200, "--n", min=1, help="Episodes per suite (the same for both versions)."),
    seed: int = typer.Option(0, help="Seed of the episodes, policies and bootstrap."),
    fault_rate: float = typer.Option(0.0, min=0.0, max=1.0, help="Tool fault probability per call."),
    target_intent: str | None = typer.Option(None, help="Target intent (default: the proposal's cluster)."),
    target_dimension: str = typer.Option("overall", help="Target dimension with --target-intent."),
    tolerance: float = typer.Option(0.0, min=0.0, help="Points a cell may drop (beyond noise) and still pass."),
    confidence: float = typer.Option(0.95, min=0.5, max=0.999, help="Confidence of the bootstrap intervals."),
    resamples: int = typer.Option(1000, min=100, help="Bootstrap resamples."),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help=RUN_BATCH_HELP),
    dtype: str = typer.Option("auto", help=RUN_DTYPE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the gate result as JSON."),
) -> None:
    """Paired evaluation of a version against its parent; promote or block, recorded in the lineage.
    Exit 0 when promoted, 1 when blocked."""
    from hat.evolve.gate import Target, gate

    run = _run_kwargs(model, n, dtype, batch_size)
    found = _lineage(lineage, harness)
    target = Target(target_intent, target_dimension) if target_intent else None
    chosen = _suites(suites)
    try:
        with _episode_progress(f"gate {version[:12]} · {model}", 2 * n * len(chosen)) as on_case:
            result = gate(
                found, version, against=against, target=target, model=model, suites=chosen, n=n, seed=seed,
                fault_rate=fault_rate, resamples=resamples, confidence=confidence, tolerance=tolerance,
                on_case=on_case, **run,
            )  # fmt: skip
    except (HatError, KeyError) as exc:
        fail(exc)
    if as_json:
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        _line(f"gate: {result.decision}  (Δ = new − old in points; {int(100 * confidence)} % paired bootstrap CI)")
        for c in result.cells:
            _line(
                f"  {c.suite:<9} {c.slice:<22} {c.dim:<16} n={c.n:<5} {c.old:6.1f} → {c.new:6.1f}  "
                f"Δ {c.diff:+6.1f}  [{c.lo:+6.1f}, {c.hi:+6.1f}]  {c.verdict}"
            )
        for reason in result.reasons:
            _line(f"  {reason}")
    raise typer.Exit(int(ExitCode.OK if result.promoted else ExitCode.FAILED))


@app.command()
def history(
    harness: str | None = typer.Option(None, help="Harness folder (its lineage is <folder>.lineage)."),
    lineage: Path | None = typer.Option(None, help=LINEAGE_HELP),
    suite: str = typer.Option("t1", help="Suite whose gate numbers to plot."),
    out_file: Path = typer.Option(Path("evolve_history.png"), "--out", help="PNG to write (a .json table beside)."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
) -> None:
    """Plot the gated metrics of every version across the lineage."""
    from hat.evolve.history import history_rows, plot_history

    rows = history_rows(_lineage(lineage, harness), suite)
    plot_history(rows, out_file)
    out_file.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    if as_json:
        print(json.dumps(rows))
    else:
        _line(f"wrote {out_file} ({sum('score' in r for r in rows)} measured versions of {len(rows)})")


@app.command()
def log(
    harness: str | None = typer.Option(None, help="Harness folder (its lineage is <folder>.lineage)."),
    lineage: Path | None = typer.Option(None, help=LINEAGE_HELP),
    head_only: bool = typer.Option(False, "--head", help="Only the head (newest promoted) and its ancestors."),
    as_json: bool = typer.Option(False, "--json", help="Print the versions as JSON."),
) -> None:
    """Every version, newest first, with its parent, proposer, reviewer and gate decision."""
    found = _lineage(lineage, harness)
    versions = found.chain() if head_only else list(reversed(found.versions().values()))
    if as_json:
        print(json.dumps([v.to_dict() for v in versions], ensure_ascii=False))
        return
    for v in versions:
        gate = f" · gate {v.gate['decision']}" if v.gate else ""
        who = f" · approved by {v.reviewer}" if v.reviewer else ""
        _line(f"{v.short} [{v.status}] parent {(v.parent or '-')[:12]} · {v.proposer}{who}{gate}")
        if v.rationale:
            _line(f"    {v.rationale}")
        if v.note:
            _line(f"    note: {v.note}")
