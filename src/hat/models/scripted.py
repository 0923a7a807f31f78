"""A model that replays scripted outputs: the test double shipped with HAT.

Tests of the runtime, the judges and the trainers need a model whose answers are known in
advance, fast and free of torch. :class:`ScriptedModel` plays that part, the way httpx ships a
mock transport: it replays a list of outputs (or asks a callable for each one), records every
call so a test can assert what the model was shown, and behaves like a real backend where that
is cheap to copy (stop strings cut the text, ``stream`` yields word pieces and then the same
:class:`Generation`, token counts are whitespace words).

It is a :class:`~hat.models.base.ModelBackend` with only ``_generate``: the base class gives it
``stream`` and the stop-string rule, exactly as it gives them to the real backends. The stop-string
helpers live in :mod:`hat.models.stops`; they are re-exported here for older imports.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from hat.errors import HatError, ModelError, ModelSpecError
from hat.models.base import Generation, GenerationConfig, Message, ModelBackend, word_pieces
from hat.models.stops import cut_stream_at_stop, truncate_at_stop
from hat.textio import read_text

__all__ = ["ScriptedModel", "cut_stream_at_stop", "truncate_at_stop", "word_pieces"]


class ScriptedModel(ModelBackend):
    """Replays ``outputs`` in order, or asks ``outputs(messages)`` for each generation.

    ``loop=True`` starts again from the first output when the script runs out; otherwise the
    next call raises :class:`ModelError`. ``calls`` holds a copy of the messages of the last
    ``max_calls`` calls, in order (bounded: a looping or callable script may serve a long-running
    server or a hostile-input suite). ``GenerationConfig.stop`` is honoured; ``max_new_tokens`` is
    not (a script is replayed verbatim). Thread-safe.
    """

    def __init__(
        self,
        outputs: Sequence[str] | Callable[[list[Message]], str],
        name: str = "scripted",
        loop: bool = False,
        max_calls: int = 1000,
    ) -> None:
        if not callable(outputs) and isinstance(outputs, str):
            raise TypeError("outputs must be a sequence of strings or a callable, not one string")
        self.name = name
        self.loop = loop
        self._calls: deque[list[Message]] = deque(maxlen=max_calls)
        self._outputs = outputs if callable(outputs) else list(outputs)
        self._next = 0
        self._lock = threading.Lock()

    @classmethod
    def from_jsonl(cls, path: str | Path, *, name: str | None = None, loop: bool = False) -> ScriptedModel:
        """Read outputs from a JSONL file: each line a JSON string or an object ``{"output": ...}``."""
        path = Path(path)
        try:
            lines = read_text(path, what="scripted model file").splitlines()
        except HatError as exc:  # missing, unreadable or not UTF-8: the message names file and line
            raise ModelSpecError(str(exc)) from exc
        outputs = [_parse_line(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
        return cls(outputs, name=name or f"scripted:{path}", loop=loop)

    @property
    def calls(self) -> list[list[Message]]:
        """The messages of the most recent calls (at most ``max_calls``), oldest first; a copy."""
        with self._lock:
            return list(self._calls)

    @property
    def remaining(self) -> int | None:
        """Outputs left before the script runs out (``None`` for a callable or a looping script)."""
        if callable(self._outputs) or self.loop:
            return None
        return len(self._outputs) - self._next

    def _generate(self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None) -> Generation:
        start = time.perf_counter()
        # A model stops generating at a stop string, so the words after it are never counted.
        text, _ = truncate_at_stop(self._take(messages), config.stop)
        return Generation(
            text=text,
            prompt_tokens=sum(len(m.get("content", "").split()) for m in messages),
            completion_tokens=len(text.split()),
            latency_s=time.perf_counter() - start,
            ttft_s=0.0,
            finish_reason="stop",
        )

    def _take(self, messages: Sequence[Message]) -> str:
        snapshot = [dict(m) for m in messages]
        with self._lock:
            self._calls.append(snapshot)
            if callable(self._outputs):
                return str(self._outputs(snapshot))
            if self._next >= len(self._outputs):
                if not self.loop or not self._outputs:
                    raise ModelError(
                        f"scripted model {self.name!r} ran out of outputs after {len(self._outputs)} "
                        "call(s); add more outputs to the script or pass loop=True"
                    )
                self._next = 0
            out = self._outputs[self._next]
            self._next += 1
            return out


def _parse_line(path: Path, number: int, line: str) -> str:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ModelSpecError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
    if isinstance(value, dict) and isinstance(value.get("output"), str):
        return value["output"]
    if isinstance(value, str):
        return value
    raise ModelSpecError(f'{path}:{number}: expected a JSON string or an object {{"output": "..."}}')
