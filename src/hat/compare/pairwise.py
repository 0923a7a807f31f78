"""Blind pairwise comparison of two systems on the same simulated comments.

A **system** is a model spec (``smollm2-hat``, ``openai:…``, ``scripted:…``) or a simulator
policy (``oracle``, ``polite``, …) on a harness (built-in name or folder), so one tool compares
two models or two harness versions. Both systems answer the same episodes of a suite (same seed,
same comments, same tool faults) through the real runtime (:func:`hat.eval.runner.run_cases`).

Blinding: each pair shows the two replies as **A** and **B**; a seeded coin per episode decides
which system is A, and the pairs are shuffled, so neither position nor file order says which is
which. What a rater sees (``pairs.jsonl``: comment, dialogue, reference facts, each reply and its
tool calls) is written apart from what unblinds it (``key.json``: the systems, the position of
the model in each pair, and the judges' scores). A rater gets ``pairs.jsonl`` only. One caveat:
when two harness versions name their tools differently, the tool names shown can give a side
away (the rating page folds them away by default).

Three kinds of rater write the same rating rows ``{pair_id, rater, verdict: A|B|tie, reason}``:

- **the judges** (:func:`judge_verdict`): each of the four task dimensions (accuracy,
  effectiveness, tool rationality, skill selection — the eval's overall score; the CoT-length
  score is left out as it is a training penalty) gives one vote to the side that scores higher on
  it by more than ``tol``; the side with more votes wins; equal votes (including all-equal) are a
  tie. Written at generation time, as the judges score every trace anyway.
- **an LLM** over any model spec (:class:`PairwiseLLMJudge`, ``openai:`` in practice);
- **a person** on the rating page (:mod:`hat.compare.rate`).

:func:`tally` unblinds one rater's ratings with the key: wins, ties and losses of the *model*
against the *baseline*, each share with a Wilson 95 % interval, the share of wins among decided
pairs, and the same per intent. A pair rated twice by one rater counts once, with its last rating.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from hat.compare.stats import Interval, wilson_interval
from hat.errors import HatError
from hat.eval.run_options import RunOptions
from hat.eval.runner import TASK_DIMS, CaseResult, run_cases, write_atomic
from hat.eval.suites import Case, build_cases
from hat.harness.protocol import strip_reasoning
from hat.harness.trace import append_jsonl
from hat.models.base import GenerationConfig, Message, Model
from hat.textio import read_json, read_jsonl

__all__ = [
    "KEY_FILE",
    "PAIRS_FILE",
    "Key",
    "Pair",
    "PairwiseLLMJudge",
    "PairwiseResult",
    "Rating",
    "Side",
    "System",
    "Tally",
    "as_verdict",
    "judge_verdict",
    "load_ratings",
    "make_pairs",
    "parse_verdict",
    "ratings_path",
    "read_key",
    "read_pairs",
    "run_pairwise",
    "tally",
    "write_pairs",
    "write_ratings",
]

Verdict = Literal["A", "B", "tie"]
VERDICTS: tuple[Verdict, ...] = ("A", "B", "tie")
PAIRS_FILE, KEY_FILE = "pairs.jsonl", "key.json"


@dataclass(frozen=True)
class System:
    """A model spec or simulator policy on a harness."""

    model: str
    harness: str = "livestream"

    @property
    def label(self) -> str:
        return self.model if self.harness == "livestream" else f"{self.model} @ {self.harness}"


@dataclass(frozen=True)
class Side:
    """One reply as a rater sees it: the text, how the request ended, the tool calls made."""

    reply: str
    status: str
    tools: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, case: CaseResult, limit: int = 400) -> Side:
        tools = tuple(
            {
                "name": c.name,
                "arguments": c.arguments,
                "status": c.status,
                "result": json.dumps(c.result, ensure_ascii=False, default=str)[:limit],
            }
            for c in case.trace.tool_calls
        )
        return cls(case.trace.reply, case.trace.status, tools)


@dataclass(frozen=True)
class Pair:
    """One blinded pair. ``intent`` is the comment's (for the per-intent breakdown), never a side's."""

    pair_id: str
    episode_id: str
    intent: str
    comments: tuple[str, ...]
    history: tuple[dict[str, str], ...]
    facts: tuple[str, ...]
    a: Side
    b: Side

    def side(self, position: str) -> Side:
        return self.a if position == "A" else self.b

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Pair:
        def side(data: Mapping[str, Any]) -> Side:
            return Side(str(data["reply"]), str(data["status"]), tuple(dict(t) for t in data.get("tools", ())))

        return cls(
            str(row["pair_id"]),
            str(row["episode_id"]),
            str(row["intent"]),
            tuple(str(c) for c in row["comments"]),
            tuple(dict(m) for m in row.get("history", ())),
            tuple(str(f) for f in row.get("facts", ())),
            side(row["a"]),
            side(row["b"]),
        )


@dataclass(frozen=True)
class Key:
    """What unblinds the pairs: the two systems and, per pair, the model's position and both sides'
    judge scores. Never shown to a rater."""

    model: System
    baseline: System
    suite: str
    seed: int
    model_position: dict[str, Verdict]
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Key:
        return cls(
            System(**data["model"]),
            System(**data["baseline"]),
            str(data["suite"]),
            int(data["seed"]),
            dict(data["model_position"]),
            dict(data.get("scores", {})),
        )


@dataclass(frozen=True)
class Rating:
    pair_id: str
    rater: str
    verdict: Verdict
    reason: str = ""

    def to_line(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


def as_verdict(value: object) -> Verdict | None:
    """``value`` as a verdict (``A``, ``B`` or ``tie``), or ``None``."""
    for verdict in VERDICTS:
        if value == verdict:
            return verdict
    return None


# -- generating pairs ------------------------------------------------------------------------------
def judge_verdict(
    scores_a: Mapping[str, float], scores_b: Mapping[str, float], *, dims: Sequence[str] = TASK_DIMS, tol: float = 1e-9
) -> tuple[Verdict, str]:
    """The judges' verdict on one pair: one vote per dimension (see the module docstring)."""
    won_a = [d for d in dims if scores_a[d] > scores_b[d] + tol]
    won_b = [d for d in dims if scores_b[d] > scores_a[d] + tol]
    verdict: Verdict = "A" if len(won_a) > len(won_b) else "B" if len(won_b) > len(won_a) else "tie"
    reason = f"A better on: {', '.join(won_a) or '-'}; B better on: {', '.join(won_b) or '-'}"
    return verdict, reason


