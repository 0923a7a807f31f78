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
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hat.env.policies import POLICIES, policy_model
from hat.env.sim import run_episode
from hat.eval.suites import Case
from hat.harness.runtime import Agent
from hat.harness.state import Harness
from hat.harness.tools import ToolRegistry
from hat.harness.trace import Trace
from hat.judge import judge_trace
from hat.models import OpenAICompatibleModel, load_model
from hat.models.base import Model
from hat.models.batching import BatchingModel, supports_batching

__all__ = ["TASK_DIMS", "CaseResult", "SuiteResult", "run_cases"]

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
) -> SuiteResult:
    """Run and judge every case. ``batch_size``: episodes in flight at once (see the module
    docstring); 1 runs them one after another, as every backend can. ``load_options`` go to
    :func:`~hat.models.load_model` (e.g. ``{"dtype": "bfloat16"}`` for a local model)."""
    models = _Models(model, seed, dict(load_options or {}))
    registries = _Registries()
    result = SuiteResult(suite, model, len(cases), seed, options=dict(options or {}))
    workers = models.workers(batch_size, len(cases))
    start = time.perf_counter()
    try:
        if workers <= 1:
            for case in cases:
                res = _run_case(case, models.for_case(case), registries)
                result.cases.append(res)
                if on_case:
                    on_case(res)
        else:
            result.cases.extend(_run_parallel(cases, models.for_case(cases[0]), registries, workers, on_case))
    finally:
        registries.close()
    result.wall_s = time.perf_counter() - start
    return result


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
    for thread in threads:
        thread.join()
    return results


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
