"""Diagnose: from judged episodes to ranked failure clusters, each with representative traces.

Every episode whose score on a task dimension is below ``threshold`` (default 1: anything short of
perfect) gives one :class:`Failure` per such dimension, described by the attributes an operator
can act on:

- ``dimension`` and ``intent``;
- ``kind``: what went wrong, read from the judges' details and the gold (``missing_tool_call``,
  ``unknown_tool``, ``invalid_args``, ``irrelevant_tool``, ``redundant_call``, ``wrong_arguments``,
  ``unhandled_fault``, ``skill_not_loaded``, ``wrong_skill_loaded``, ``reply_too_long``,
  ``rule_violation``, ``fallback``, ``inaccurate_reply``, ``reply_not_effective``);
- ``tool`` and ``skill`` under their *current* names (the gold tool that was not called, else the
  misused one; the episode's skill);
- ``part``: the harness file or setting where the instruction that failed lives
  (``skills/<name>/SKILL.md``, ``tools/<name>.yaml``, ``limits.reply_max_chars``, ``hooks:<name>``
  …) — the "harness block" a proposal edits.

Failures that agree on the grouping keys (default: dimension, intent, part, tool, skill) form a
:class:`Cluster`. **Impact** is the number of points of the suite's overall score the cluster
costs: ``Σ (1 − score) / |TASK_DIMS| / N × 100`` — what fixing it completely would win back. The
representative traces are the members nearest the cluster's centroid in text space (the failure
reason and the comment, embedded by :mod:`hat.evolve.text`); **themes** cluster all failure
reasons by text alone, which catches a failure the structured keys split (the same complaint
across intents).

Inputs: the cases file of ``hat eval --out`` (episodes and harness states are rebuilt from the
run's identity and checked against its case hash), or a traces JSONL plus the episodes they ran
(judged here).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hat.env.episode import Episode, read_episodes
from hat.errors import HatError
from hat.eval.runner import TASK_DIMS, CaseResult
from hat.evolve import text
from hat.harness.loader import load_harness
from hat.harness.state import Harness
from hat.harness.trace import Trace, read_jsonl, read_traces
from hat.judge import judge_trace
from hat.judge.base import resolve_calls
from hat.judge.effectiveness import effectiveness
from hat.judge.skills import skill_selection
from hat.judge.tools import tool_rationality

__all__ = [
    "GROUP_KEYS",
    "Cluster",
    "Diagnosis",
    "Failure",
    "Judged",
    "diagnose",
    "failures_of",
    "judged_from_results",
    "load_eval_report",
    "load_traces",
]

GROUP_KEYS = ("dimension", "intent", "part", "tool", "skill")
_TOOL_MISTAKES = {
    "unknown_tool": "unknown_tool",
    "decoy_tool": "unknown_tool",
    "invalid_args": "invalid_args",
    "irrelevant": "irrelevant_tool",
    "redundant": "redundant_call",
    "unhandled_fault": "unhandled_fault",
}


@dataclass(frozen=True)
class Judged:
    """One judged episode: the case result, its episode (gold) and the harness it ran under."""

    case: CaseResult
    episode: Episode
    harness: Harness


@dataclass(frozen=True)
class Failure:
    episode_id: str
    intent: str
    dimension: str
    score: float
    reason: str
    kind: str
    tool: str
    skill: str
    part: str
    comment: str
    variant: str = "production"

    @property
    def loss(self) -> float:
        """This failure's share of the episode's overall score that was lost (0..1/|TASK_DIMS|)."""
        return (1.0 - self.score) / len(TASK_DIMS)

    def text(self) -> str:
        return f"{self.reason}. {self.comment}"


@dataclass
class Cluster:
    id: str
    key: dict[str, str]
    kind: str
    failures: list[Failure]
    impact: float
    representatives: list[str] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len({f.episode_id for f in self.failures})

    def to_dict(self) -> dict[str, Any]:
        reasons = Counter(f.reason for f in self.failures)
        return {
            "id": self.id,
            "key": self.key,
            "kind": self.kind,
            "n": self.n,
            "impact": round(self.impact, 3),
            "mean_score": round(sum(f.score for f in self.failures) / len(self.failures), 4),
            "reasons": [{"reason": r, "n": k} for r, k in reasons.most_common(5)],
            "episodes": sorted({f.episode_id for f in self.failures}),
            "representatives": self.representatives,
            "examples": self.examples,
        }


@dataclass
class Diagnosis:
    n_cases: int
    by: tuple[str, ...]
    backend: str
    clusters: list[Cluster]
    themes: list[dict[str, Any]]
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def n_failed(self) -> int:
        return len({f.episode_id for c in self.clusters for f in c.failures})

    def cluster(self, ref: str) -> Cluster:
        found = next((c for c in self.clusters if c.id == ref), None)
        if found is None:
            raise HatError(f"no cluster {ref!r}; clusters: {', '.join(c.id for c in self.clusters) or 'none'}")
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_cases": self.n_cases,
            "n_failed": self.n_failed,
            "by": list(self.by),
            "text_backend": self.backend,
            "source": self.source,
            "clusters": [c.to_dict() for c in self.clusters],
            "themes": self.themes,
        }


# -- one episode -> failures ------------------------------------------------------------------------
def _missing_tools(episode: Episode, trace: Trace, harness: Harness) -> list[str]:
    """Current names of the gold tools the harness has but the trace never called."""
    called = {c.function_id for c in resolve_calls(trace, harness) if not c.unknown}
    names = []
    for gold in episode.gold.tool_calls:
        tool = harness.tool_by_function(gold.function_id)
        if tool is not None and gold.function_id not in called:
            names.append(tool.name)
    return list(dict.fromkeys(names))


def _episode_skill(episode: Episode, harness: Harness) -> str:
    skill = next((s for f in episode.gold.skills if (s := harness.skill_by_function(f)) is not None), None)
    return skill.name if skill is not None else ""


def _tool_kind(episode: Episode, trace: Trace, harness: Harness, missing: list[str]) -> tuple[str, str]:
    if missing:
        return "missing_tool_call", missing[0]
    mistakes: dict[str, list[str]] = tool_rationality(episode, trace, harness).details.get("mistakes", {})
    for key, kind in _TOOL_MISTAKES.items():
        if mistakes.get(key):
            return kind, str(mistakes[key][0])
    calls = [c.name for c in trace.tool_calls]
    return "wrong_arguments", calls[0] if calls else ""


def _kind(dimension: str, episode: Episode, trace: Trace, harness: Harness) -> tuple[str, str, str]:
    """(kind, tool, skill) of one failed dimension."""
    missing = _missing_tools(episode, trace, harness)
    skill = _episode_skill(episode, harness)
    tool = missing[0] if missing else ""
    if dimension == "tool_rationality":
        kind, tool = _tool_kind(episode, trace, harness, missing)
        return kind, tool, skill
    if dimension == "skill_selection":
        loads = skill_selection(episode, trace, harness).details.get("loads", {})
        wrong = [name for name, cls in loads.items() if cls != "relevant"]
        if "relevant" in loads.values() and wrong:
            return "wrong_skill_loaded", tool, wrong[0]
        return "skill_not_loaded", tool, skill
    if trace.status != "ok":
        return "fallback", tool, skill
    if dimension == "effectiveness":
        details = effectiveness(episode, trace, harness).details
        if details.get("over_length"):
            return "reply_too_long", tool, skill
        if details.get("violated_rules"):
            return "rule_violation", tool, skill
    if missing:
        return "missing_tool_call", tool, skill
    return ("inaccurate_reply" if dimension == "accuracy" else "reply_not_effective"), tool, skill


def _part(kind: str, tool: str, skill: str, trace: Trace) -> str:
    if kind == "missing_tool_call":
        return f"skills/{skill}/SKILL.md" if skill else f"tools/{tool}.yaml"
    if kind in ("unknown_tool", "invalid_args", "irrelevant_tool", "redundant_call", "wrong_arguments"):
        return f"tools/{tool}.yaml" if tool else "prompts/tool_signatures.md"
    if kind in ("skill_not_loaded", "wrong_skill_loaded"):
        return f"skills/{skill}/SKILL.md" if skill else "prompts/skill_catalog.md"
    if kind == "fallback":
        hooks = [e.hook for r in trace.rounds for e in r.hook_events if e.verdict in ("retry", "block")]
        return f"hooks:{hooks[-1]}" if hooks else "limits.max_rounds"
    return {
        "unhandled_fault": "hooks:tool_retry",
        "reply_too_long": "limits.reply_max_chars",
        "rule_violation": "settings.reply_rules",
        "inaccurate_reply": "settings.boundaries",
    }.get(kind, "prompts/output_format.md")


def failures_of(judged: Judged, threshold: float = 1.0) -> list[Failure]:
    """One failure per task dimension scored below ``threshold``."""
    case, episode, harness = judged.case, judged.episode, judged.harness
    out = []
    for dimension in TASK_DIMS:
        score = case.scores.get(dimension, 1.0)
        if score >= threshold:
            continue
        kind, tool, skill = _kind(dimension, episode, case.trace, harness)
        out.append(
            Failure(
                episode_id=case.episode_id,
                intent=case.intent,
                dimension=dimension,
                score=score,
                reason=case.reasons.get(dimension, ""),
                kind=kind,
                tool=tool,
                skill=skill,
                part=_part(kind, tool, skill, case.trace),
                comment=" / ".join(episode.comments),
                variant=case.variant,
            )
        )
    return out


# -- failures -> clusters ---------------------------------------------------------------------------
def _example(judged: Judged) -> dict[str, Any]:
    trace = judged.case.trace
    return {
        "episode_id": judged.case.episode_id,
        "intent": judged.case.intent,
        "comments": list(trace.comments),
        "skills_loaded": list(trace.skills_loaded),
        "tool_calls": [{"name": c.name, "arguments": c.arguments, "status": c.status} for c in trace.tool_calls],
        "reply": trace.reply,
        "status": trace.status,
        "scores": judged.case.scores,
        "reasons": judged.case.reasons,
        "rounds": [{"action": r.action, "output": r.raw_output[:600]} for r in trace.rounds],
        "harness_hash": trace.harness_hash,
    }


def _key_id(key: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:6]


def diagnose(
    judged: Sequence[Judged],
    *,
    by: Sequence[str] = GROUP_KEYS,
    threshold: float = 1.0,
    examples: int = 3,
    text_backend: str = "auto",
    theme_threshold: float = 0.5,
    source: dict[str, Any] | None = None,
) -> Diagnosis:
    """Cluster the failures of ``judged`` (module docstring); clusters ranked by impact."""
    unknown = [k for k in by if k not in (*GROUP_KEYS, "kind")]
    if unknown or not by:
        raise HatError(f"cannot group by {unknown or 'nothing'}; choose from: {', '.join((*GROUP_KEYS, 'kind'))}")
    failures = [f for j in judged for f in failures_of(j, threshold)]
    backend, vectors = text.embed([f.text() for f in failures], text_backend) if failures else ("none", [])
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, failure in enumerate(failures):
        groups[tuple(str(getattr(failure, k)) for k in by)].append(i)
    by_id = {j.case.episode_id: j for j in judged}
    clusters = []
    for values, members in groups.items():
        fs = [failures[i] for i in members]
        order = text.centroid_order([vectors[i] for i in members])
        reps = list(dict.fromkeys(fs[i].episode_id for i in order))[:examples]
        key = dict(zip(by, values, strict=True))
        impact = 100 * sum(f.loss for f in fs) / max(1, len(judged))
        kind = Counter(f.kind for f in fs).most_common(1)[0][0]
        clusters.append(Cluster(_key_id(key), key, kind, fs, impact, reps, [_example(by_id[e]) for e in reps]))
    clusters.sort(key=lambda c: (-round(c.impact, 9), -c.n, json.dumps(c.key, sort_keys=True)))
    clusters = [replace(c, id=f"c{rank}-{c.id}") for rank, c in enumerate(clusters, 1)]
    themes = _themes(failures, backend, clusters, theme_threshold)
    return Diagnosis(len(judged), tuple(by), backend, clusters, themes, dict(source or {}))


def _themes(failures: list[Failure], backend: str, clusters: list[Cluster], threshold: float) -> list[dict[str, Any]]:
    """Failures grouped by the text of their reason alone (see the module docstring)."""
    reasons = list(dict.fromkeys(f.reason for f in failures))
    if not reasons:
        return []
    _, reason_vectors = text.embed(reasons, "wordllama" if backend.startswith("wordllama") else "tfidf")
    labels = text.threshold_clusters(reason_vectors, threshold)
    members: dict[int, list[str]] = defaultdict(list)
    for reason, label in zip(reasons, labels, strict=True):
        members[label].append(reason)
    cluster_of = {(f.episode_id, f.dimension): c.id for c in clusters for f in c.failures}
    themes = []
    for texts in members.values():
        fs = [f for f in failures if f.reason in texts]
        themes.append(
            {
                "terms": text.top_terms(texts),
                "n": len(fs),
                "reasons": texts[:5],
                "clusters": sorted({cluster_of[(f.episode_id, f.dimension)] for f in fs}),
            }
        )
    return sorted(themes, key=lambda t: (-t["n"], t["terms"]))


# -- inputs -----------------------------------------------------------------------------------------
def _cases_file(path: Path) -> Path:
    if path.is_file():
        return path
    found = sorted(path.glob("*_cases.jsonl"))
    if len(found) != 1:
        raise HatError(f"{path}: expected one *_cases.jsonl (from `hat eval --out`), found {len(found)}")
    return found[0]


def _cases_hash(cases: Sequence[Any]) -> str:
    """The case hash ``hat eval`` writes into ``<stem>.run.json`` (episode ids and harness hashes)."""
    lines = "".join(f"{c.episode.episode_id} {c.harness.content_hash()}\n" for c in cases)
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()[:16]


def load_eval_report(path: str | Path) -> tuple[list[Judged], dict[str, Any]]:
    """The judged cases of a ``hat eval --out`` folder (or its ``*_cases.jsonl``), with their
    episodes and harness states rebuilt from the run's identity (``<stem>.run.json``)."""
    from hat.eval.suites import build_cases

    cases_file = _cases_file(Path(path))
    run_file = cases_file.with_name(cases_file.name.removesuffix("_cases.jsonl") + ".run.json")
    try:
        identity = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HatError(
            f"{run_file} is missing or unreadable; diagnose needs the run identity beside the cases"
        ) from exc
    options = {k: identity[k] for k in ("n", "seed", "harness", "fault_rate") if k in identity}
    built = build_cases(identity["suite"], **options)
    if identity.get("cases") and _cases_hash(built) != identity["cases"]:
        raise HatError(
            f"the episodes rebuilt from {run_file} differ from the run's (its harness {identity.get('harness')!r} "
            "changed since?); run the evaluation again"
        )
    by_id = {c.episode.episode_id: c for c in built}
    judged = []
    for row in read_jsonl(cases_file).rows:
        case = CaseResult.from_row(row)
        if case.episode_id in by_id:
            judged.append(Judged(case, by_id[case.episode_id].episode, by_id[case.episode_id].harness))
    return judged, {"kind": "eval-report", "path": str(cases_file), "identity": identity}


