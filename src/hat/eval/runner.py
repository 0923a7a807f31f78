"""Run a suite: each case through the agent runtime, every trace through the judges.

Scores: each judge gives a value in [0, 1] per episode. A dimension's suite score is the mean over
episodes × 100. The **overall score** is the mean over episodes of the mean of the four task
dimensions (Accuracy, Effectiveness, Tool Rationality, Skill Selection) × 100; the CoT-length
score q(L) is reported beside it but not folded in (it is a training penalty, not task quality).

Models: a model spec (``smollm2``, ``hf:…``, ``openai:…``, ``scripted:…``) is loaded once and
shared; a *policy* name (``oracle``, ``polite``, ``invent-prices``, ``wrong-tool``, ``no-tools``,
``memorise``) is privileged, so it is built per episode from the episode's gold. Tool registries
are built once per harness state and shared by the per-episode agents.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
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
from hat.models import load_model
from hat.models.base import Model

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

    def __init__(self, spec: str, seed: int) -> None:
        self.spec, self.seed = spec, seed
        self._shared: Model | None = None if spec in POLICIES else load_model(spec)

    def for_case(self, case: Case) -> Model:
        if self._shared is not None:
            return self._shared
        return policy_model(self.spec, case.episode, case.harness, seed=self.seed)


def run_cases(
    suite: str,
    cases: list[Case],
    model: str,
    *,
    seed: int = 0,
    on_case: Callable[[CaseResult], None] | None = None,
    options: dict[str, Any] | None = None,
) -> SuiteResult:
    models = _Models(model, seed)
    registries: dict[str, ToolRegistry] = {}
    result = SuiteResult(suite, model, len(cases), seed, options=dict(options or {}))
    start = time.perf_counter()
    try:
        for case in cases:
            registry = _registry(registries, case.harness)
            agent = Agent(case.harness, models.for_case(case), tools=registry)
            trace = run_episode(agent, case.episode)
            judged = judge_trace(case.episode, trace, case.harness)
            res = CaseResult(
                case.episode.episode_id,
                case.episode.gold.intent,
                case.variant,
                {k: float(v.score) for k, v in judged.items()},
                {k: v.reason for k, v in judged.items()},
                trace,
            )
            result.cases.append(res)
            if on_case:
                on_case(res)
    finally:
        for reg in registries.values():
            reg.close()
    result.wall_s = time.perf_counter() - start
    return result


def _registry(cache: dict[str, ToolRegistry], harness: Harness) -> ToolRegistry:
    key = harness.content_hash()
    if key not in cache:
        cache[key] = ToolRegistry(harness)
    return cache[key]
