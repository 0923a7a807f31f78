"""Run a suite: each case through the agent runtime, every trace through the judges.

Scores: each judge gives a value in [0, 1] per episode. A dimension's suite score is the mean over
episodes × 100. The **overall score** is the mean over episodes of the mean of the four task
dimensions (Accuracy, Effectiveness, Tool Rationality, Skill Selection) × 100; the CoT-length
score q(L) is reported beside it but not folded in (it is a training penalty, not task quality).

Models: a model spec (``smollm2``, ``hf:…``, ``openai:…``, ``scripted:…``) is loaded once and
shared; a *policy* name (``oracle``, ``polite``, ``invent-prices``, ``wrong-tool``, ``no-tools``,
``memorise``) is privileged, so it is built per episode from the episode's gold. Tool registries
are built once per harness state and shared by the per-episode agents.

Throughput (``batch_size``): the runtime is synchronous per episode, so episodes run on up to
``batch_size`` worker threads, one episode per thread. A model with batched generation (the local
transformers models) is wrapped in a :class:`~hat.models.batching.BatchingModel`, which steps the
waiting rounds of all episodes as one batch; with greedy decoding every episode gets the outputs it
gets alone (up to float rounding). An OpenAI-compatible server gets concurrent requests (it batches
them itself). Policies and other backends (``scripted:`` replays lines in call order,
``llamacpp:`` holds one context) run one episode at a time. Cases come back in case order;
``on_case`` is called in the calling thread as each case finishes.

Crash safety (``hat eval --out``): a :class:`CaseLog` appends each case to ``<stem>_cases.jsonl``
as it finishes (one line, flushed and fsynced), so an interrupted run keeps everything it judged;
``run_cases(done=…)`` skips the cases already there (``hat eval --resume``), and a resumed run ends
with the results an uninterrupted one gives (every case is seeded by its own id). The run's identity
(suite, model, seed, n, harness, fault rate, dtype) is written beside the cases at the start, and a
resume that does not match it is refused. Summaries are written last, atomically
(:func:`write_atomic`), so a summary on disk always describes a finished run.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hat.env.policies import POLICIES, policy_model
from hat.env.sim import run_episode
from hat.errors import HatError
from hat.eval.suites import Case
from hat.harness.runtime import Agent
from hat.harness.state import Harness
from hat.harness.tools import ToolRegistry
from hat.harness.trace import Trace, append_jsonl, read_jsonl
from hat.judge import judge_trace
from hat.models import OpenAICompatibleModel, load_model
from hat.models.base import Model
from hat.models.batching import BatchingModel, supports_batching

__all__ = ["TASK_DIMS", "CaseLog", "CaseResult", "SuiteResult", "run_cases", "write_atomic"]

_LOG = logging.getLogger("hat.eval")

TASK_DIMS = ("accuracy", "effectiveness", "tool_rationality", "skill_selection")


@dataclass(frozen=True)
class CaseResult:
    episode_id: str
    intent: str
    variant: str
    scores: dict[str, float]
    reasons: dict[str, str]
    trace: Trace

    @property
    def overall(self) -> float:
        return sum(self.scores[d] for d in TASK_DIMS) / len(TASK_DIMS)

    def to_row(self) -> dict[str, Any]:
        """One line of ``<stem>_cases.jsonl``: scores, reasons and the whole trace."""
        return {
            "episode_id": self.episode_id,
            "intent": self.intent,
            "variant": self.variant,
            "scores": self.scores,
            "reasons": self.reasons,
            "trace": self.trace.to_dict(),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> CaseResult:
        return cls(
            str(row["episode_id"]),
            str(row["intent"]),
            str(row.get("variant", "production")),
            {k: float(v) for k, v in row["scores"].items()},
            dict(row.get("reasons", {})),
            Trace.from_dict(row["trace"]),
        )


@dataclass
class SuiteResult:
    suite: str
    model: str
    n: int
    seed: int
    cases: list[CaseResult] = field(default_factory=list)
    wall_s: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)

    def dims(self) -> dict[str, float]:
        names = [*TASK_DIMS, "cot_length"]
        return (
            {d: round(100 * statistics.fmean(c.scores[d] for c in self.cases), 2) for d in names} if self.cases else {}
        )

    def score(self) -> float:
        return round(100 * statistics.fmean(c.overall for c in self.cases), 2) if self.cases else 0.0

    def by_intent(self) -> dict[str, dict[str, float]]:
        groups: dict[str, list[CaseResult]] = defaultdict(list)
        for c in self.cases:
            groups[c.intent].append(c)
        return {
            intent: {
                "n": len(cs),
                "score": round(100 * statistics.fmean(c.overall for c in cs), 2),
                **{d: round(100 * statistics.fmean(c.scores[d] for c in cs), 2) for d in TASK_DIMS},
            }
            for intent, cs in sorted(groups.items())
        }

    def worst(self, k: int = 10) -> list[CaseResult]:
        return sorted(self.cases, key=lambda c: (c.overall, c.episode_id))[:k]

    def summary(self) -> dict[str, Any]:
        statuses: dict[str, int] = defaultdict(int)
        for c in self.cases:
            statuses[c.trace.status] += 1
        latencies = [c.trace.latency_ms for c in self.cases]
        return {
            "suite": self.suite,
            "model": self.model,
            "n": len(self.cases),
            "seed": self.seed,
            "score": self.score(),
            "dims": self.dims(),
            "by_intent": self.by_intent(),
            "statuses": dict(statuses),
            "mean_rounds": round(statistics.fmean(len(c.trace.rounds) for c in self.cases), 3) if self.cases else 0,
            "latency_ms_p50": round(statistics.median(latencies), 1) if latencies else 0,
            "wall_s": round(self.wall_s, 1),
            "options": self.options,
        }


class _Models:
    """Resolves a model spec or policy name to the model for one case."""

    def __init__(self, spec: str, seed: int, load_options: dict[str, Any]) -> None:
        self.spec, self.seed = spec, seed
        self._shared: Model | None = None if spec in POLICIES else load_model(spec, **load_options)

    def for_case(self, case: Case) -> Model:
        if self._shared is not None:
            return self._shared
        return policy_model(self.spec, case.episode, case.harness, seed=self.seed)

    def workers(self, batch_size: int, n_cases: int) -> int:
        """How many episodes may run at once: 1 unless the shared model batches or is a server."""
        shared = self._shared
        if shared is None or not (supports_batching(shared) or isinstance(shared, OpenAICompatibleModel)):
            return 1
        return max(1, min(batch_size, n_cases))


class _Registries:
    """One tool registry per harness state, shared by the agents of every worker thread."""

    def __init__(self) -> None:
        self._cache: dict[str, ToolRegistry] = {}
        self._lock = threading.Lock()

    def get(self, harness: Harness) -> ToolRegistry:
        key = harness.content_hash()
        with self._lock:
            if key not in self._cache:
                self._cache[key] = ToolRegistry(harness)
            return self._cache[key]

    def close(self) -> None:
        for registry in self._cache.values():
            registry.close()


def run_cases(
    suite: str,
    cases: list[Case],
    model: str,
    *,
    seed: int = 0,
    on_case: Callable[[CaseResult], None] | None = None,
    options: dict[str, Any] | None = None,
    batch_size: int = 1,
    load_options: dict[str, Any] | None = None,
    done: Sequence[CaseResult] = (),
) -> SuiteResult:
    """Run and judge every case. ``batch_size``: episodes in flight at once (see the module
    docstring); 1 runs them one after another, as every backend can. ``load_options`` go to
    :func:`~hat.models.load_model` (e.g. ``{"dtype": "bfloat16"}`` for a local model). ``done``:
    results of an interrupted run of the same cases; those cases are not run again (``on_case``
    is called for the new ones only) and the result lists every case in case order."""
    finished = {c.episode_id: c for c in done}
    todo = [case for case in cases if case.episode.episode_id not in finished]
    result = SuiteResult(suite, model, len(cases), seed, options=dict(options or {}))
    start = time.perf_counter()
    new = _run_todo(todo, model, seed, on_case, batch_size, dict(load_options or {})) if todo else []
    result.wall_s = time.perf_counter() - start
    by_id = finished | {c.episode_id: c for c in new}
    result.cases = [by_id[case.episode.episode_id] for case in cases]
    return result


def _run_todo(
    cases: list[Case],
    model: str,
    seed: int,
    on_case: Callable[[CaseResult], None] | None,
    batch_size: int,
    load_options: dict[str, Any],
) -> list[CaseResult]:
    models = _Models(model, seed, load_options)
    registries = _Registries()
    workers = models.workers(batch_size, len(cases))
    out: list[CaseResult] = []
    try:
        if workers <= 1:
            for case in cases:
                res = _run_case(case, models.for_case(case), registries)
                out.append(res)
                if on_case:
                    on_case(res)
        else:
            out.extend(_run_parallel(cases, models.for_case(cases[0]), registries, workers, on_case))
    finally:
        registries.close()
    return out


def _run_case(case: Case, model: Model, registries: _Registries) -> CaseResult:
    agent = Agent(case.harness, model, tools=registries.get(case.harness))
    trace = run_episode(agent, case.episode)
    judged = judge_trace(case.episode, trace, case.harness)
    return CaseResult(
        case.episode.episode_id,
        case.episode.gold.intent,
        case.variant,
        {k: float(v.score) for k, v in judged.items()},
        {k: v.reason for k, v in judged.items()},
        trace,
    )


def _run_parallel(
    cases: list[Case],
    model: Model,
    registries: _Registries,
    workers: int,
    on_case: Callable[[CaseResult], None] | None,
) -> list[CaseResult]:
    """Cases on ``workers`` threads sharing ``model`` (batched when it can be); results in case order."""
    batcher = BatchingModel(model, workers=workers) if supports_batching(model) else None
    shared: Model = batcher if batcher is not None else model
    finished: queue.Queue[tuple[int, CaseResult | BaseException]] = queue.Queue()
    pending = iter(range(len(cases)))
    lock, stop = threading.Lock(), threading.Event()

    def take() -> int | None:
        with lock:
            return None if stop.is_set() else next(pending, None)

    def work() -> None:
        try:
            while (index := take()) is not None:
                try:
                    with _tagged(batcher, index):
                        finished.put((index, _run_case(cases[index], shared, registries)))
                except BaseException as exc:  # handed to the calling thread, which raises it
                    finished.put((index, exc))
                    return
        finally:
            if batcher is not None:
                batcher.retire()

    threads = [threading.Thread(target=work, name=f"hat-eval-{k}", daemon=True) for k in range(workers)]
    for thread in threads:
        thread.start()
    try:
        results = _collect(finished, len(cases), on_case)
    except BaseException:
        stop.set()  # workers finish the episode in hand (their model calls now fail fast) and stop
        if batcher is not None:
            batcher.close(wait=False)
        raise
    if batcher is not None:
        batcher.close()
        _log_decode(batcher)
    for thread in threads:
        thread.join()
    return results


def _log_decode(batcher: BatchingModel) -> None:
    """How full continuous batching kept the decode slots (INFO on ``hat.eval``)."""
    for i, engine in enumerate(batcher.engines):
        slots = engine.slots
        if slots.steps:
            _LOG.info(
                "continuous batching, engine %d: %d prefill tokens in %.1f s; %d decode steps in %.1f s, "
                "%.1f live rows per step of %d",
                i,
                engine.prefilled,
                engine.prefill_s,
                slots.steps,
                engine.decode_s,
                slots.row_steps / slots.steps,
                slots.group,
            )


def _collect(
    finished: queue.Queue[tuple[int, CaseResult | BaseException]],
    n: int,
    on_case: Callable[[CaseResult], None] | None,
) -> list[CaseResult]:
    """Results in case order, reporting each as it arrives; a worker's exception is raised here."""
    results: dict[int, CaseResult] = {}
    for _ in range(n):
        index, item = finished.get()
        if isinstance(item, BaseException):
            raise item
        results[index] = item
        if on_case:
            on_case(item)
    return [results[i] for i in range(n)]


