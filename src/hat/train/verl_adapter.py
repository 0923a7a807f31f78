"""HSA-RL at scale on verl: HAT's runtime as a verl agent loop, the segment-decomposed GDPO
advantage as a verl advantage estimator.

On one machine ``hat train rl`` (TRL) is the default; this module is for a multi-GPU run where verl
samples with vLLM and trains with FSDP (``scripts/verl/run_hat_rl.sh``, ``docs/verl.md``). It is the
same stage: rollouts go through :class:`~hat.train.rollouts.RolloutRunner` (coin flip, the real
runtime, judges, ``q(L)``, the conversation as labelled tokens) and advantages through
:mod:`hat.train.gdpo` — only the transport differs.

Importing this module with verl installed registers both with verl (the run script makes every
verl process import it through ``VERL_USE_EXTERNAL_MODULES``). Without verl it still imports (the
mapping functions need only numpy); :data:`VERL_IMPORT_ERROR` says why verl is missing.

**How the per-dimension rewards and segment labels travel: in ``rm_scores``, not the non-tensor
batch.** In verl 0.9.1 an advantage estimator receives ``token_level_rewards``, ``response_mask``,
``index`` (the ``uid`` of each prompt, shared by its ``rollout.n`` sessions: HAT's group) and the
``algorithm`` config, and nothing else: the non-tensor batch is handed only to verl's own ``gdpo``
estimator, and the v1 trainer (the default) reads just ``uid``, ``response_mask`` and ``rm_scores``
back from its TransferQueue before computing advantages. So the agent loop writes its own
``rm_scores`` row (:class:`RewardLayout`), one float per response token::

    responses      | conversation from the first policy token                 | trailer (pad ids)          |
    response_mask  | 1 on the policy's tokens, 0 on tool results and feedback | 0 …                        |
    rm_scores      | segment code per token: 0 none, 1 tool, 2 reply          | −1, r_d…, q_s…, q, balance |

The trailer follows the last policy token: a marker ``−1`` (codes are never negative, so the first
``−1`` of a row starts the record wherever the row ends), the judge reward per dimension, ``q(L)``
per segment and of the whole rollout, and a balance that makes the row sum to the rollout's scalar
reward ``Σ_d r_d − λ·q(L)``, so verl's ``critic/score`` metrics and validation scores stay
meaningful (up to float32 rounding, ~1e-4). Trailer tokens are masked and come after every policy
token, so under causal attention they change no log-probability the loss uses. The record exists
even for a rollout without a tool segment: its tool rewards are part of the group statistics
(:mod:`hat.train.gdpo`). The dimensions also go to ``extra_fields["reward_extra_info"]``, verl's
place for named reward parts (validation tables, ``filter_groups.metric``).

What this asks of the verl config (``scripts/verl/hat_rl.yaml`` sets it):

- ``trainer.use_v1=True`` (verl's default): the legacy trainer rebuilds ``rm_scores`` from the scalar;
- ``algorithm.use_kl_in_reward=False`` (a KL penalty rewrites the row; use the actor's KL loss),
  no reward model (it would overwrite ``rm_scores``), no rollout correction (the token ids are the
  re-tokenized conversation, as in the TRL path, so the sampler's log-probs do not line up);
- ``algorithm.hat``: HAT's settings (:class:`VerlSettings`), read by both the loop and the estimator.
  The ablations are ``algorithm.hat.advantage=grpo|normalize_then_sum``, not verl's own ``grpo``
  estimator: that one sums the row, whose float32 rounding residue would turn a group of equal
  rewards into non-zero advantages.

Differences from the TRL path: a dropped sequence (all-zero advantages) still counts in verl's
token-mean denominator, as verl's own GRPO does with zero-variance groups; rewards are float32.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from uuid import uuid4

import numpy as np
import numpy.typing as npt

from hat.errors import HatError, ModelError
from hat.judge import SEGMENTS
from hat.models.base import Generation, GenerationConfig, Message, ModelBackend
from hat.train.gdpo import scatter_to_tokens, segment_advantages
from hat.train.rl_defaults import ADVANTAGES, RL

__all__ = [
    "AGENT_LOOP_NAME",
    "ESTIMATOR_NAME",
    "VERL_IMPORT_ERROR",
    "LoopFields",
    "RewardLayout",
    "RolloutRecord",
    "ServerModel",
    "VerlSettings",
    "dataset_rows",
    "group_ids",
    "hat_segment_gdpo_advantage",
    "loop_fields",
    "prepare_data",
    "rollout_advantages",
    "run_rollout",
    "token_advantages",
]

ESTIMATOR_NAME = "hat_segment_gdpo"
"""``algorithm.adv_estimator`` of a HAT run."""
AGENT_LOOP_NAME = "hat_agent"
"""``actor_rollout_ref.rollout.agent.default_agent_loop`` (or a row's ``agent_name``) of a HAT run."""
DATA_SOURCE = "hat"
MARKER = -1.0
"""Starts a row's record (segment codes are never negative)."""


# -- settings -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VerlSettings:
    """HAT's block of the verl config, ``algorithm.hat`` (the estimator is handed ``algorithm``; the
    agent loop reads the same node). Defaults are ``hat train rl``'s (:mod:`hat.train.rl_defaults`).

    ``advantage``: ``segments`` (HAT's) or an ablation, ``grpo`` / ``normalize_then_sum``
    (:func:`rollout_advantages`); ``harness`` / ``envelope`` / ``hsa_prob`` / ``seed``: the coin
    flip (:class:`~hat.train.rollouts.RolloutRunner`); ``cot_lambda`` λ and ``eps`` ε: the
    advantage; ``segment_dims``: which judge dimensions each segment sums
    (:data:`hat.judge.SEGMENTS`); ``max_new_tokens``: per model call (None: the harness's limit);
    ``rollout_threads``: episodes run at once per agent-loop worker (each is a
    thread that mostly waits on the rollout server)."""

    advantage: str = RL.advantage
    harness: str = RL.harness
    envelope: str = RL.envelope
    hsa_prob: float = RL.hsa_prob
    seed: int = 0
    cot_lambda: float = RL.cot_lambda
    eps: float = RL.advantage_eps
    max_new_tokens: int | None = RL.max_new_tokens
    segment_dims: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(SEGMENTS))
    rollout_threads: int = 64

    def __post_init__(self) -> None:
        if self.advantage not in ADVANTAGES:
            raise HatError(f"algorithm.hat.advantage must be one of {', '.join(ADVANTAGES)}; got {self.advantage!r}")

    @classmethod
    def from_config(cls, algorithm: Any) -> VerlSettings:
        """From the ``algorithm`` config (a DictConfig, a mapping or None); unknown keys are an error."""
        node = _plain(algorithm.get("hat") if algorithm is not None else None) or {}
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(node) - known)
        if unknown:
            raise HatError(f"unknown key(s) {unknown} in algorithm.hat; known: {sorted(known)}")
        if "segment_dims" in node:
            node["segment_dims"] = {str(s): tuple(map(str, dims)) for s, dims in node["segment_dims"].items()}
        return cls(**node)

    @property
    def layout(self) -> RewardLayout:
        return RewardLayout(dict(self.segment_dims))


