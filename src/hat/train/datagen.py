"""``hat datagen``: teacher trajectories under production and HSA harnesses, filtered by the judges.

The HSA-SFT data of the report: each simulated episode is run, through the real runtime
(:class:`~hat.harness.runtime.Agent` + :func:`~hat.env.sim.run_episode`), under either the
production harness or a *train-split* HSA variant of it (the coin flip is seeded per episode, with
probability ``hsa_ratio``), by a teacher (the privileged ``oracle`` by default, or any model spec
such as ``openai:<url>#<model>`` sampled k times). Every trajectory is judged against the harness it
ran under and kept only if every dimension reaches its threshold (rejection sampling). Kept
trajectories become chat rows of a Hugging Face dataset.

Why the conversation is *recorded* rather than rebuilt from the trace: hooks may rewrite what the
model sees (an HSA ``hook_edits`` variant inserts a context note before every model call) and
episodes may carry earlier turns (clarification follow-ups), neither of which
:meth:`~hat.harness.trace.Trace.to_messages` reproduces. The teacher is wrapped in a recorder, and a
row's ``messages`` are exactly the messages of the teacher's last call plus its last output, i.e.
the context every assistant turn was produced in. Without hooks or history both agree (tested).

The one edit: the runtime stops generation at ``</reply>`` and cuts the stop string, so an output
with an unclosed ``<reply>`` gets its ``</reply>`` back. A student trained on the restored text emits
``</reply>`` (where the runtime stops it) instead of learning to end replies without the tag.

Row columns: ``messages``; ``tools`` (JSON of the visible tool signatures); ``harness_hash``;
``harness_kind`` (``production`` | ``hsa``); ``harness_variant`` (applied transforms);
``augmentation`` (JSON of the variant's record); ``episode_id``, ``sample``, ``intent``, ``mode``,
``world_seed``, ``teacher``, ``status``; ``scores`` (every judge dimension); ``segments``: per
assistant message, character spans *within that message's content* of each ``<think>`` block
(``reasoning``), each ``<tool_call>`` incl. skill loads (``tool``) and the ``<reply>`` (``reply``).
Spans are local to the content so they do not depend on any chat template;
:func:`segment_token_spans` maps them to token spans for a given tokenizer.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hat.augment import Envelope, Variant, augment, load_envelope
from hat.env.episode import Episode
from hat.env.policies import POLICIES, policy_model
from hat.env.sim import run_episode
from hat.env.viewers import generate_episodes
from hat.errors import HatError, MissingDependencyError
from hat.harness.loader import load_harness
from hat.harness.runtime import Agent
from hat.harness.state import Harness, canonical_json, sha256_text
from hat.harness.tools import ToolRegistry
from hat.harness.trace import Trace
from hat.judge import judge_trace
from hat.models import load_model
from hat.models.base import Generation, GenerationConfig, Message, Model
from hat.train.datagen_config import DatagenConfig

__all__ = [
    "DATA_FILE",
    "RecordingModel",
    "TokenizedChat",
    "char_spans_to_token_spans",
    "datagen_episodes",
    "dataset_hash",
    "generate_dataset",
    "load_dataset",
    "load_rows",
    "message_segments",
    "recorded_conversation",
    "segment_token_spans",
    "tokenize_chat",
]

DATA_FILE = "data.jsonl"
ProgressFn = Callable[[int, int], None]
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S)
_TOOL = re.compile(r"<tool_call>.*?(?:</tool_call>|(?=<tool_call>)|$)", re.S)
_REPLY = re.compile(r"<reply>.*?(?:</reply>|$)", re.S)


def _seed(*parts: object) -> int:
    """A 31-bit seed from ``parts`` (SHA-256, stable across processes, unlike ``hash()``)."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:4], "big") >> 1


# -- episodes and harness states ------------------------------------------------------------------
def datagen_episodes(config: DatagenConfig) -> list[Episode]:
    """The config's episodes: ``episodes_per_world`` per world, world seeds from
    :meth:`DatagenConfig.world_chunks` (never an evaluation seed); ``comments_per_snapshot``
    consecutive episodes of a world share one room moment."""
    return [episode for episode, _ in _episodes_with_snapshots(config)]


