"""HSA-RL rollouts: groups and the coin flip, multi-turn episodes through the real runtime, the
conversation as tokens with segment labels, and the rewards per dimension.

Kept free of TRL and torch so that any trainer (TRL here, a verl agent loop at scale) can use it.

1. **Groups and the coin flip** (:class:`RolloutRunner`). A group is ``G`` rollouts of one episode
   under one harness state; a seeded coin per group picks the production harness or (probability
   ``hsa_prob``) a *train-split* HSA variant. The seed is ``(seed, step, episode)``, so every process
   holding part of a group draws the same harness.
2. **Rollouts** through :class:`~hat.harness.runtime.Agent` + :func:`~hat.env.sim.run_episode`
   (hooks, tools with fault injection, feedback, retries — exactly the runtime that serves), with
   the model a :data:`RolloutPolicy` returns (the trainer's live policy). The conversation is
   recorded as ``hat datagen`` records it (what the model was shown, then its output).
3. **Tokens** (:func:`rollout_tokens`). The conversation is rendered with the tokenizer's chat
   template and tokenized once; every token of a policy turn is labelled with its segment —
   ``tool`` for a round that called tools or loaded skills, ``reply`` for any other round (the
   reply, and malformed or rejected attempts at one) — and ``<think>`` content is marked as
   reasoning. System, user, tool-observation and feedback tokens, and the chat template's headers,
   belong to no segment. The completion starts at the first policy token and ends with the last
   policy turn's end-of-turn token.
4. **Rewards**: the judges per dimension (:func:`~hat.judge.judge_trace`) and ``q(L)`` per segment,
   ``L`` the reasoning tokens of that segment in the policy's tokenizer.

Known approximation: the token ids are the re-tokenized conversation, not the ids the sampler drew
(the runtime hands over text). A BPE merge across a turn's edges can differ from the sampled ids;
the loss is then taken on the canonical tokenization of the same text, as SFT's is.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hat.augment import Envelope, Variant, augment
from hat.env.episode import Episode
from hat.env.sim import run_episode
from hat.errors import HatError
from hat.harness.runtime import Agent
from hat.harness.state import Harness
from hat.harness.tools import ToolRegistry
from hat.harness.trace import Round, Trace
from hat.judge import SEGMENTS, judge_trace, q
from hat.models.base import GenerationConfig, Message, Model
from hat.models.batching import map_batched
from hat.train.datagen import (
    RecordingModel,
    char_spans_to_token_spans,
    message_segments,
    recorded_conversation,
    tokenize_chat,
)

__all__ = [
    "Rollout",
    "RolloutJob",
    "RolloutPolicy",
    "RolloutRunner",
    "RolloutTokens",
    "inert_tokens",
    "rollout_tokens",
    "round_segment",
]

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


# -- rollout → tokens -----------------------------------------------------------------------------
def round_segment(rnd: Round) -> str:
    """``tool`` for a round that called tools or loaded skills, ``reply`` for every other round."""
    return "tool" if rnd.action == "tool_calls" else "reply"


@dataclass(frozen=True)
class RolloutTokens:
    """A rollout as TRL's prompt/completion split. Per completion token: ``segments`` — ``tool`` |
    ``reply`` for the policy's own tokens, ``""`` for the rest (template headers, tool
    observations, feedback); ``reasoning`` — inside a ``<think>`` block (counted for ``q(L)``)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    segments: list[str]
    reasoning: list[bool]

    @property
    def env_mask(self) -> list[int]:
        """TRL's ``env_mask``: 1 for a token the policy wrote, 0 for one the environment did."""
        return [int(bool(s)) for s in self.segments]

    def reasoning_tokens(self) -> dict[str, int]:
        """``L`` per segment: reasoning tokens written in that segment's rounds."""
        counts = {"tool": 0, "reply": 0}
        for segment, thinking in zip(self.segments, self.reasoning, strict=True):
            if segment and thinking:
                counts[segment] = counts.get(segment, 0) + 1
        return counts


def inert_tokens(tokenizer: Any, prompt_ids: list[int] | None = None) -> RolloutTokens:
    """A rollout in which the policy wrote nothing (the backend failed, or an input hook refused the
    request before the model ran): one end-of-turn token outside every segment, so it is dropped."""
    eos = int(tokenizer.eos_token_id)
    return RolloutTokens(prompt_ids or [eos], [eos], [""], [False])


