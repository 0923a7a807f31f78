"""``hat eval --episodes FILE``: evaluate any harness on its own labelled episodes, no simulator.

The suites of :mod:`hat.eval.suites` are the live room's: episodes come from its simulator and its
judges read the simulator's gold. A team with its own agent (a support desk, a booking assistant)
has a harness folder and a JSONL file of requests it labelled by hand; this module runs each one
through the runtime and scores the trace with three generic checks. It imports nothing from
``hat.env`` or ``hat.judge`` (both are the live room's), so it works for a harness that is not one.

One episode per line::

    {"id": "sd-01", "intent": "order_status",
     "turns": ["Where is my order SD-1002?"], "context": {"customer_id": "C-100"},
     "history": [], "mode": "single",
     "gold": {"skill": "order-status",
              "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "SD-1002"}}],
              "facts": ["shipped", "2026-12-04"],
              "reply": "Your sweater has shipped with DHL and should arrive by 2026-12-04."}}

``turns``/``context``/``history``/``mode`` make the :class:`~hat.harness.runtime.Request` (``mode``
defaults to ``single`` for one turn, ``multi`` for more). Gold names are *function ids*: the
``metadata.function_id`` of a tool or skill, which HSA keeps when it renames one, so the labels
follow a renamed tool. ``arguments`` are the values that must match (canonical parameter names;
strings compared case-insensitively); ``reference_arguments`` and ``reply`` are used only to write
the reference outputs (:func:`reference_outputs`: what an agent that does everything right writes
under a given harness - a script for ``scripted:`` models and tests).

Scores per episode, each in [0, 1]:

- ``tool_calls``: expected calls matched by distinct calls of the trace (same function, expected
  arguments present), divided by the larger of the expected and the made count - a missing call and
  an unneeded one both cost;
- ``skill``: the expected skill was loaded (none expected: none was loaded);
- ``facts``: the share of ``facts`` found in the reply (case- and whitespace-insensitive); 0 for a
  request that did not end ``ok`` (the fallback reply states nothing).

The overall score is the mean of the three, ×100, averaged over episodes. The summary has the keys
of the suites' (``suite``, ``model``, ``n``, ``score``, ``dims``, ``by_intent``, ``statuses``,
``wall_s``) plus the harness, the episodes file's hash and the worst cases with their reasons.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hat.errors import HatError
from hat.harness.loader import load_context_provider, load_harness
from hat.harness.protocol import ToolCall, render_reply, render_tool_call
from hat.harness.runtime import Agent, Request
from hat.harness.state import Harness, ToolSpec
from hat.harness.tools import ToolRegistry, canonical_arguments
from hat.harness.trace import Trace
from hat.models.base import Model
from hat.textio import read_text

__all__ = [
    "DIMS",
    "EpisodeCase",
    "EpisodeGold",
    "EpisodesResult",
    "ExpectedCall",
    "LabeledEpisode",
    "evaluate_file",
    "read_episodes_file",
    "reference_outputs",
    "run_episodes",
    "score_trace",
]

DIMS = ("tool_calls", "skill", "facts")


# -- the file ---------------------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExpectedCall(_Strict):
    name: str = Field(description="the tool's function id")
    arguments: dict[str, Any] = Field(default_factory=dict)
    reference_arguments: dict[str, Any] = Field(default_factory=dict)


class EpisodeGold(_Strict):
    skill: str | None = None
    tool_calls: list[ExpectedCall] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)
    reply: str = ""


class LabeledEpisode(_Strict):
    id: str
    intent: str = ""
    turns: list[str] = Field(min_length=1)
    context: dict[str, Any] = Field(default_factory=dict)
    history: list[dict[str, str]] = Field(default_factory=list)
    mode: Literal["single", "multi"] | None = None
    gold: EpisodeGold = Field(default_factory=EpisodeGold)

    def request(self) -> Request:
        mode = self.mode or ("single" if len(self.turns) == 1 else "multi")
        return Request(
            turns=tuple(self.turns),
            context=dict(self.context),
            history=tuple(dict(m) for m in self.history),
            request_id=self.id,
            mode=mode,
        )


def read_episodes_file(path: str | Path) -> list[LabeledEpisode]:
    """Parse a JSONL episodes file; a bad line raises :class:`HatError` naming file and line."""
    episodes: list[LabeledEpisode] = []
    for number, line in enumerate(read_text(path, what="episodes file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            episodes.append(LabeledEpisode.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "(line)"
            raise HatError(
                f"{path}:{number}: {where}: {first['msg']}; see hat.eval.episodes_file for the format"
            ) from None
    ids = [e.id for e in episodes]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise HatError(f"{path}: episode ids must be unique; repeated: {', '.join(repeated)}")
    if not episodes:
        raise HatError(f"{path}: no episodes (one JSON object per line)")
    return episodes


# -- scoring ----------------------------------------------------------------------------------------
def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).strip().casefold()


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, str) and isinstance(actual, str):
        return _fold(expected) == _fold(actual)
    return bool(expected == actual)


def _made_calls(trace: Trace, harness: Harness) -> list[tuple[str, dict[str, Any]]]:
    """The trace's tool calls as ``(function id, canonical arguments)``."""
    made = []
    for call in trace.tool_calls:
        spec = harness.tool(call.name)
        if spec is None:
            made.append((call.name, dict(call.arguments)))
        else:
            made.append((spec.function_id, canonical_arguments(spec, call.arguments)))
    return made


