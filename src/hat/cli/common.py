"""Shared plumbing for CLI commands: build an agent from a harness ref and a model spec."""

from __future__ import annotations

from collections.abc import Sequence

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn

from hat.errors import HarnessError, HatError
from hat.harness.loader import load_harness
from hat.harness.runtime import Agent
from hat.harness.sinks import Sink
from hat.harness.state import Harness
from hat.models import load_model
from hat.models.base import Model

err = Console(stderr=True)


def progress_columns() -> tuple[ProgressColumn, ...]:
    """The one progress-bar layout of every long-running command."""
    return (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())


DEFAULT_MODEL = "smollm2-hat"
DEFAULT_HARNESS = "livestream"


def harness_or_exit(ref: str) -> Harness:
    try:
        return load_harness(ref)
    except HarnessError as exc:
        err.print(f"error: {exc}", markup=False, soft_wrap=True, highlight=False)
        raise typer.Exit(2) from exc


def model_or_exit(spec: str) -> Model:
    try:
        with err.status(f"loading model {spec} …"):
            return load_model(spec)
    except HatError as exc:
        err.print(f"error: {exc}", markup=False, soft_wrap=True, highlight=False)
        raise typer.Exit(2) from exc


def build_agent(harness_ref: str, model_spec: str, sinks: Sequence[Sink] = ()) -> Agent:
    from hat.env.context import livestream_context

    harness = harness_or_exit(harness_ref)
    model = model_or_exit(model_spec)
    return Agent(harness, model, sinks=sinks, context_provider=livestream_context)