def _model_view(messages: Sequence[Message], tokenizer: Any) -> list[dict[str, str]]:
    """The messages as the transformers backend renders them: user and tool turns with the
    tokenizer's special-token text broken (so the tokens are the ones the policy was shown)."""
    from hat.models.transformers_backend import _tokenizer_specials, guard_user_turns, special_token_breaker

    return guard_user_turns(messages, special_token_breaker(_tokenizer_specials(tokenizer)))


def _tokenize(messages: list[dict[str, str]], tokenizer: Any) -> Any:
    """:func:`~hat.train.datagen.tokenize_chat`; a template that rejects ``tool`` turns gets them as
    ``user`` turns, as the backend does."""
    try:
        return tokenize_chat(messages, tokenizer)
    except HatError:
        raise
    except Exception:
        if not any(m["role"] == "tool" for m in messages):
            raise
        return tokenize_chat([{**m, "role": "user"} if m["role"] == "tool" else m for m in messages], tokenizer)


def _reasoning_spans(content: str, offset: int) -> list[tuple[int, int]]:
    """Character spans of the text inside each ``<think>`` block (tags excluded), shifted by ``offset``."""
    spans = []
    for kind, start, end in message_segments(content):
        if kind != "reasoning":
            continue
        inner_end = end - len(_THINK_CLOSE) if content[start:end].endswith(_THINK_CLOSE) else end
        spans.append((offset + start + len(_THINK_OPEN), offset + inner_end))
    return spans


def rollout_tokens(messages: Sequence[Message], rounds: Sequence[Round], tokenizer: Any) -> RolloutTokens:
    """Token ids and per-token labels of one rollout (module docstring, step 3).

    ``messages``: the whole conversation (what the policy was shown before its first round, then
    every round's output and what followed it); ``rounds``: the trace's rounds, one per assistant
    message at the end of ``messages`` (earlier assistant messages are history, part of the prompt).
    """
    view = _model_view(messages, tokenizer)
    chat = _tokenize(view, tokenizer)
    assistant = [i for i, m in enumerate(view) if m["role"] == "assistant"]
    if not rounds or len(assistant) < len(rounds):
        raise HatError(f"the conversation has {len(assistant)} assistant turns for {len(rounds)} rounds")
    turns = assistant[len(assistant) - len(rounds) :]
    segment_spans = [(chat.turn[i], round_segment(rnd)) for i, rnd in zip(turns, rounds, strict=True)]
    thinking = [s for i in turns for s in _reasoning_spans(view[i]["content"], chat.content[i][0])]
    n = len(chat.input_ids)
    segments, reasoning = [""] * n, [False] * n
    token_spans = char_spans_to_token_spans(chat.offsets, [span for span, _ in segment_spans])
    for (first, last), (_, segment) in zip(token_spans, segment_spans, strict=True):
        segments[first:last] = [segment] * (last - first)
    for first, last in char_spans_to_token_spans(chat.offsets, thinking):
        reasoning[first:last] = [True] * (last - first)
    written = [(first, last) for first, last in token_spans if last > first]  # an error round wrote nothing
    if not written:  # the backend failed before the policy wrote a token
        return inert_tokens(tokenizer, list(chat.input_ids))
    start, end = written[0][0], written[-1][1]
    return RolloutTokens(
        prompt_ids=list(chat.input_ids[:start]),
        completion_ids=list(chat.input_ids[start:end]),
        segments=segments[start:end],
        reasoning=[r and bool(s) for r, s in zip(reasoning[start:end], segments[start:end], strict=True)],
    )


# -- rollouts -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RolloutJob:
    """One rollout to run: an episode under a harness state, rollout ``index`` of ``group``."""

    episode: Episode
    harness: Harness
    variant: Variant | None
    group: int
    index: int
    seed: int

    @property
    def kind(self) -> str:
        return "production" if self.variant is None else "hsa"


RolloutPolicy = Callable[[RolloutJob], Model]
"""Which model writes a rollout. The trainer's default is the live policy for every job; tests
and baselines may pass simulator policies (``hat.env.policies.policy_model``)."""


@dataclass(frozen=True)
class Rollout:
    """A finished rollout: its trace, the recorded conversation, tokens, judge rewards per
    dimension and ``q(L)`` per segment (``cot_q``) and of the whole rollout (``q_total``)."""

    job: RolloutJob
    trace: Trace
    messages: list[Message]
    tokens: RolloutTokens
    rewards: dict[str, float]
    cot_q: dict[str, float]
    cot_tokens: int
    q_total: float