def _score_tools(gold: EpisodeGold, trace: Trace, harness: Harness) -> tuple[float, str]:
    made = _made_calls(trace, harness)
    left = list(made)
    missing = []
    for want in gold.tool_calls:
        hit = next(
            (c for c in left if c[0] == want.name and all(_same(v, c[1].get(k)) for k, v in want.arguments.items())),
            None,
        )
        if hit is None:
            missing.append(f"{want.name}({json.dumps(want.arguments, ensure_ascii=False)})")
        else:
            left.remove(hit)
    denominator = max(len(gold.tool_calls), len(made))
    score = 1.0 if denominator == 0 else (len(gold.tool_calls) - len(missing)) / denominator
    reasons = [f"missing {', '.join(missing)}"] if missing else []
    reasons += [f"unexpected {', '.join(name for name, _ in left)}"] if left else []
    return score, "; ".join(reasons)


def _score_skill(gold: EpisodeGold, trace: Trace, harness: Harness) -> tuple[float, str]:
    loaded = [s.function_id if (s := harness.skill(n)) else n for n in trace.skills_loaded]
    if gold.skill is None:
        return (1.0, "") if not loaded else (0.0, f"loaded {', '.join(loaded)}; none expected")
    if gold.skill in loaded:
        return 1.0, ""
    return 0.0, f"expected skill {gold.skill}; loaded {', '.join(loaded) or 'none'}"


def _score_facts(gold: EpisodeGold, trace: Trace) -> tuple[float, str]:
    if trace.status != "ok":
        return 0.0, f"status {trace.status}: {trace.context.get('status_reason', '')}".strip()
    if not gold.facts:
        return 1.0, ""
    reply = _fold(trace.reply)
    missing = [f for f in gold.facts if _fold(f) not in reply]
    score = 1 - len(missing) / len(gold.facts)
    return score, (f"reply lacks {', '.join(repr(f) for f in missing)}" if missing else "")


def score_trace(episode: LabeledEpisode, trace: Trace, harness: Harness) -> tuple[dict[str, float], dict[str, str]]:
    """``(scores, reasons)`` of one trace, per dimension of :data:`DIMS`; ``harness`` is the one the
    trace ran under (it maps the names the model used back to function ids)."""
    results = {
        "tool_calls": _score_tools(episode.gold, trace, harness),
        "skill": _score_skill(episode.gold, trace, harness),
        "facts": _score_facts(episode.gold, trace),
    }
    return {d: round(s, 4) for d, (s, _) in results.items()}, {d: r for d, (_, r) in results.items() if r}


# -- reference outputs ------------------------------------------------------------------------------
def _current_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    param_map = spec.metadata.get("param_map") or {}
    return {param_map.get(k, k): v for k, v in arguments.items()}


def reference_outputs(episode: LabeledEpisode, harness: Harness) -> list[str]:
    """What an agent that does everything right writes for ``episode`` under ``harness``, one
    string per round: load the gold skill, make the gold calls (one round), reply with the gold
    reply - under the harness's current tool, skill, parameter and reply-field names."""
    gold, output = episode.gold, harness.output
    outputs = []
    if gold.skill is not None:
        skill = harness.skill_by_function(gold.skill)
        name = skill.name if skill is not None else gold.skill
        outputs.append(render_tool_call(ToolCall(output.skill_tool, {"name": name})))
    calls = []
    for want in gold.tool_calls:
        spec = harness.tool_by_function(want.name)
        arguments = {**want.reference_arguments, **want.arguments}
        if spec is None:
            calls.append(render_tool_call(ToolCall(want.name, arguments)))
        else:
            calls.append(render_tool_call(ToolCall(spec.name, _current_arguments(spec, arguments))))
    if calls:
        outputs.append("".join(calls))
    outputs.append(render_reply({output.reply_field: gold.reply}))
    return outputs


