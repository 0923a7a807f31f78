"""Shared plumbing for CLI commands: exit codes, errors, progress, building an agent.

Decisions a new user sees on every command, so they live in one place:

- **Exit codes mean something** (:class:`ExitCode`, listed in ``hat --help`` and the README): 0 for
  an ``ok`` reply, 2 for input HAT cannot use (as click uses 2 for a usage error), and one code per
  way a request can end without an ``ok`` reply - fallback, refused, backend error - so a script can
  tell them apart without parsing output.
- **One line per error**, ``error: <what>; <what to do>``, naming the file and line where there is
  one (:mod:`hat.textio`), never a traceback for a bad input.
- **Progress always goes to stderr**, in every output mode, so ``--json`` keeps stdout pure JSON: a
  live bar when stderr is a terminal, otherwise one plain line per step (throttled to one a second,
  plus the first and the last) with done/total, elapsed time and an ETA, which reads well in a log.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from enum import IntEnum
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn

from hat.errors import HarnessError, HatError, MissingDependencyError, ModelError
from hat.harness.loader import load_harness
from hat.harness.runtime import Agent
from hat.harness.sinks import Sink
from hat.harness.state import Harness
from hat.models import load_model
from hat.models.base import Model

err = Console(stderr=True)

DEFAULT_MODEL = "smollm2-hat"
DEFAULT_HARNESS = "livestream"


class ExitCode(IntEnum):
    """What a ``hat`` process's exit status means."""

    OK = 0  # replied ``ok`` (or the command did what it was asked)
    FAILED = 1  # the command ran and the answer is "no": harness diff found differences, a check failed
    BAD_INPUT = 2  # a usage error, a file or model spec HAT cannot use, a suite/model that do not fit
    FALLBACK = 3  # replied with the harness's fallback: no accepted reply within the rounds/retries
    REFUSED = 4  # an input hook refused the request (e.g. an empty comment)
    BACKEND_ERROR = 5  # the model backend failed (server down, engine missing at run time, crash)


STATUS_EXIT = {"ok": ExitCode.OK, "fallback": ExitCode.FALLBACK, "refused": ExitCode.REFUSED}

EXIT_CODES_HELP = (
    "\b\nExit codes:\n"
    "  0  replied ok (or the command succeeded)\n"
    "  1  the answer is no (hat harness diff: the harnesses differ)\n"
    "  2  bad input: usage, files, model spec, suite/model/data checked before loading\n"
    "  3  fallback reply (no accepted reply within the harness's rounds)\n"
    "  4  refused (an input hook blocked the request, e.g. an empty comment)\n"
    "  5  backend error (the model server or engine failed)"
)


def status_exit(status: str) -> ExitCode:
    """The exit code of a reply with this ``trace.status``."""
    return STATUS_EXIT.get(status, ExitCode.BACKEND_ERROR)


def fail(message: object, code: int = ExitCode.BAD_INPUT) -> NoReturn:
    """Print ``error: message`` on one stderr line (no markup, no wrapping) and exit with ``code``."""
    err.print(f"error: {message}", markup=False, soft_wrap=True, highlight=False)
    raise typer.Exit(int(code))


def note(message: str) -> None:
    """A one-line notice on stderr (``note: …``), e.g. that an input was truncated."""
    err.print(f"note: {message}", markup=False, soft_wrap=True, highlight=False)


def error_exit(exc: BaseException) -> int:
    """The exit code of an exception raised before or while loading: the backend's own failure
    is a backend error; anything about what the user passed is bad input."""
    if isinstance(exc, ModelError) and not isinstance(exc, MissingDependencyError):
        return ExitCode.BACKEND_ERROR
    return ExitCode.BAD_INPUT


def check_text_or_exit(path: Path | str | None, what: str) -> None:
    """Refuse a file that is missing or not UTF-8 before a library reads it, naming file and line."""
    if path is None:
        return
    from hat.textio import check_text

    try:
        check_text(path, what=what)
    except HatError as exc:
        fail(exc)


def progress_columns() -> tuple[ProgressColumn, ...]:
    """The one progress-bar layout of every long-running command (on a terminal)."""
    return (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())