def _plain(node: Any) -> dict[str, Any] | None:
    """A plain dict of an OmegaConf node or a mapping (None stays None)."""
    if node is None:
        return None
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(node):
            return dict(OmegaConf.to_container(node, resolve=True))  # type: ignore[arg-type]
    except ImportError:
        pass
    return dict(node)


# -- the reward row -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RewardLayout:
    """One rollout's rewards and segment labels as one float per response token (module docstring)."""

    segment_dims: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(SEGMENTS))

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(self.segment_dims)

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(d for dims in self.segment_dims.values() for d in dims)

    @property
    def trailer(self) -> int:
        """Tokens after the conversation: marker, one per dimension, one per segment, q(L) of the
        whole rollout, balance."""
        return 1 + len(self.dims) + len(self.segments) + 1 + 1

    def code(self, segment: str) -> float:
        return 0.0 if not segment else float(self.segments.index(segment) + 1)

    def encode(
        self,
        segments: Sequence[str],
        rewards: Mapping[str, float],
        cot_q: Mapping[str, float],
        q_total: float,
        score: float,
    ) -> list[float]:
        """The row: a code per conversation token (``segments[t]``, ``""`` for none), then the trailer
        whose last value makes the row sum to ``score``."""
        unknown = sorted({s for s in segments if s} - set(self.segments))
        if unknown:
            raise HatError(f"tokens of segment(s) {unknown}; the layout has {list(self.segments)}")
        body = [self.code(s) for s in segments]
        record = [float(rewards[d]) for d in self.dims] + [float(cot_q.get(s, 0.0)) for s in self.segments]
        record.append(float(q_total))
        balance = score - math.fsum([*body, MARKER, *(0.0 if math.isnan(v) else v for v in record)])
        return [*body, MARKER, *record, balance]

    def decode(self, row: Sequence[float] | npt.NDArray[Any]) -> RolloutRecord:
        """One (possibly right-padded) row back into labels and rewards; raises if the row is not
        in this layout."""
        values = np.asarray(row, dtype=np.float64)
        marks = np.flatnonzero(values == MARKER)
        if marks.size == 0 or marks[0] + self.trailer > values.size:
            raise HatError(
                "token_level_rewards do not carry HAT's reward row (no complete record): run verl's v1 trainer "
                "(trainer.use_v1=True) with HAT's agent loop, no reward model and algorithm.use_kl_in_reward=False"
            )
        start = int(marks[0])
        body = values[:start]
        bad = sorted({float(v) for v in body} - {float(c) for c in range(len(self.segments) + 1)})
        if bad:
            raise HatError(
                f"token_level_rewards hold values {bad[:3]} where segment codes belong: was the row changed "
                "(algorithm.use_kl_in_reward must be False, and no reward model may rewrite rm_scores)?"
            )
        names = ("", *self.segments)
        record = [float(v) for v in values[start + 1 : start + self.trailer - 1]]
        n_dims, n_segments = len(self.dims), len(self.segments)
        return RolloutRecord(
            segments=[names[int(v)] for v in body],
            rewards=dict(zip(self.dims, record[:n_dims], strict=True)),
            cot_q=dict(zip(self.segments, record[n_dims : n_dims + n_segments], strict=True)),
            q_total=record[-1],
        )