# -- running ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EpisodeCase:
    episode_id: str
    intent: str
    scores: dict[str, float]
    reasons: dict[str, str]
    trace: Trace

    @property
    def overall(self) -> float:
        return sum(self.scores[d] for d in DIMS) / len(DIMS)

    def to_row(self) -> dict[str, Any]:
        row = {"episode_id": self.episode_id, "intent": self.intent, "scores": self.scores, "reasons": self.reasons}
        return {**row, "trace": self.trace.to_dict()}


@dataclass
class EpisodesResult:
    harness: Harness
    model: str
    episodes_sha256: str = ""
    cases: list[EpisodeCase] = field(default_factory=list)
    wall_s: float = 0.0

    def _mean(self, cases: Sequence[EpisodeCase], dim: str | None = None) -> float:
        values = [c.overall if dim is None else c.scores[dim] for c in cases]
        return round(100 * statistics.fmean(values), 2) if values else 0.0

    def summary(self, worst: int = 10) -> dict[str, Any]:
        groups: dict[str, list[EpisodeCase]] = defaultdict(list)
        for case in self.cases:
            groups[case.intent or "-"].append(case)
        failing = sorted((c for c in self.cases if c.overall < 1), key=lambda c: (c.overall, c.episode_id))
        return {
            "suite": "episodes",
            "model": self.model,
            "n": len(self.cases),
            "score": self._mean(self.cases),
            "dims": {d: self._mean(self.cases, d) for d in DIMS},
            "by_intent": {
                intent: {"n": len(cs), "score": self._mean(cs), **{d: self._mean(cs, d) for d in DIMS}}
                for intent, cs in sorted(groups.items())
            },
            "statuses": dict(Counter(c.trace.status for c in self.cases)),
            "wall_s": round(self.wall_s, 2),
            "harness": {"name": self.harness.name, "version": self.harness.version, "hash": self.harness.short_hash},
            "episodes_sha256": self.episodes_sha256,
            "worst": [
                {"episode_id": c.episode_id, "score": round(100 * c.overall, 2), "reasons": c.reasons}
                for c in failing[:worst]
            ],
        }


def run_episodes(
    harness: Harness,
    episodes: Sequence[LabeledEpisode],
    model: Model,
    *,
    tools: ToolRegistry | None = None,
    context_provider: Callable[[Request], Request] | None = None,
    on_case: Callable[[EpisodeCase], None] | None = None,
) -> EpisodesResult:
    """Run every episode through one agent, one after another (a ``scripted:`` model replays its
    outputs in call order), and score each trace. ``context_provider`` defaults to the harness's
    own; ``tools`` to a registry of the harness (closed at the end when it is made here)."""
    registry = tools or ToolRegistry(harness)
    provider = context_provider if context_provider is not None else load_context_provider(harness)
    agent = Agent(registry.harness, model, tools=registry, context_provider=provider)
    result = EpisodesResult(registry.harness, str(getattr(model, "name", type(model).__name__)))
    start = time.perf_counter()
    try:
        for episode in episodes:
            trace = agent.respond(episode.request()).trace
            scores, reasons = score_trace(episode, trace, registry.harness)
            case = EpisodeCase(episode.id, episode.intent, scores, reasons, trace)
            result.cases.append(case)
            if on_case is not None:
                on_case(case)
    finally:
        if tools is None:
            registry.close()
    result.wall_s = time.perf_counter() - start
    return result


def _file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    """Temp file beside ``path``, then ``os.replace``: a summary on disk is never half-written."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(result: EpisodesResult, out_dir: str | Path, stem: str, command: str = "") -> tuple[Path, Path]:
    """``<stem>_cases.jsonl`` (scores, reasons and the trace of each case) and ``<stem>.json``
    (the summary, with ``command``), written last."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    cases, summary = folder / f"{stem}_cases.jsonl", folder / f"{stem}.json"
    rows = "".join(json.dumps(c.to_row(), ensure_ascii=False, default=str) + "\n" for c in result.cases)
    _write_atomic(cases, rows)
    _write_atomic(summary, json.dumps({**result.summary(), "command": command}, indent=2, ensure_ascii=False))
    return cases, summary


def evaluate_file(
    harness_ref: str | Path,
    episodes_path: str | Path,
    model: Model | str,
    *,
    on_case: Callable[[EpisodeCase], None] | None = None,
) -> EpisodesResult:
    """Load the harness (and its context provider), the episodes and the model (a spec string or
    a :class:`~hat.models.base.Model`), then :func:`run_episodes`. The harness and the episodes
    are checked before the model loads."""
    harness = load_harness(harness_ref)
    episodes = read_episodes_file(episodes_path)
    provider = load_context_provider(harness)
    if isinstance(model, str):
        from hat.models import load_model

        model = load_model(model)
    result = run_episodes(harness, episodes, model, context_provider=provider, on_case=on_case)
    result.episodes_sha256 = _file_sha256(episodes_path)
    return result
