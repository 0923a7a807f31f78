"""Entry point of the ``hat`` command."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress

from hat.cli.augment_cmd import augment_command
from hat.cli.common import DEFAULT_HARNESS, DEFAULT_MODEL, build_agent, progress_columns
from hat.cli.eval_cmd import eval_command, sim_app
from hat.cli.harness_cmd import app as harness_app
from hat.cli.train_cmd import datagen_command, datagen_general_command, train_app
from hat.demo import demo_records, reply_record
from hat.harness.runtime import Request
from hat.harness.sinks import JSONLSink
from hat.serve.bench import bench_app
from hat.serve.cli import serve_command

app = typer.Typer(
    help="HAT: compact LLM agents that keep working while their harness evolves.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(harness_app, name="harness")
app.add_typer(sim_app, name="sim")
app.command("eval")(eval_command)
app.command("augment")(augment_command)
app.command("datagen")(datagen_command)
app.command("datagen-general")(datagen_general_command)
app.add_typer(train_app, name="train")
app.command("serve")(serve_command)
app.add_typer(bench_app, name="bench")
err = Console(stderr=True)
out = Console()

MODEL_HELP = (
    "Model spec: smollm2-hat (SmolLM2 + HAT's HSA-SFT adapter) | smollm2 (base) | llamacpp:smollm2-hat | "
    "hf:<path> | openai:<base_url>#<model> | scripted:<file.jsonl>"
)


@app.command()
def run(
    comment: str = typer.Option(..., "--comment", "-c", help="The viewer comment to answer."),
    harness: str = typer.Option(DEFAULT_HARNESS, help="Harness folder or built-in name."),
    model: str = typer.Option(DEFAULT_MODEL, help=MODEL_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (reply, trace, ...)."),
    trace_out: Path | None = typer.Option(None, help="Append the trace to this JSONL file."),
) -> None:
    """Answer one viewer comment."""
    agent = build_agent(harness, model, sinks=[JSONLSink(trace_out)] if trace_out else [])
    response = agent.respond(Request.of(comment))
    record = reply_record(comment, response)
    if as_json:
        print(json.dumps(record, ensure_ascii=False))
    else:
        _show(record)
    agent.close()


def _show(record: dict, console: Console = out) -> None:
    if record.get("host"):
        console.print(f"[magenta]host:[/] {record['host']}")
    console.print(f"[cyan]viewer:[/] {record['comment'][:300]}")
    for call in record["tool_calls"]:
        console.print(
            f"  [yellow]tool[/] {call['name']}({json.dumps(call['arguments'], ensure_ascii=False)}) → {call['status']}"
        )
    if record["skills_loaded"]:
        console.print(f"  [blue]skills[/] {', '.join(record['skills_loaded'])}")
    console.print(f"[bold green]avatar:[/] {record['reply']}")
    console.print(
        f"  [dim]{record['status']} · {record['rounds']} round(s) · {record['latency_ms'] / 1000:.1f}s "
        f"(model {record['model_ms'] / 1000:.1f}s) · {record['completion_tokens']} tokens out[/]"
    )


@app.command()
def demo(
    comments: int = typer.Option(5, "--comments", "-n", min=1, max=200, help="How many viewer comments."),
    model: str = typer.Option(DEFAULT_MODEL, help=MODEL_HELP),
    harness: str = typer.Option(DEFAULT_HARNESS, help="Harness folder or built-in name."),
    seed: int = typer.Option(0, help="Seed for the comment stream."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per reply on stdout."),
    trace_out: Path | None = typer.Option(None, help="Append every trace to this JSONL file."),
) -> None:
    """A short simulated live session: a scripted host, a stream of viewer comments, the agent's replies."""
    from hat.env.demo_script import demo_stream

    agent = build_agent(harness, model, sinks=[JSONLSink(trace_out)] if trace_out else [])
    stream = demo_stream(comments, seed)
    columns = progress_columns()
    with Progress(*columns, console=err if as_json else out, transient=True) as progress:
        task = progress.add_task("live session", total=len(stream))
        for record in demo_records(agent, stream):
            if as_json:
                print(json.dumps(record, ensure_ascii=False), flush=True)
            else:
                progress.console.rule()
                _show(record, progress.console)
            progress.advance(task)
    agent.close()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