class RolloutRecord(NamedTuple):
    """A decoded row: segment per conversation token (``""`` for none), judge reward per dimension,
    ``q(L)`` per segment and of the whole rollout."""

    segments: list[str]
    rewards: dict[str, float]
    cot_q: dict[str, float]
    q_total: float


# -- the estimator (pure) -------------------------------------------------------------------------
def group_ids(index: Sequence[Hashable] | npt.NDArray[Any]) -> list[int]:
    """verl's ``uid`` per row (any hashable) as group numbers, in order of first appearance."""
    seen: dict[Hashable, int] = {}
    return [seen.setdefault(uid, len(seen)) for uid in list(index)]


def rollout_advantages(
    kind: str, records: Sequence[RolloutRecord], groups: Sequence[int], layout: RewardLayout, lam: float, eps: float
) -> dict[str, npt.NDArray[np.float64]]:
    """Per segment, one advantage per rollout, for ``hat train rl``'s three kinds (as
    ``hat.train.gdpo.segment_advantages``): ``segments`` (HAT's), and the ablations ``grpo`` and
    ``normalize_then_sum``, which give every segment one sequence value whose length term is
    ``−λ·q(L)`` of the whole rollout, weighted like any dimension."""
    rewards = {d: [r.rewards[d] for r in records] for d in layout.dims}
    cot = {s: [r.cot_q[s] for r in records] for s in layout.segments}
    q_total = [r.q_total for r in records]
    return segment_advantages(kind, rewards, cot, q_total, groups, layout.segment_dims, lam, eps)


