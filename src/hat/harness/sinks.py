"""Where finished traces go: the console, a JSONL file, or any callable (a webhook, a TTS queue).

Sinks receive the whole trace; the reply text is ``trace.reply`` (reasoning already stripped).
A sink that raises never loses the reply: the runtime records the error on the trace.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from hat.harness.trace import Trace, append_jsonl

__all__ = ["CallbackSink", "ConsoleSink", "JSONLSink", "Sink"]


@runtime_checkable
class Sink(Protocol):
    def emit(self, trace: Trace) -> None: ...


class JSONLSink:
    """Appends one trace per line; safe to share between threads. Each trace starts on a fresh line
    (a line torn by an earlier crash stays a line of its own, which readers skip) and is flushed as
    one write; ``fsync=True`` also makes it durable before ``emit`` returns (slower)."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._lock = threading.Lock()

    def emit(self, trace: Trace) -> None:
        line = trace.to_json()
        with self._lock:
            append_jsonl(self.path, [line], fsync=self.fsync)


class ConsoleSink:
    """Prints the reply (for ``hat run`` without ``--json``)."""

    def __init__(self, console: object | None = None) -> None:
        from rich.console import Console

        self.console = console if console is not None else Console()

    def emit(self, trace: Trace) -> None:
        self.console.print(f"[bold green]host>[/] {trace.reply}  [dim]({trace.status}, {len(trace.rounds)} rounds)[/]")  # type: ignore[attr-defined]


class CallbackSink:
    def __init__(self, fn: Callable[[Trace], None]) -> None:
        self.fn = fn

    def emit(self, trace: Trace) -> None:
        self.fn(trace)