def _model_position(seed: int, episode_id: str) -> Verdict:
    return "A" if random.Random(f"pairwise:{seed}:{episode_id}").random() < 0.5 else "B"


def make_pairs(
    cases: Sequence[Case],
    model_results: Sequence[CaseResult],
    baseline_results: Sequence[CaseResult],
    *,
    model: System,
    baseline: System,
    suite: str = "t1",
    seed: int = 0,
) -> tuple[list[Pair], Key, list[Rating]]:
    """Blinded pairs (shuffled, seeded), their key, and the judges' ratings of them."""
    by_model = {r.episode_id: r for r in model_results}
    by_base = {r.episode_id: r for r in baseline_results}
    episodes = [c.episode for c in cases if c.episode.episode_id in by_model and c.episode.episode_id in by_base]
    random.Random(f"pairwise-order:{seed}").shuffle(episodes)
    pairs, ratings = [], []
    positions: dict[str, Verdict] = {}
    scores: dict[str, dict[str, dict[str, float]]] = {}
    for k, episode in enumerate(episodes, 1):
        pair_id, eid = f"p{k:04d}", episode.episode_id
        m, b = by_model[eid], by_base[eid]
        positions[pair_id] = _model_position(seed, eid)
        first, second = (m, b) if positions[pair_id] == "A" else (b, m)
        shown = Side.of(first), Side.of(second)
        pairs.append(Pair(pair_id, eid, m.intent, episode.comments, episode.history, episode.gold.facts, *shown))
        scores[pair_id] = {"model": m.scores, "baseline": b.scores}
        verdict, reason = judge_verdict(first.scores, second.scores)
        ratings.append(Rating(pair_id, "judges", verdict, reason))
    return pairs, Key(model, baseline, suite, seed, positions, scores), ratings


def run_pairwise(
    model: System,
    baseline: System,
    *,
    suite: str = "t1",
    n: int = 100,
    seed: int = 0,
    batch_size: int = 1,
    load_options: Mapping[str, Any] | None = None,
    on_case: Callable[[CaseResult], None] | None = None,
    run_options: Mapping[str, RunOptions] | None = None,
) -> tuple[list[Pair], Key, list[Rating]]:
    """Both systems on the same ``n`` episodes of ``suite`` (model first, then baseline; ``on_case``
    is called as each of the ``2n`` runs finishes); see :func:`make_pairs`. ``run_options``: per model
    spec, how it decodes (:mod:`hat.eval.run_options`); a spec not in it runs with ``batch_size`` and
    ``load_options``."""
    results = []
    cases_model: list[Case] = []
    for system in (model, baseline):
        cases = build_cases(suite, n=n, seed=seed, harness=system.harness)
        cases_model = cases_model or cases
        chosen = (run_options or {}).get(system.model)
        run = run_cases(
            suite,
            cases,
            system.model,
            seed=seed,
            batch_size=chosen.batch_size if chosen else batch_size,
            load_options=chosen.load_options if chosen else dict(load_options or {}),
            on_case=on_case,
        )
        results.append(run.cases)
    return make_pairs(cases_model, results[0], results[1], model=model, baseline=baseline, suite=suite, seed=seed)