def token_advantages(
    token_level_rewards: npt.ArrayLike,
    response_mask: npt.ArrayLike,
    index: Sequence[Hashable] | npt.NDArray[Any],
    layout: RewardLayout,
    lam: float = RL.cot_lambda,
    eps: float = RL.advantage_eps,
    kind: str = RL.advantage,
) -> npt.NDArray[np.float64]:
    """The ``(B, T)`` advantages of a verl batch: decode each row (:class:`RewardLayout`), compute
    the advantages over the ``uid`` groups (:func:`rollout_advantages`; ``segments``:
    :func:`~hat.train.gdpo.decomposed_advantages`), scatter each segment's value to its tokens
    (:func:`~hat.train.gdpo.scatter_to_tokens`) and mask what the policy did not write. A sequence
    whose advantages are all zero stays in the batch with zeros (verl's loss has no per-sequence drop)."""
    rows = np.asarray(token_level_rewards, dtype=np.float64)
    mask = np.asarray(response_mask, dtype=np.float64)
    if rows.ndim != 2 or rows.shape != mask.shape or len(index) != rows.shape[0]:
        raise HatError(f"shapes differ: rewards {rows.shape}, mask {mask.shape}, {len(index)} uids")
    records = [layout.decode(row) for row in rows]
    values = rollout_advantages(kind, records, group_ids(index), layout, lam, eps)
    scattered, _ = scatter_to_tokens(values, [r.segments for r in records])
    out = np.zeros_like(rows)
    out[:, : scattered.shape[1]] = scattered
    return out * mask


def hat_segment_gdpo_advantage(
    token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None, **_: Any
) -> tuple[Any, Any]:
    """The verl advantage estimator (``algorithm.adv_estimator=hat_segment_gdpo``): verl's tensors in,
    ``(advantages, returns)`` out (the same tensor, as for verl's outcome estimators)."""
    import torch

    if index is None:
        raise HatError("hat_segment_gdpo needs the uid of every row (verl passes non_tensor_batch['uid'] as index)")
    settings = VerlSettings.from_config(config)
    with torch.no_grad():
        values = token_advantages(
            token_level_rewards.detach().float().cpu().numpy(),
            response_mask.detach().float().cpu().numpy(),
            np.asarray(index, dtype=object),
            settings.layout,
            settings.cot_lambda,
            settings.eps,
            settings.advantage,
        )
    advantages = torch.as_tensor(values, dtype=torch.float32, device=token_level_rewards.device)
    return advantages, advantages


# -- the dataset ----------------------------------------------------------------------------------
def dataset_rows(episodes: Sequence[Any], agent_name: str = AGENT_LOOP_NAME) -> list[dict[str, Any]]:
    """verl RL dataset rows, one per episode. ``prompt`` (the comments; verl's length filter and logs
    read it) is not what the policy sees — the harness renders that; the agent loop rebuilds the
    episode from ``extra_info.hat_episode`` (JSON), so every row is self-contained."""
    return [
        {
            "data_source": DATA_SOURCE,
            "agent_name": agent_name,
            "prompt": [{"role": "user", "content": "\n".join(e.comments)}],
            "reward_model": {"style": "hat-judges", "ground_truth": e.episode_id},
            "extra_info": {"index": i, "episode_id": e.episode_id, "hat_episode": json.dumps(e.to_dict())},
        }
        for i, e in enumerate(episodes)
    ]