def _episodes_with_snapshots(config: DatagenConfig) -> list[tuple[Episode, str]]:
    """Each episode with its snapshot key (world seed and snapshot index within the world)."""
    per = config.comments_per_snapshot
    out: list[tuple[Episode, str]] = []
    for episode_seed, count in config.world_chunks():
        episodes = generate_episodes(
            count,
            episode_seed,
            mode=config.mode,
            fault_rate=config.fault_rate,
            comments_per_snapshot=per,
            intent_mix=config.intent_mix,
        )
        out += [(episode, f"{episode_seed}-s{i // per}") for i, episode in enumerate(episodes)]
    return out


def choose_harness(
    production: Harness, episode: Episode, config: DatagenConfig, envelope: Envelope, snapshot: str | None = None
) -> tuple[Harness, Variant | None]:
    """Production or (with probability ``hsa_ratio``) a train-split variant, seeded by the episode id
    — or by the ``snapshot`` key when several comments share a snapshot, so they share the harness too."""
    key = episode.episode_id if snapshot is None or config.comments_per_snapshot <= 1 else f"snapshot:{snapshot}"
    coin = random.Random(f"datagen:{config.seed}:{key}:harness").random()
    if coin >= config.hsa_ratio:
        return production, None
    variant = augment(production, f"datagen:{config.seed}:{key}", envelope, split="train")
    return variant.harness, variant