# -- files -----------------------------------------------------------------------------------------
def ratings_path(folder: str | Path, rater: str) -> Path:
    """``<folder>/ratings-<rater>.jsonl`` (the rater name reduced to a safe file name)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", rater).strip("._") or "rater"
    return Path(folder) / f"ratings-{safe[:60]}.jsonl"


def write_pairs(folder: str | Path, pairs: Sequence[Pair], key: Key) -> tuple[Path, Path]:
    """``pairs.jsonl`` (for raters) and ``key.json`` (kept apart), each written atomically."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    pairs_file, key_file = root / PAIRS_FILE, root / KEY_FILE
    write_atomic(pairs_file, "".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in pairs))
    write_atomic(key_file, json.dumps(key.to_dict(), indent=2, ensure_ascii=False) + "\n")
    return pairs_file, key_file


def write_ratings(path: str | Path, ratings: Iterable[Rating]) -> int:
    """Append ratings to a JSONL file (one line each, flushed and fsynced)."""
    return append_jsonl(path, (r.to_line() for r in ratings), fsync=True)


def read_pairs(path: str | Path) -> list[Pair]:
    """The pairs of a ``pairs.jsonl`` (or of the folder holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / PAIRS_FILE
    out = []
    for number, row in read_jsonl(path, what="pairs file"):
        try:
            out.append(Pair.from_dict(row))
        except (KeyError, TypeError, AttributeError) as exc:
            raise HatError(f"{path}:{number}: not a pair ({exc!r}); write pairs with hat compare pairwise") from exc
    return out


def read_key(path: str | Path) -> Key:
    path = Path(path)
    if path.is_dir():
        path = path / KEY_FILE
    try:
        return Key.from_dict(read_json(path, what="key file"))
    except (KeyError, TypeError) as exc:
        raise HatError(f"{path}: not a pairwise key ({exc!r}); write it with hat compare pairwise") from exc


def load_ratings(path: str | Path) -> dict[str, list[Rating]]:
    """Ratings of a JSONL file by rater, in file order; a bad row names its line."""
    out: dict[str, list[Rating]] = defaultdict(list)
    for number, row in read_jsonl(path, what="ratings file"):
        verdict = as_verdict(row.get("verdict")) if isinstance(row, dict) else None
        if verdict is None or "pair_id" not in row:
            raise HatError(f"{path}:{number}: a rating needs pair_id and verdict A, B or tie; got {row!r:.120}")
        rater = str(row.get("rater") or "unknown")
        out[rater].append(Rating(str(row["pair_id"]), rater, verdict, str(row.get("reason", ""))))
    return dict(out)


# -- tally -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tally:
    """Wins, ties and losses of the model against the baseline."""

    wins: int = 0
    ties: int = 0
    losses: int = 0

    @property
    def n(self) -> int:
        return self.wins + self.ties + self.losses

    def add(self, outcome: str) -> Tally:
        return Tally(self.wins + (outcome == "win"), self.ties + (outcome == "tie"), self.losses + (outcome == "loss"))

    def shares(self, level: float = 0.95) -> dict[str, Interval]:
        return {
            "win": wilson_interval(self.wins, self.n, level),
            "tie": wilson_interval(self.ties, self.n, level),
            "loss": wilson_interval(self.losses, self.n, level),
            "win_of_decided": wilson_interval(self.wins, self.wins + self.losses, level),
        }

    def to_dict(self) -> dict[str, Any]:
        """Counts and shares; a share with nothing to count (no pairs, or no decided pairs for
        ``win_of_decided``) is ``None`` rather than a 0 that reads as a measured loss."""
        decided = self.wins + self.losses
        shares = {
            k: v.to_dict(4) if (decided if k == "win_of_decided" else self.n) else None
            for k, v in self.shares().items()
        }
        return {"n": self.n, "wins": self.wins, "ties": self.ties, "losses": self.losses, **shares}


@dataclass(frozen=True)
class PairwiseResult:
    rater: str
    model: str
    baseline: str
    n_pairs: int
    overall: Tally
    by_intent: dict[str, Tally]

    @property
    def n_rated(self) -> int:
        return self.overall.n

    def to_dict(self) -> dict[str, Any]:
        return {
            "rater": self.rater,
            "model": self.model,
            "baseline": self.baseline,
            "n_pairs": self.n_pairs,
            "n_rated": self.n_rated,
            "overall": self.overall.to_dict(),
            "by_intent": {k: v.to_dict() for k, v in sorted(self.by_intent.items())},
        }


def _outcome(verdict: str, model_position: str) -> str:
    if verdict == "tie":
        return "tie"
    return "win" if verdict == model_position else "loss"


def tally(pairs: Sequence[Pair], key: Key, ratings: Sequence[Rating], *, rater: str | None = None) -> PairwiseResult:
    """Unblind one rater's ratings (the last per pair) into wins/ties/losses of the model."""
    intents = {p.pair_id: p.intent for p in pairs}
    last = {r.pair_id: r for r in ratings}
    unknown = sorted(set(last) - set(intents))
    if unknown:
        raise HatError(f"ratings for pairs not in this comparison: {', '.join(unknown[:5])}; wrong folder?")
    overall, by_intent = Tally(), defaultdict[str, Tally](Tally)
    for pair_id, rating in last.items():
        outcome = _outcome(rating.verdict, key.model_position[pair_id])
        overall = overall.add(outcome)
        by_intent[intents[pair_id]] = by_intent[intents[pair_id]].add(outcome)
    name = rater or (ratings[0].rater if ratings else "")
    return PairwiseResult(name, key.model.label, key.baseline.label, len(pairs), overall, dict(by_intent))