def prepare_data(out: str | Path, n_train: int = RL.n_episodes, n_val: int = 32, seed: int = RL.episode_seed) -> dict:
    """Write ``train.parquet`` (datagen seed ``seed``) and ``val.parquet`` (seed ``seed + 1``: other
    worlds, never an evaluation seed) into ``out``; return the row counts and paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hat.train.datagen import datagen_episodes
    from hat.train.datagen_config import DatagenConfig

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Any] = {}
    for split, n, split_seed in (("train", n_train, seed), ("val", n_val, seed + 1)):
        episodes = datagen_episodes(DatagenConfig(n_episodes=n, seed=split_seed))
        path = folder / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(dataset_rows(episodes)), path)
        written[split] = {"rows": len(episodes), "path": str(path)}
    return written


def _episode(kwargs: Mapping[str, Any]) -> Any:
    from hat.env.episode import Episode

    extra = kwargs.get("extra_info") or {}
    if "hat_episode" not in extra:
        raise HatError("the dataset row has no extra_info.hat_episode: write the data with hat.train.verl_adapter")
    return Episode.from_dict(json.loads(extra["hat_episode"]))


# -- the model: verl's rollout server behind HAT's Model interface ---------------------------------
ServerGenerate = Callable[..., Awaitable[Any]]
"""``LLMServerClient.generate(request_id=, prompt_ids=, sampling_params=) -> TokenOutput`` (verl)."""


class ServerModel(ModelBackend):
    """A HAT model whose calls go to verl's rollout server (vLLM/SGLang, token in, token out).

    HAT's runtime is synchronous and runs in a worker thread; the server client is a coroutine on
    the agent loop's event loop. Each call renders the messages as the transformers backend does
    (chat template, special-token text in user/tool turns broken — the view
    :func:`~hat.train.rollouts.rollout_tokens` tokenizes for training), submits the request to that
    loop and waits. Sampling: verl's ``sampling_params`` (top_k, repetition penalty …) with HAT's
    ``GenerationConfig`` over them (temperature, top_p, ``max_tokens``, stop strings); no
    log-probs (module docstring). ``global_steps``: the weights' versions the server reported (verl
    tags each trajectory with their range)."""

    name = "verl-server"

    def __init__(
        self,
        generate: ServerGenerate,
        loop: asyncio.AbstractEventLoop,
        tokenizer: Any,
        sampling_params: Mapping[str, Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        self._server = generate
        self._loop = loop
        self.tokenizer = tokenizer
        self.sampling_params = dict(sampling_params or {})
        self.request_id = request_id or uuid4().hex
        self.seconds = 0.0
        self.global_steps: list[int] = []
        self._breaker: Callable[[str], str] | None = None

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        from hat.models.transformers_backend import _tokenizer_specials, guard_user_turns, special_token_breaker

        if self._breaker is None:
            self._breaker = special_token_breaker(_tokenizer_specials(self.tokenizer))
        view = guard_user_turns(messages, self._breaker)
        try:
            text = self.tokenizer.apply_chat_template(view, tokenize=False, add_generation_prompt=True)
        except Exception:  # a template without a tool role: tool turns as user turns, as the backend does
            if not any(m["role"] == "tool" for m in view):
                raise
            view = [{**m, "role": "user"} if m["role"] == "tool" else m for m in view]
            text = self.tokenizer.apply_chat_template(view, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(str(text), add_special_tokens=False)["input_ids"])

    def sampling(self, config: GenerationConfig) -> dict[str, Any]:
        params = {**self.sampling_params, "temperature": config.temperature, "top_p": config.top_p}
        params.update(max_tokens=config.max_new_tokens, logprobs=False)
        if config.stop:
            params["stop"] = list(config.stop)
        return params

    def _generate(self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None) -> Generation:
        ids = self.prompt_ids(messages)
        start = time.perf_counter()
        call = self._server(request_id=self.request_id, prompt_ids=ids, sampling_params=self.sampling(config))
        output = asyncio.run_coroutine_threadsafe(_awaited(call), self._loop).result()
        elapsed = time.perf_counter() - start
        self.seconds += elapsed
        self._track_steps(getattr(output, "extra_fields", None) or {})
        if getattr(output, "stop_reason", None) == "aborted":
            raise ModelError("the rollout server aborted the request (weights were being updated)")
        token_ids = list(output.token_ids)
        extra = getattr(output, "extra_fields", None) or {}
        return Generation(
            text=str(self.tokenizer.decode(token_ids, skip_special_tokens=True)),
            prompt_tokens=len(ids),
            completion_tokens=len(token_ids),
            cached_tokens=int(extra.get("num_cached_tokens") or 0),
            latency_s=elapsed,
            finish_reason="length" if len(token_ids) >= config.max_new_tokens else "stop",
        )

    def _track_steps(self, extra: Mapping[str, Any]) -> None:
        steps = (extra.get("min_global_steps"), extra.get("max_global_steps"))
        self.global_steps += [int(s) for s in steps if s is not None]


async def _awaited(call: Awaitable[Any]) -> Any:
    return await call


# -- one rollout ----------------------------------------------------------------------------------
_EXECUTORS: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def _executor(threads: int) -> Executor:
    """One thread pool per size and process (the agent loop is built anew for every sample)."""
    with _LOCK:
        if threads not in _EXECUTORS:
            _EXECUTORS[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="hat-rollout")
        return _EXECUTORS[threads]


_SHARED: dict[tuple[str, str], tuple[Any, Any]] = {}


def _harness_and_envelope(settings: VerlSettings) -> tuple[Any, Any]:
    """The production harness and envelope, loaded once per process."""
    from hat.augment import load_envelope
    from hat.harness.loader import load_harness

    key = (settings.harness, settings.envelope)
    with _LOCK:
        if key not in _SHARED:
            _SHARED[key] = (load_harness(settings.harness), load_envelope(settings.envelope))
        return _SHARED[key]


async def run_rollout(
    episode: Any,
    model: ServerModel,
    settings: VerlSettings,
    *,
    step: int,
    index: int,
    group_size: int,
) -> Any:
    """Rollout ``index`` of the group of ``episode`` at ``step`` (the coin flip is seeded by
    ``(seed, step, episode)``, so every session of a group draws the same harness), run through
    :class:`~hat.train.rollouts.RolloutRunner` in a worker thread with ``model`` as the policy."""
    from hat.train.rollouts import RolloutRunner

    production, envelope = _harness_and_envelope(settings)
    params = model.sampling_params
    runner = RolloutRunner(
        production=production,
        envelope=envelope,
        hsa_prob=settings.hsa_prob,
        seed=settings.seed,
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        max_new_tokens=settings.max_new_tokens,
        segment_dims=settings.segment_dims,
    )
    job = runner.plan([episode], group_size=max(group_size, index + 1), step=step, offset=index)[0]
    loop = asyncio.get_running_loop()
    rollouts = await loop.run_in_executor(
        _executor(settings.rollout_threads), lambda: runner.run([job], lambda _: model, model.tokenizer)
    )
    return rollouts[0]


@dataclass(frozen=True)
class LoopFields:
    """What a rollout becomes in verl's ``AgentLoopOutput`` (``token_rewards`` → ``rm_scores``)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    token_rewards: list[float]
    reward_score: float
    reward_extra_info: dict[str, float]
    num_turns: int