def _duration(seconds: float) -> str:
    """``42s``, ``3m07s``, ``2h05m``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class StepProgress:
    """Progress of a long command on stderr: ``with StepProgress(label, total) as update`` gives
    ``update(done, total=None)`` (as ``generate_dataset(progress=…)`` calls it).

    On a terminal it is rich's live bar (cleared at the end). Elsewhere - a log, a pipe, ``--json``
    piped into ``jq`` - it prints ``label: done/total (pct) · elapsed · ETA`` lines: one when work
    starts, then at most one per ``interval`` seconds, and always the last. The ETA is the mean time
    per step since start times the steps left (steps already done before, e.g. a resumed run's,
    do not count toward the rate: pass ``completed=``, or call :meth:`resume` when the count of
    steps done is known only once the work has begun, as a Trainer knows it after loading a
    checkpoint)."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        completed: int = 0,
        interval: float = 1.0,
        console: Console | None = None,
    ) -> None:
        self.label, self.total, self.interval = label, total, interval
        self.done = self.start_done = completed
        self.started = self.last_line = self.rate_started = 0.0
        self._terminal = console or err  # where the live bar goes when that is a terminal
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Callable[..., None]:
        self.started = self.rate_started = time.monotonic()
        if self._terminal.is_terminal:
            from rich.progress import Progress

            self._bar = Progress(*progress_columns(), console=self._terminal, transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total, completed=self.done)
        else:
            self._line(force=True)
        return self.update

    @property
    def console(self) -> Console | None:
        """The live bar's console (print through it to keep lines above the bar), else None."""
        return self._bar.console if self._bar is not None else None

    def update(self, done: int, total: int | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=self.total)
        else:
            self._line(force=self.total is not None and done >= self.total)

    def resume(self, done: int, total: int | None = None) -> None:
        """The work starts at ``done`` steps already done (a resumed training): the ETA's rate counts
        only the steps from here and the time from now; elapsed still counts from the start."""
        self.done = self.start_done = done
        if total is not None:
            self.total = total
        self.rate_started = time.monotonic()
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=self.total)

    def advance(self, steps: int = 1) -> None:
        self.update(self.done + steps)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def _line(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_line < self.interval:
            return
        self.last_line = now
        elapsed = now - self.started
        parts = [f"{self.label}: {self.done}/{self.total if self.total is not None else '?'}"]
        if self.total:
            parts[0] += f" ({100 * self.done / self.total:.0f}%)"
        parts.append(f"{_duration(elapsed)} elapsed")
        steps = self.done - self.start_done
        if self.total and steps > 0 and self.done < self.total:
            rate = (now - self.rate_started) / steps
            parts.append(f"ETA {_duration(rate * (self.total - self.done))}")
        elif self.done == self.start_done and (self.total is None or self.done < self.total):
            parts.append("starting")
        print(" · ".join(parts), file=sys.stderr, flush=True)


@contextlib.contextmanager
def stdout_to_stderr(enabled: bool = True) -> Iterator[None]:
    """While working under ``--json``, send whatever a library prints to stdout to stderr, so
    stdout holds exactly the JSON the command prints afterwards."""
    if not enabled:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


LOCAL_MODELS = ("smollm2", "smollm2-hat", "hf", "llamacpp")
"""Spec prefixes of models whose weights load into this process (seconds to minutes on a CPU)."""


def is_local_model(spec: str) -> bool:
    return spec.strip().partition(":")[0].partition("?")[0] in LOCAL_MODELS


@contextlib.contextmanager
def loading_model(spec: str) -> Iterator[None]:
    """Say on stderr that a local model is loading (a spinner on a terminal, one line elsewhere);
    models that load instantly (``openai:``, ``scripted:``, policies) get no line."""
    if not is_local_model(spec):
        yield
        return
    if err.is_terminal:
        with err.status(f"loading model {spec} …"):
            yield
        return
    started = time.monotonic()
    print(f"loading model {spec} …", file=sys.stderr, flush=True)
    yield
    elapsed = time.monotonic() - started
    if elapsed >= 1.0:
        print(f"loaded model {spec} in {_duration(elapsed)}", file=sys.stderr, flush=True)


RUN_BATCH_HELP = (
    "Episodes in flight at once per model (default: as hat eval - 16, or 16 per usable core with "
    "batch-invariant decoding); 1 runs them one after another."
)
RUN_DTYPE_HELP = (
    "Local models (smollm2, smollm2-hat, hf:): weight dtype, as for hat eval (auto: bfloat16, decoded "
    "batch-invariantly, on CPUs with native bf16; else float32). Other systems ignore it."
)


def run_options_or_exit(specs: Sequence[str], n: int, dtype: str, batch_size: int | None) -> dict[str, Any]:
    """How each model spec decodes a run of ``n`` episodes: hat eval's fast path
    (:mod:`hat.eval.run_options`), checked before a model loads (exit 2 if it cannot work); a run
    on local weights is re-executed under jemalloc where installed (:mod:`hat.allocator`)."""
    from hat.allocator import prefer_jemalloc
    from hat.eval.run_options import LOCAL_SPECS, is_local_weights, resolve_run_options

    local = [is_local_weights(s) for s in specs]
    if dtype != "auto" and not any(local):
        fail(f"--dtype applies to local models ({', '.join(LOCAL_SPECS)}); none of {', '.join(specs)} is one")
    try:
        runs = {
            s: resolve_run_options(s, n, dtype=dtype if is_local else "auto", batch_size=batch_size)
            for s, is_local in zip(specs, local, strict=True)
        }
    except HatError as exc:
        fail(exc)
    if any(local):
        prefer_jemalloc()
    return runs


def simulator_policies() -> None:
    """Register every simulator policy, ``rule-reader`` (:mod:`hat.evolve.policy`) among them.

    Called by the commands that take a policy where a model goes (``hat eval`` on a suite, ``hat
    compare``, ``hat datagen``), not when the CLI is imported: the policies live in the simulator
    (:mod:`hat.env`), which ``hat run``, ``hat harness`` and ``hat eval --episodes`` on another
    domain's harness never import."""
    import hat.evolve.policy  # noqa: F401  (registers rule-reader in hat.env.policies.POLICIES)


def harness_or_exit(ref: str) -> Harness:
    try:
        return load_harness(ref)
    except HarnessError as exc:
        fail(exc)


def model_or_exit(spec: str) -> Model:
    try:
        with loading_model(spec):
            return load_model(spec)
    except HatError as exc:
        fail(exc, error_exit(exc))


def build_agent(harness_ref: str, model_spec: str, sinks: Sequence[Sink] = ()) -> Agent:
    """The harness (checked first: a bad folder fails before the model loads) with its own context
    provider, if it names one, and the model."""
    from hat.harness.loader import load_context_provider

    harness = harness_or_exit(harness_ref)
    try:
        provider = load_context_provider(harness)
    except HatError as exc:
        fail(exc, error_exit(exc))
    model = model_or_exit(model_spec)
    return Agent(harness, model, sinks=sinks, context_provider=provider)