@dataclass
class RolloutRunner:
    """Plans groups (the coin flip) and runs rollouts through the runtime.

    ``max_new_tokens``: per model call (None: the harness's limit); ``temperature``/``top_p``: the
    sampling of model policies; ``segment_dims``: which judge dimensions are rewards."""

    production: Harness
    envelope: Envelope
    hsa_prob: float = 0.5
    seed: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int | None = None
    segment_dims: Mapping[str, Sequence[str]] = field(default_factory=lambda: dict(SEGMENTS))
    _variants: dict[str, tuple[Harness, Variant | None]] = field(default_factory=dict, repr=False)

    @property
    def dims(self) -> list[str]:
        return [d for dims in self.segment_dims.values() for d in dims]

    def harness_for(self, episode: Episode, step: int) -> tuple[Harness, Variant | None]:
        """The coin flip of one group, seeded by ``(seed, step, episode)``: every process that holds
        part of the group draws the same harness."""
        key = f"rl:{self.seed}:{step}:{episode.episode_id}"
        if key not in self._variants:
            if random.Random(f"{key}:harness").random() >= self.hsa_prob:
                self._variants[key] = (self.production, None)
            else:
                variant = augment(self.production, key, self.envelope, split="train")
                self._variants[key] = (variant.harness, variant)
        return self._variants[key]

    def plan(self, episodes: Sequence[Episode], group_size: int, step: int, offset: int = 0) -> list[RolloutJob]:
        """Jobs for a slice of a generation batch: rollout ``offset + i`` is rollout
        ``(offset + i) % group_size`` of group ``(offset + i) // group_size`` (TRL's layout)."""
        self._variants.clear()
        jobs = []
        for i, episode in enumerate(episodes):
            position = offset + i
            group, index = divmod(position, group_size)
            harness, variant = self.harness_for(episode, step)
            seed = random.Random(f"rl:{self.seed}:{step}:{episode.episode_id}:{index}").getrandbits(31)
            jobs.append(RolloutJob(episode, harness, variant, group, index, seed))
        _check_groups(jobs)
        return jobs

    def generation(self, harness: Harness, seed: int) -> GenerationConfig:
        budget = self.max_new_tokens or harness.limits.max_new_tokens
        return GenerationConfig(
            max_new_tokens=budget, stop=("</reply>",), temperature=self.temperature, top_p=self.top_p, seed=seed
        )

    def run(self, jobs: Sequence[RolloutJob], policy: RolloutPolicy, tokenizer: Any) -> list[Rollout]:
        """Run every job and score it; results in job order. When the policy gives every job the
        same model and that model decodes batches (the trainer's live policy), the rollouts run
        together, one thread each, their model calls batched (:func:`~hat.models.batching.map_batched`;
        each rollout samples with its own seed, so its tokens do not depend on its neighbours);
        otherwise one after another."""
        registries: dict[str, ToolRegistry] = {}
        try:
            for job in jobs:  # built up front: the worker threads only read the registries
                key = job.harness.content_hash()
                if key not in registries:
                    registries[key] = ToolRegistry(job.harness)
            models = [policy(job) for job in jobs]
            if models and all(m is models[0] for m in models):
                return map_batched(models[0], list(jobs), lambda job, m: self._run_one(job, m, tokenizer, registries))
            return [self._run_one(job, m, tokenizer, registries) for job, m in zip(jobs, models, strict=True)]
        finally:
            for registry in registries.values():
                registry.close()

    def _run_one(self, job: RolloutJob, model: Model, tokenizer: Any, registries: dict[str, ToolRegistry]) -> Rollout:
        recorder = RecordingModel(model)
        agent = Agent(
            job.harness,
            recorder,
            tools=registries[job.harness.content_hash()],
            generation=self.generation(job.harness, job.seed),
        )
        trace = run_episode(agent, job.episode)
        messages = recorded_conversation(recorder, trace)
        tokens = rollout_tokens(messages, trace.rounds, tokenizer) if messages else inert_tokens(tokenizer)
        judged = judge_trace(job.episode, trace, job.harness)
        lengths = tokens.reasoning_tokens()
        total = sum(lengths.values())
        return Rollout(
            job=job,
            trace=trace,
            messages=messages,
            tokens=tokens,
            rewards={d: float(judged[d].score) for d in self.dims},
            cot_q={s: q(lengths.get(s, 0)) for s in self.segment_dims},
            cot_tokens=total,
            q_total=q(total),
        )


def _check_groups(jobs: Sequence[RolloutJob]) -> None:
    by_group: dict[int, set[str]] = {}
    for job in jobs:
        by_group.setdefault(job.group, set()).add(job.episode.episode_id)
    mixed = {g: sorted(ids) for g, ids in by_group.items() if len(ids) > 1}
    if mixed:
        raise HatError(f"a group must repeat one episode; got {mixed} (is num_generations TRL's group size?)")