def loop_fields(
    rollout: Any, layout: RewardLayout, lam: float, *, prompt_length: int, response_length: int, pad_id: int
) -> LoopFields:
    """A :class:`~hat.train.rollouts.Rollout` as verl's agent-loop output: the prompt up to the first
    policy token, the conversation (cut to leave room for the trailer), the reward row. A prompt
    longer than ``prompt_length`` is an error rather than cut (verl would cut the harness's system
    prompt from the left)."""
    tokens = rollout.tokens
    if len(tokens.prompt_ids) > prompt_length:
        raise HatError(
            f"the harness prompt has {len(tokens.prompt_ids)} tokens > actor_rollout_ref.rollout.prompt_length="
            f"{prompt_length}: raise prompt_length"
        )
    budget = response_length - layout.trailer
    if budget < 1:
        raise HatError(f"response_length {response_length} leaves no room for the {layout.trailer}-token trailer")
    body, segments = list(tokens.completion_ids[:budget]), list(tokens.segments[:budget])
    score = math.fsum(0.0 if math.isnan(r) else r for r in rollout.rewards.values()) - lam * rollout.q_total
    info = {**rollout.rewards, **{f"q_{s}": v for s, v in rollout.cot_q.items()}, "q": rollout.q_total}
    return LoopFields(
        prompt_ids=list(tokens.prompt_ids),
        response_ids=body + [pad_id] * layout.trailer,
        response_mask=[int(bool(s)) for s in segments] + [0] * layout.trailer,
        token_rewards=layout.encode(segments, rollout.rewards, rollout.cot_q, rollout.q_total, score),
        reward_score=score,
        reward_extra_info={**info, "cot_tokens": float(rollout.cot_tokens), "hsa": float(rollout.job.kind == "hsa")},
        num_turns=len(rollout.messages),
    )