@contextmanager
def _tagged(batcher: BatchingModel | None, index: int) -> Iterator[None]:
    if batcher is None:
        yield
    else:
        with batcher.tagged(index):
            yield


# -- crash-safe output ------------------------------------------------------------------------------
def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync it, then ``os.replace`` it into
    place: readers see the old file or the new one, never a half-written one."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class CaseLog:
    """``<stem>_cases.jsonl`` written as cases finish, plus ``<stem>.run.json``: the identity of the
    run those cases belong to (see the module docstring).

    :meth:`start` begins a run: a fresh one refuses a folder that already holds cases of this
    stem (pass ``resume``, or choose another folder: cases are never truncated); a resumed one
    checks the identity and returns the cases already judged. Either way a summary (``summary``
    paths) left from an earlier run is removed first, because a summary must describe a finished
    run and is written again at the end."""

    def __init__(
        self,
        out_dir: str | Path,
        stem: str,
        identity: dict[str, Any],
        summary: Sequence[Path] = (),
        grows_from: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.dir = Path(out_dir)
        self.cases = self.dir / f"{stem}_cases.jsonl"
        self.run_file = self.dir / f"{stem}.run.json"
        self.identity = json.loads(json.dumps(identity, default=str))
        self.summary = list(summary)
        self.grows_from = grows_from
        self.grown_from: dict[str, Any] | None = None
        self.torn: tuple[int, ...] = ()

    def start(self, *, resume: bool) -> list[CaseResult]:
        self.dir.mkdir(parents=True, exist_ok=True)
        exists = self.cases.is_file() and self.cases.stat().st_size > 0
        if exists and not resume:
            raise HatError(
                f"{self.cases} already holds cases of an earlier run; pass --resume to continue it, "
                "or choose another --out folder (cases are never overwritten)"
            )
        done = self._resume() if exists else []
        for path in self.summary:
            path.unlink(missing_ok=True)
        if not exists:
            write_atomic(self.run_file, json.dumps(self.identity, indent=2, sort_keys=True) + "\n")
        return done

    def _resume(self) -> list[CaseResult]:
        self._check_identity()
        read = read_jsonl(self.cases)
        self.torn = read.torn
        rows: dict[str, dict[str, Any]] = {}
        for row in read.rows:
            rows.setdefault(str(row["episode_id"]), row)
        if read.torn or len(rows) != len(read.rows):  # drop torn and repeated lines, atomically
            lines = (json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows.values())
            write_atomic(self.cases, "".join(lines))
        return [CaseResult.from_row(row) for row in rows.values()]

    def _check_identity(self) -> None:
        try:
            stored = json.loads(self.run_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise HatError(
                f"cannot resume: {self.run_file} is missing or unreadable, so the cases in {self.cases} "
                "cannot be matched to a run; choose another --out folder"
            ) from exc
        diff = [f"{k}: {stored.get(k)!r} there, {v!r} now" for k, v in self.identity.items() if stored.get(k) != v]
        if diff and self.grows_from is not None and self.grows_from(stored):
            # a larger run of the same cases' prefix (``grows_from`` checked it): the stored cases
            # stay, the new identity is recorded, and only the new cases run
            self.grown_from = stored
            write_atomic(self.run_file, json.dumps(self.identity, indent=2, sort_keys=True) + "\n")
            return
        if diff:
            raise HatError(
                f"cannot resume: {self.cases} belongs to another run ({'; '.join(diff)}); rerun with the "
                "same options, or choose another --out folder"
            )

    def append(self, case: CaseResult) -> None:
        """Add one finished case: one line, on a fresh line, flushed and fsynced."""
        append_jsonl(self.cases, [_row_line(case)], fsync=True)


def _row_line(case: CaseResult) -> str:
    return json.dumps(case.to_row(), ensure_ascii=False, default=str)