# -- LLM judge -------------------------------------------------------------------------------------
PAIRWISE_RUBRIC = """\
You compare two replies of an AI avatar host in a live-shopping stream to the same viewer \
comment. A better reply answers what the viewer asked, states only facts backed by the tool \
results or reference facts shown, is warm and brief enough to say aloud, and respects the shop's \
rules. Length alone is not quality; ignore the order in which the replies are shown.

Answer with exactly one line "Verdict: 1", "Verdict: 2" or "Verdict: tie", then one short \
sentence of reasons."""

_VERDICT = re.compile(r"\bverdict\b\W{0,6}(?:is\s+)?(?:reply\s*)?(1|2|tie|both|neither)\b", re.IGNORECASE)
_BARE = re.compile(r"^\W*(?:reply\s*)?(1|2|tie)\W*$", re.IGNORECASE)


def parse_verdict(text: str) -> Literal["1", "2", "tie"] | None:
    """``"1"``, ``"2"`` or ``"tie"`` from a judge model's answer (reasoning spans dropped); ``None``
    when no verdict can be read."""
    body = strip_reasoning(text or "").strip()
    match = _VERDICT.search(body) or _BARE.match(body.splitlines()[0] if body else "")
    if not match:
        return None
    word = match.group(1).lower()
    return "1" if word == "1" else "2" if word == "2" else "tie"


def _describe(side: Side) -> str:
    calls = "\n".join(
        f"  - {t['name']}({json.dumps(t['arguments'], ensure_ascii=False)}) -> {t['status']}: {t['result']}"
        for t in side.tools
    )
    return f"Tool results it saw:\n{calls or '  (no tool calls)'}\nReply: {side.reply}"


class PairwiseLLMJudge:
    """A rater backed by a chat model. With ``swap`` (default) it is asked twice, the replies in
    both orders, to cancel position bias: agreeing answers give that verdict, disagreeing answers
    a tie, one unreadable answer defers to the other; two unreadable answers give no rating."""

    def __init__(self, model: Model, *, name: str = "llm", swap: bool = True, max_new_tokens: int = 96) -> None:
        self.model, self.name, self.swap = model, name, swap
        self.config = GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0)

    def messages(self, pair: Pair, order: tuple[Verdict, Verdict] = ("A", "B")) -> list[Message]:
        history = "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in pair.history) or "(none)"
        user = (
            f"Dialogue so far:\n{history}\n\nViewer comment(s):\n"
            + "\n".join(pair.comments)
            + f"\n\nReference facts: {'; '.join(pair.facts) or '(none)'}\n\n"
            + f"=== Reply 1 ===\n{_describe(pair.side(order[0]))}\n\n=== Reply 2 ===\n{_describe(pair.side(order[1]))}"
        )
        return [{"role": "system", "content": PAIRWISE_RUBRIC}, {"role": "user", "content": user}]

    def _ask(self, pair: Pair, order: tuple[Verdict, Verdict]) -> tuple[Verdict | None, str]:
        """The verdict in A/B terms (the answer's 1/2 mapped back through ``order``) and the raw text."""
        text = self.model.generate(self.messages(pair, order), self.config).text
        answer = parse_verdict(text)
        if answer is None:
            return None, text
        return ("tie" if answer == "tie" else order[0] if answer == "1" else order[1]), text

    def __call__(self, pair: Pair) -> Rating | None:
        first, raw = self._ask(pair, ("A", "B"))
        if not self.swap:
            return None if first is None else Rating(pair.pair_id, self.name, first, raw.strip()[:200])
        second, _ = self._ask(pair, ("B", "A"))
        answers = [v for v in (first, second) if v is not None]
        if not answers:
            return None
        verdict: Verdict = answers[0] if len(set(answers)) == 1 else "tie"
        reason = f"A-first: {first or 'unreadable'}; B-first: {second or 'unreadable'}"
        return Rating(pair.pair_id, self.name, verdict, reason)