# -- data preparation entry point -----------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hat.train.verl_adapter --out DIR [--train N] [--val N] [--seed S]``: the parquet files."""
    parser = argparse.ArgumentParser(prog="python -m hat.train.verl_adapter", description=main.__doc__)
    parser.add_argument("--out", required=True, help="folder for train.parquet and val.parquet")
    parser.add_argument("--train", type=int, default=RL.n_episodes, help="training episodes")
    parser.add_argument("--val", type=int, default=32, help="validation episodes")
    parser.add_argument("--seed", type=int, default=RL.episode_seed, help="datagen seed of the training episodes")
    args = parser.parse_args(argv)
    print(json.dumps(prepare_data(args.out, args.train, args.val, args.seed), indent=2))
    return 0


# -- verl glue (only where verl is installed) -----------------------------------------------------
VERL_IMPORT_ERROR: ImportError | None
try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
    from verl.experimental.agent_loop.agent_loop import register as _register_agent_loop
    from verl.trainer.ppo.core_algos import register_adv_est as _register_adv_est
except ImportError as exc:  # verl is an optional extra; everything above works without it
    VERL_IMPORT_ERROR = exc
    AgentLoopBase = AgentLoopOutput = object  # type: ignore[misc,assignment]
else:
    VERL_IMPORT_ERROR = None


class HatAgentLoopOutput(AgentLoopOutput):  # type: ignore[misc,valid-type]
    """verl's ``AgentLoopOutput`` whose ``rm_scores`` is HAT's reward row instead of the scalar on the
    last token (verl's v1 trainer stores what ``as_dict`` returns)."""

    token_rewards: list[float]

    def as_dict(self) -> dict[str, Any]:
        import torch

        output: dict[str, Any] = super().as_dict()
        output.pop("token_rewards", None)
        output["rm_scores"] = torch.tensor(self.token_rewards, dtype=torch.float32)
        return output


class HatAgentLoop(AgentLoopBase):  # type: ignore[misc,valid-type]
    """One episode through HAT's runtime with verl's rollout server as the policy (module docstring).
    The dataset row gives the episode; ``session_id`` (verl v1) is the rollout's index in its group."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = VerlSettings.from_config(self.config.get("algorithm"))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        model = ServerModel(self.server_manager.generate, asyncio.get_running_loop(), self.tokenizer, sampling_params)
        rollout = await run_rollout(
            _episode(kwargs),
            model,
            self.settings,
            step=int(kwargs.get("global_steps", 0) or 0),
            index=int(kwargs.get("session_id", 0) or 0),
            group_size=int(self.rollout_config.n),
        )
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        fields = loop_fields(
            rollout,
            self.settings.layout,
            self.settings.cot_lambda,
            prompt_length=int(self.rollout_config.prompt_length),
            response_length=int(self.rollout_config.response_length),
            pad_id=int(pad),
        )
        step = int(kwargs.get("global_steps", 0) or 0)
        extra = {
            "min_global_steps": min(model.global_steps, default=step),
            "max_global_steps": max(model.global_steps, default=step),
            "turn_scores": [],
            "tool_rewards": [],
            "reward_extra_info": fields.reward_extra_info,
        }
        return HatAgentLoopOutput(
            prompt_ids=fields.prompt_ids,
            response_ids=fields.response_ids,
            response_mask=fields.response_mask,
            reward_score=fields.reward_score,
            num_turns=fields.num_turns,
            metrics=AgentLoopMetrics(generate_sequences=model.seconds),
            extra_fields=extra,
            token_rewards=fields.token_rewards,
        )


if VERL_IMPORT_ERROR is None and __name__ != "__main__":  # `python -m` (data preparation) registers nothing:
    # with VERL_USE_EXTERNAL_MODULES set, verl has already imported this module under its own name
    _register_adv_est(ESTIMATOR_NAME)(hat_segment_gdpo_advantage)
    _register_agent_loop(AGENT_LOOP_NAME)(HatAgentLoop)


if __name__ == "__main__":
    raise SystemExit(main())