def load_traces(
    traces: str | Path, episodes: str | Path, harness: str | Path | Harness
) -> tuple[list[Judged], dict[str, Any]]:
    """Judge the traces of a JSONL file against their episodes (matched by ``context.episode_id``
    or request id) under ``harness``; traces without an episode are skipped and counted."""
    h = harness if isinstance(harness, Harness) else load_harness(harness)
    eps = {e.episode_id: e for e in read_episodes(episodes)}
    judged, skipped = [], 0
    for trace in read_traces(traces):
        episode = eps.get(str(trace.context.get("episode_id") or trace.request_id))
        if episode is None:
            skipped += 1
            continue
        scores = judge_trace(episode, trace, h)
        case = CaseResult(
            episode.episode_id,
            episode.gold.intent,
            "production",
            {k: float(v.score) for k, v in scores.items()},
            {k: v.reason for k, v in scores.items()},
            trace,
        )
        judged.append(Judged(case, episode, h))
    return judged, {"kind": "traces", "path": str(traces), "episodes": str(episodes), "skipped": skipped}


def judged_from_results(results: Iterable[CaseResult], episodes: Iterable[Episode], harness: Harness) -> list[Judged]:
    """Pair in-memory case results with their episodes (for library use and tests)."""
    eps = {e.episode_id: e for e in episodes}
    return [Judged(c, eps[c.episode_id], harness) for c in results if c.episode_id in eps]