# -- the teacher ----------------------------------------------------------------------------------
class RecordingModel:
    """Delegates to a model and remembers the messages of the last call (see the module docstring);
    :func:`recorded_conversation` turns them into a training conversation. Used by ``hat datagen``
    for the teacher and by RL rollouts (:mod:`hat.train.rollouts`) for the policy."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name
        self.messages: list[Message] | None = None

    def generate(
        self, messages: Sequence[Message], config: GenerationConfig | None = None, *, cache_key: str | None = None
    ) -> Generation:
        self.messages = [dict(m) for m in messages]
        return self.inner.generate(messages, config, cache_key=cache_key)

    def stream(
        self, messages: Sequence[Message], config: GenerationConfig | None = None, *, cache_key: str | None = None
    ) -> Iterator[str]:
        self.messages = [dict(m) for m in messages]
        return self.inner.stream(messages, config, cache_key=cache_key)


class _Teacher:
    """A simulator policy (built per episode: it reads the gold) or one shared model."""

    def __init__(self, config: DatagenConfig) -> None:
        self.spec, self.temperature = config.teacher, config.temperature
        self.shared: Model | None = None if config.teacher in POLICIES else load_model(config.teacher)

    def model(self, episode: Episode, harness: Harness, seed: int) -> Model:
        if self.shared is not None:
            return self.shared
        return policy_model(self.spec, episode, harness, seed=seed)

    def generation(self, harness: Harness, seed: int) -> GenerationConfig | None:
        """Sampling settings for a model teacher (the runtime's own defaults plus temperature/seed)."""
        if self.shared is None:
            return None
        return GenerationConfig(
            max_new_tokens=harness.limits.max_new_tokens, stop=("</reply>",), temperature=self.temperature, seed=seed
        )


def _restore_stop(content: str) -> str:
    body = _THINK.sub("", content)
    start = body.rfind("<reply>")
    return content + "</reply>" if start >= 0 and "</reply>" not in body[start:] else content


def recorded_conversation(recorder: RecordingModel, trace: Trace) -> list[Message]:
    """The conversation the recorded model saw and wrote: the messages of its last call plus its last
    output, with a cut ``</reply>`` restored; empty when the model was never called."""
    if recorder.messages is None or not trace.rounds:
        return []
    messages = [*recorder.messages, {"role": "assistant", "content": trace.rounds[-1].raw_output}]
    return [{**m, "content": _restore_stop(m["content"])} if m["role"] == "assistant" else m for m in messages]


def run_teacher(
    teacher: _Teacher, episode: Episode, harness: Harness, seed: int, tools: ToolRegistry
) -> tuple[Trace, list[Message]]:
    """One trajectory: the trace and the conversation the teacher saw and wrote."""
    recorder = RecordingModel(teacher.model(episode, harness, seed))
    agent = Agent(harness, recorder, tools=tools, generation=teacher.generation(harness, seed))
    trace = run_episode(agent, episode)
    return trace, recorded_conversation(recorder, trace)


# -- rows -----------------------------------------------------------------------------------------
def message_segments(content: str) -> list[tuple[str, int, int]]:
    """``(kind, start, end)`` character spans of one assistant output: ``reasoning`` (each
    ``<think>`` block), ``tool`` (each ``<tool_call>``, skill loads included) and ``reply``; tags are
    inside the spans. Tool calls or replies written inside a ``<think>`` are reasoning, as for the parser."""
    think = [(m.start(), m.end()) for m in _THINK.finditer(content)]
    spans = [("reasoning", s, e) for s, e in think]
    for kind, pattern in (("tool", _TOOL), ("reply", _REPLY)):
        spans += [
            (kind, m.start(), m.end())
            for m in pattern.finditer(content)
            if not any(s <= m.start() < e for s, e in think)
        ]
    return sorted(spans, key=lambda span: span[1])


def _segments(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [
        {"message": i, "kind": kind, "start": start, "end": end}
        for i, m in enumerate(messages)
        if m["role"] == "assistant"
        for kind, start, end in message_segments(m["content"])
    ]


def _tools_json(harness: Harness, trace: Trace) -> str:
    specs = [harness.tool(name) for name in trace.tools_visible]
    return json.dumps([s.signature() for s in specs if s is not None], ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class _Sample:
    snapshot: str
    episode: Episode
    harness: Harness
    variant: Variant | None
    index: int
    trace: Trace
    messages: list[Message]
    scores: dict[str, float]


def build_row(sample: _Sample, teacher: str) -> dict[str, Any]:
    """The dataset row of one accepted trajectory (columns: see the module docstring)."""
    variant = sample.variant
    return {
        "episode_id": sample.episode.episode_id,
        "snapshot": f"{sample.snapshot}:{sample.trace.harness_hash[:16]}",
        "sample": sample.index,
        "intent": sample.episode.gold.intent,
        "mode": sample.episode.mode,
        "world_seed": sample.episode.world_seed,
        "teacher": teacher,
        "status": sample.trace.status,
        "messages": sample.messages,
        "tools": _tools_json(sample.harness, sample.trace),
        "harness_hash": sample.trace.harness_hash,
        "harness_kind": "production" if variant is None else "hsa",
        "harness_variant": [] if variant is None else list(variant.applied),
        "augmentation": canonical_json({} if variant is None else variant.record),
        "scores": sample.scores,
        "segments": _segments(sample.messages),
    }


# -- acceptance -----------------------------------------------------------------------------------
def rejection_reasons(sample: _Sample, config: DatagenConfig) -> list[str]:
    """Why a trajectory is rejected: ``status``, ``empty`` or each dimension below its threshold."""
    reasons = ["status"] if config.require_ok and sample.trace.status != "ok" else []
    if not sample.messages:
        reasons.append("empty")
    return reasons + [d for d, t in config.thresholds.items() if sample.scores.get(d, 0.0) < t]


@dataclass
class _Tally:
    """Acceptance statistics, accumulated per trajectory."""

    samples: int = 0
    accepted: int = 0
    dims: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failed: Counter[str] = field(default_factory=Counter)
    groups: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, sample: _Sample, reasons: list[str], kept: bool) -> None:
        self.samples += 1
        self.accepted += kept
        for dim, score in sample.scores.items():
            self.dims[dim].append(score)
        self.failed.update(reasons)
        kind = "production" if sample.variant is None else "hsa"
        for group in (f"intent:{sample.episode.gold.intent}", f"harness:{kind}", f"status:{sample.trace.status}"):
            self.groups[group].update(samples=1, accepted=int(kept))

    def summary(self, config: DatagenConfig) -> dict[str, Any]:
        def rate(c: Counter[str]) -> float:
            return round(c["accepted"] / c["samples"], 4) if c["samples"] else 0.0

        def part(prefix: str) -> dict[str, dict[str, float]]:
            items = sorted((k.split(":", 1)[1], c) for k, c in self.groups.items() if k.startswith(prefix))
            return {name: {"samples": c["samples"], "accepted": c["accepted"], "rate": rate(c)} for name, c in items}

        return {
            "samples": self.samples,
            "accepted": self.accepted,
            "accept_rate": round(self.accepted / self.samples, 4) if self.samples else 0.0,
            "dims": {
                d: {
                    "mean": round(sum(v) / len(v), 4),
                    "pass_rate": round(sum(s >= config.thresholds[d] for s in v) / len(v), 4)
                    if d in config.thresholds
                    else None,
                }
                for d, v in sorted(self.dims.items())
            },
            "rejected_by": dict(sorted(self.failed.items())),
            "by_intent": part("intent:"),
            "by_harness": part("harness:"),
            "by_status": part("status:"),
        }


# -- the run --------------------------------------------------------------------------------------
@dataclass
class _Run:
    config: DatagenConfig
    production: Harness
    envelope: Envelope
    teacher: _Teacher
    tools: ToolRegistry
    tally: _Tally = field(default_factory=_Tally)
    variants: dict[str, tuple[Harness, Variant | None]] = field(default_factory=dict)

    def harness_for(self, episode: Episode, snapshot: str) -> tuple[Harness, Variant | None]:
        """The episode's harness state; one augmentation per snapshot, built once."""
        key = snapshot if snapshot and self.config.comments_per_snapshot > 1 else episode.episode_id
        if key not in self.variants:
            self.variants = {key: choose_harness(self.production, episode, self.config, self.envelope, snapshot)}
        return self.variants[key]

    def episode_rows(self, episode: Episode, snapshot: str = "") -> list[dict[str, Any]]:
        """Up to ``max_per_episode`` accepted, distinct rows from ``k`` samples of one episode."""
        harness, variant = self.harness_for(episode, snapshot)
        tools = self.tools if variant is None else ToolRegistry(harness)
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        try:
            for index in range(self.config.k):
                seed = _seed(self.config.seed, episode.episode_id, index)
                trace, messages = run_teacher(self.teacher, episode, harness, seed, tools)
                scores = {k: float(v.score) for k, v in judge_trace(episode, trace, harness).items()}
                sample = _Sample(
                    snapshot or episode.episode_id, episode, harness, variant, index, trace, messages, scores
                )
                reasons = rejection_reasons(sample, self.config)
                key = canonical_json(messages)
                kept = not reasons and key not in seen and len(rows) < self.config.max_per_episode
                self.tally.add(sample, reasons, kept)
                if kept:
                    seen.add(key)
                    rows.append(build_row(sample, self.config.teacher))
        finally:
            if tools is not self.tools:
                tools.close()
        return rows


def _collect(run: _Run, episodes: list[tuple[Episode, str]], progress: ProgressFn | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    limit = run.config.max_examples
    for i, (episode, snapshot) in enumerate(episodes):
        rows.extend(run.episode_rows(episode, snapshot))
        if progress is not None:
            progress(i + 1, len(episodes))
        if limit is not None and len(rows) >= limit:
            return rows[:limit]
    return rows


def generate_dataset(config: DatagenConfig, out_dir: str | Path, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Generate, filter and write a dataset into ``out_dir`` (new or empty). Writes ``data.jsonl``
    (plus ``data.parquet`` / ``arrow/`` if configured), ``config.yaml`` (the resolved config) and
    ``stats.json``; returns the stats (accept rates per dimension, intent and harness kind, the
    dataset hash, wall time). ``progress(done, total)`` is called after every episode."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise HatError(f"{out} exists and is not empty; choose a new folder for the dataset")
    production = load_harness(config.harness)
    start = time.perf_counter()
    episodes = _episodes_with_snapshots(config)
    run = _Run(config, production, load_envelope(config.envelope), _Teacher(config), ToolRegistry(production))
    try:
        rows = _collect(run, episodes, progress)
    finally:
        run.tools.close()
    out.mkdir(parents=True, exist_ok=True)
    digest = write_dataset(rows, out, config.formats)
    stats = {
        "episodes": len(episodes),
        "rows": len(rows),
        "dataset_hash": digest,
        "production_hash": production.content_hash(),
        **run.tally.summary(config),
        "wall_s": round(time.perf_counter() - start, 2),
    }
    config.save(out / "config.yaml")
    (out / "stats.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return stats


# -- files ----------------------------------------------------------------------------------------
def dataset_hash(rows: Sequence[dict[str, Any]]) -> str:
    """SHA-256 of the canonical JSONL text of ``rows`` (the bytes of ``data.jsonl``)."""
    return sha256_text("".join(canonical_json(r) + "\n" for r in rows))


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError("datasets", "train", "Writing parquet/arrow datasets") from exc
    return datasets


def write_dataset(rows: Sequence[dict[str, Any]], out: Path, formats: Sequence[str] = ("jsonl",)) -> str:
    """Write ``data.jsonl`` (always: canonical, hashable bytes) and the other formats; return the hash."""
    (out / DATA_FILE).write_text("".join(canonical_json(r) + "\n" for r in rows), encoding="utf-8")
    if rows and ({"parquet", "arrow"} & set(formats)):
        dataset = _datasets().Dataset.from_list(list(rows))
        if "parquet" in formats:
            dataset.to_parquet(str(out / "data.parquet"))
        if "arrow" in formats:
            dataset.save_to_disk(str(out / "arrow"))
    return dataset_hash(rows)


def load_rows(data_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of a datagen folder (or of a ``.jsonl`` file), in order."""
    path = Path(data_dir)
    path = path / DATA_FILE if path.is_dir() else path
    if not path.is_file():
        raise HatError(f"no dataset at {path}; create one with: hat datagen --out {Path(data_dir)}")
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_dataset(data_dir: str | Path) -> Any:
    """The rows as a :class:`datasets.Dataset` (from ``arrow/`` when saved, else from the JSONL)."""
    datasets = _datasets()
    arrow = Path(data_dir) / "arrow"
    if arrow.is_dir():
        return datasets.load_from_disk(str(arrow))
    return datasets.Dataset.from_list(load_rows(data_dir))


# -- tokens ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenizedChat:
    """A conversation rendered by a chat template and tokenized once.

    ``content``: per message, the ``[start, end)`` character span of its content in ``text``;
    ``turn``: the same but, for assistant messages, extended over the end-of-turn (EOS) token that
    follows, because the model must learn to stop; ``offsets``: per token, its character span."""

    text: str
    input_ids: list[int]
    offsets: list[tuple[int, int]]
    content: list[tuple[int, int]]
    turn: list[tuple[int, int]]


def _render(tokenizer: Any, messages: Sequence[Message]) -> str:
    return str(tokenizer.apply_chat_template(list(messages), tokenize=False))


def _content_spans(tokenizer: Any, messages: Sequence[Message], text: str) -> tuple[list, list]:
    """Locate each message's content through the rendering of the conversation up to it, which must
    be a prefix of the whole rendering (true of ChatML templates such as SmolLM2's)."""
    eos = getattr(tokenizer, "eos_token", None) or ""
    content, turn = [], []
    for i, message in enumerate(messages):
        head = _render(tokenizer, messages[: i + 1])
        start = head.rfind(message["content"])
        if not text.startswith(head) or start < 0:
            raise HatError("the chat template does not render conversations prefix by prefix; use a ChatML template")
        end = start + len(message["content"])
        content.append((start, end))
        close = end + len(eos) if eos and message["role"] == "assistant" and head.startswith(eos, end) else end
        turn.append((start, close))
    return content, turn


def tokenize_chat(messages: Sequence[Message], tokenizer: Any) -> TokenizedChat:
    """Render ``messages`` with the tokenizer's own chat template (the one inference uses) and
    tokenize the text once, as the runtime's transformers backend does. Needs a fast tokenizer."""
    text = _render(tokenizer, messages)
    content, turn = _content_spans(tokenizer, messages, text)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = [(int(s), int(e)) for s, e in encoded["offset_mapping"]]
    return TokenizedChat(text, list(encoded["input_ids"]), offsets, content, turn)


def char_spans_to_token_spans(
    offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Map character spans ``[start, end)`` to token spans ``[first, last)``: the tokens whose
    characters overlap the span. A token that straddles a boundary (a BPE merge across it) is
    included, so decoding a token span gives the segment, plus at most those straddling characters."""
    starts = [s for s, _ in offsets]
    ends = [e for _, e in offsets]
    return [(bisect.bisect_right(ends, start), bisect.bisect_left(starts, end)) for start, end in spans]


def segment_token_spans(row: dict[str, Any], tokenizer: Any) -> list[dict[str, Any]]:
    """The row's ``segments`` as token spans of :func:`tokenize_chat` (``start``/``end`` are token
    indices) for ``tokenizer``: the GDPO segment masks of an RL rollout or a per-segment SFT loss."""
    chat = tokenize_chat(row["messages"], tokenizer)
    spans = [
        (chat.content[s["message"]][0] + s["start"], chat.content[s["message"]][0] + s["end"]) for s in row["segments"]
    ]
    tokens = char_spans_to_token_spans(chat.offsets, spans)
    return [{**s, "start": a, "end": b} for s, (a, b) in zip(row["segments"], tokens, strict=True)]
