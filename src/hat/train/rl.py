"""``hat train rl``: HSA-RL — multi-turn rollouts through the real runtime, the segment-decomposed
GDPO advantage, PPO-clip through TRL's ``GRPOTrainer``.

One training step, end to end:

1. **Groups, coin flip, rollouts, tokens, rewards** (:mod:`hat.train.rollouts`). TRL's sampler hands
   over ``G`` copies of each episode (the dataset's ``prompt`` is the episode id); a seeded coin per
   group picks the production harness or a train-split HSA variant; each rollout runs through the
   real runtime with the trainer's **own module** as the model — each step wraps the live
   (unwrapped) policy in a :class:`~hat.models.TransformersModel`, so the weights sampled are the
   weights being trained, and no KV cache outlives the step. Rollouts are sampled at TRL's
   ``temperature`` and run together, their model calls decoded as batches
   (:func:`~hat.models.batching.map_batched`; each row samples with its own seed, so a rollout's
   tokens do not depend on its neighbours). ``hat/rollout_s`` logs their wall time per step.
2. **Advantages** (:mod:`hat.train.gdpo`): computed on the batch gathered from every process,
   scattered to each segment's tokens; sequences with all-zero advantages leave the loss (their
   ``tool_mask`` row is zeroed and the token count TRL normalises by is recomputed).
3. **Loss**: TRL's own ``_compute_loss`` — PPO-clip with per-token advantages (it accepts ``(B, T)``),
   optional KL to the reference (``beta``), importance ratios, clip statistics — on each
   micro-batch's rows that carry loss tokens (:func:`without_inert_rows`: the dropped sequences
   cost no forward or backward pass; same loss and gradients). With ``share_group_prompts`` a
   micro-batch holds whole groups and the prompt its rows share is encoded once
   (:mod:`hat.train.rl_packing`; same log-probabilities and gradients).

How TRL is extended, and why this way: the rollouts enter through TRL's ``rollout_func`` hook
(prompt ids, completion ids, ``env_mask`` — 1 on the policy's tokens — and the rewards as an extra
column that thin reward functions read back, so TRL logs ``rewards/<dim>/mean``);
:meth:`HatGRPOTrainer._generate_and_score_completions` calls TRL's and replaces its sequence-level
advantages with the token-level ones; :meth:`HatGRPOTrainer.log` appends each step's metrics to
``rl_diagnostics.jsonl``. ``--resume`` continues from the newest complete checkpoint (the rules of
:mod:`hat.train.checkpoints`); a step's rollouts are seeded by the step number, so a resumed run
samples what the uninterrupted one would have. TRL's own generation, tool loop and environments are not used: they
speak the chat template's native tool-calling format, while the harness owns HAT's text protocol
and hooks, which HSA varies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from trl import GRPOTrainer
from trl.trainer.utils import split_tensor_dict

from hat.augment import load_envelope
from hat.env.episode import Episode
from hat.errors import HatError
from hat.harness.loader import load_harness
from hat.train.checkpoints import adapter_base_callback, fix_adapter_base, resume_checkpoint, trim_step_log
from hat.train.gdpo import scatter_to_tokens, segment_advantages, zero_advantage_groups
from hat.train.lora_precision import lora_sum_in_float32
from hat.train.packing import autocast_dtype
from hat.train.rl_config import HatRLConfig
from hat.train.rl_packing import pack_prompt_groups, packed_logps_and_entropies
from hat.train.rollouts import Rollout, RolloutJob, RolloutPolicy, RolloutRunner
from hat.train.trl_configs import lora_config

__all__ = [
    "COT_BANDS",
    "DIAGNOSTICS_FILE",
    "TOKEN_NORMALISED",
    "HatGRPOTrainer",
    "RLResult",
    "build_rl_trainer",
    "cot_bands",
    "load_policy",
    "plot_diagnostics",
    "rl_episodes",
    "train_rl",
    "without_inert_rows",
]

logger = logging.getLogger(__name__)
CONFIG_FILE = "rl_config.yaml"
RESULT_FILE = "rl_result.json"
DIAGNOSTICS_FILE = "rl_diagnostics.jsonl"
PLOT_FILE = "rl_diagnostics.png"
COT_BANDS = (("le100", 100.0), ("100-200", 200.0), ("gt200", math.inf))
"""CoT-length histogram bands of the report's figure, by upper bound: L ≤ 100, 100 < L ≤ 200, L > 200."""


# -- advantages -----------------------------------------------------------------------------------
def _reward_reader(name: str) -> Callable[..., list[float]]:
    """A TRL reward function that reads one precomputed value per rollout from the ``hat_rewards``
    column (the rollouts already ran the judges), so TRL logs ``rewards/<name>/mean``."""

    def reward(completions: Sequence[Any], hat_rewards: Sequence[Mapping[str, float]], **_: Any) -> list[float]:
        return [float(r[name]) for r in hat_rewards]

    reward.__name__ = reward.__qualname__ = name
    return reward


def cot_bands(lengths: Sequence[int]) -> dict[str, float]:
    """The share of rollouts in each :data:`COT_BANDS` band (each length in the first band it fits)."""
    counts = dict.fromkeys((name for name, _ in COT_BANDS), 0)
    for length in lengths:
        counts[next(name for name, bound in COT_BANDS if length <= bound)] += 1
    return {name: count / max(1, len(lengths)) for name, count in counts.items()}


class HatGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
    """TRL's ``GRPOTrainer`` with rollouts from HAT's runtime and token-level GDPO advantages.

    Overrides: ``_generate_and_score_completions`` (TRL's, then the advantages replaced), ``log``
    (the diagnostics file), ``compute_loss`` (bf16 autocast; rows without loss tokens left out),
    ``_prepare_inputs`` and ``_get_per_token_logps_and_entropies`` (``share_group_prompts``).
    Rollouts come in through TRL's ``rollout_func`` hook. ``policy``: a fixed
    :data:`RolloutPolicy` instead of the live model (tests, baselines)."""

    hat_base_ref: str = ""
    skip_inert_rows: bool = True
    """Leave rows without loss tokens (dropped all-zero-advantage sequences) out of the forward and
    backward pass — the same loss and gradients for a token-normalised ``loss_type``, less compute."""
    """How the adapter config names the base model for HAT's loader (set by :func:`build_rl_trainer`)."""

    def __init__(
        self,
        *,
        runner: RolloutRunner,
        episodes: Sequence[Episode],
        policy: RolloutPolicy | None = None,
        **kwargs: Any,
    ) -> None:
        self.runner = runner
        self.episodes = {e.episode_id: e for e in episodes}
        self.fixed_policy = policy
        self._rollouts: list[Rollout] = []
        self._rollout_s = 0.0  # wall time of the last step's rollouts (``hat/rollout_s``)
        readers: list[Any] = [_reward_reader(n) for n in [*runner.dims, "q"]]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*rollout_func.*experimental", category=UserWarning)
            super().__init__(reward_funcs=readers, rollout_func=self._rollout_func, **kwargs)
        # TRL's logged "reward" becomes the plain scalar Σ_d r_d − λ·q(L) (its advantages are replaced)
        self.reward_weights = torch.tensor([1.0] * len(runner.dims) + [-self.rl_args.cot_lambda])
        self.autocast = autocast_dtype(str(self.args.device), self.rl_args.autocast_bf16)
        if self.autocast is not None and self.rl_args.lora_float32_sum:
            lora_sum_in_float32(self.model)  # outside autocast (the rollouts) PEFT's own forward runs

    @property
    def rl_args(self) -> HatRLConfig:
        return self.args  # type: ignore[return-value]  # the config this trainer was built with

    @property
    def is_training(self) -> bool:
        """Whether the policy is in training mode (TRL's "train" vs "eval" metrics and group size)."""
        return bool(getattr(self.model, "training", False))

    @property
    def group_size(self) -> int:
        size = self.num_generations if self.is_training else self.num_generations_eval
        if not size:
            raise HatError("num_generations (the group size G) must be set")
        return int(size)

    # -- rollouts ---------------------------------------------------------------------------------
    def _rollout_func(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        unknown = sorted({str(p) for p in prompts} - set(self.episodes))
        if unknown:
            raise HatError(f"prompts must be episode ids of this trainer; unknown: {unknown[:3]}")
        offset = self.accelerator.process_index * len(prompts)
        episodes = [self.episodes[str(p)] for p in prompts]
        jobs = self.runner.plan(episodes, self.group_size, self.state.global_step, offset)
        start = time.perf_counter()
        rollouts = self._run(jobs)
        self._rollout_s = time.perf_counter() - start
        self._rollouts = rollouts
        return {
            "prompt_ids": [r.tokens.prompt_ids for r in rollouts],
            "completion_ids": [r.tokens.completion_ids for r in rollouts],
            "logprobs": None,
            "env_mask": [r.tokens.env_mask for r in rollouts],
            "hat_rewards": [{**r.rewards, "q": r.q_total} for r in rollouts],
        }

    def _run(self, jobs: Sequence[RolloutJob]) -> list[Rollout]:
        if self.fixed_policy is not None:
            return self.runner.run(jobs, self.fixed_policy, self._tokenizer)
        with self._live_policy() as policy:
            return self.runner.run(jobs, policy, self._tokenizer)

    @contextlib.contextmanager
    def _live_policy(self) -> Iterator[RolloutPolicy]:
        """The trainer's module as a HAT model for this step (its current weights; fresh KV caches)."""
        from trl.models import unwrap_model_for_generation

        from hat.models import TransformersModel

        was_training, args = self.is_training, self.rl_args
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,  # type: ignore[arg-type]
            ) as unwrapped,
            torch.no_grad(),
        ):
            backend = TransformersModel(unwrapped, self._tokenizer, name="policy")  # sets eval mode
            try:
                yield lambda job: backend
            finally:
                unwrapped.train(was_training)

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """TRL's loss, under bf16 autocast when :attr:`autocast` is set (``autocast_bf16``), on the
        micro-batch's rows that carry loss (:func:`without_inert_rows`; :attr:`skip_inert_rows`)."""
        if self.skip_inert_rows and self.is_training and isinstance(inputs, dict):
            kept = without_inert_rows(inputs, self.loss_type)
            if kept is None and self.accelerator.num_processes == 1:  # nothing to learn from: no pass at all
                return torch.zeros((), device=self.accelerator.device, requires_grad=True)
            inputs = inputs if kept is None else kept  # several processes: each must run its pass
        if self.autocast is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        with torch.autocast(self.accelerator.device.type, dtype=self.autocast):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    # -- group prompt sharing ---------------------------------------------------------------------
    def _prepare_inputs(self, generation_batch: Any) -> Any:
        """TRL's, without shuffling the generation batch before it is split into micro-batches, so
        that a micro-batch holds whole groups (``share_group_prompts``: the micro-batches accumulate
        into one update, so their order does not matter)."""
        if not (self.rl_args.share_group_prompts and self.is_training):
            return super()._prepare_inputs(generation_batch)
        steps = int(self.rl_args.steps_per_generation or 1)
        buffered: Any = self._buffered_inputs
        if self._step % (steps * self.num_iterations) == 0 or buffered is None:
            buffered = split_tensor_dict(self._generate_and_score_completions(generation_batch), steps)
            self._buffered_inputs = buffered
        return buffered[self._step % steps]

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: Any,
        attention_mask: Any,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **extra: Any,
    ) -> Any:
        """TRL's log-probabilities and entropies, with the rows that share a prompt packed
        (:func:`~hat.train.rl_packing.packed_logps_and_entropies`) when any do."""
        packs = None
        if self.rl_args.share_group_prompts and not compute_aux_loss and all(v is None for v in extra.values()):
            packs = pack_prompt_groups(input_ids, attention_mask, logits_to_keep)
        if packs is None or all(len(p.rows) == 1 for p in packs):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, **extra
            )
        with self.accelerator.autocast():
            logps, entropies = packed_logps_and_entropies(
                model, packs, input_ids.size(0), logits_to_keep, compute_entropy=compute_entropy
            )
        return logps, entropies, None

    # -- advantages -------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        return self._token_advantages(output, self._rollouts)

    def _gathered_scores(self, rollouts: Sequence[Rollout]) -> dict[str, Any]:
        """Rewards, ``q`` per segment and overall of the whole generation batch (every process)."""
        dims, segments = self.runner.dims, list(self.runner.segment_dims)
        rows = [[*(r.rewards[d] for d in dims), *(r.cot_q[s] for s in segments), r.q_total] for r in rollouts]
        local = torch.tensor(rows, dtype=torch.float64, device=self.accelerator.device)
        table = self.accelerator.gather(local).cpu().numpy()
        return {name: table[:, i] for i, name in enumerate([*dims, *(f"q:{s}" for s in segments), "q"])}

    def _token_advantages(self, output: dict[str, Any], rollouts: Sequence[Rollout]) -> dict[str, Any]:
        args, runner = self.rl_args, self.runner
        columns = self._gathered_scores(rollouts)
        group_ids = [i // self.group_size for i in range(len(columns["q"]))]
        values = segment_advantages(
            args.advantage,
            {d: columns[d] for d in runner.dims},
            {s: columns[f"q:{s}"] for s in runner.segment_dims},
            columns["q"],
            group_ids,
            runner.segment_dims,
            args.cot_lambda,
            args.advantage_eps,
        )
        start = self.accelerator.process_index * len(rollouts)
        local = {s: v[start : start + len(rollouts)] for s, v in values.items()}
        advantages, drop = scatter_to_tokens(local, [r.tokens.segments for r in rollouts])
        width = output["completion_ids"].shape[1]
        padded = np.zeros((len(rollouts), width))
        padded[:, : min(width, advantages.shape[1])] = advantages[:, :width]
        device = output["completion_ids"].device
        output["advantages"] = torch.tensor(padded, dtype=torch.float32, device=device)
        keep = torch.tensor(~drop, dtype=output["completion_mask"].dtype, device=device).unsqueeze(1)
        mask = output.get("tool_mask", torch.ones_like(output["completion_mask"])) * keep
        output["tool_mask"] = mask
        output["num_items_in_batch"] = self.accelerator.gather((output["completion_mask"] * mask).sum()).sum()
        self._record_diagnostics(rollouts, drop, group_ids[start : start + len(rollouts)])
        return output

    # -- diagnostics ------------------------------------------------------------------------------
    def _record_diagnostics(self, rollouts: Sequence[Rollout], drop: Any, group_ids: Any) -> None:
        metrics = self._metrics["train" if self.is_training else "eval"]
        n = max(1, len(rollouts))
        lengths = [r.cot_tokens for r in rollouts]
        for name, share in cot_bands(lengths).items():
            metrics[f"hat/cot_band/{name}"].append(share)
        metrics["hat/cot_tokens"].append(sum(lengths) / n)
        metrics["hat/q"].append(sum(r.q_total for r in rollouts) / n)
        metrics["hat/zero_adv_groups"].append(zero_advantage_groups(drop, group_ids))
        metrics["hat/dropped"].append(float(sum(bool(d) for d in drop)) / n)
        metrics["hat/hsa_share"].append(sum(r.job.kind == "hsa" for r in rollouts) / n)
        metrics["hat/tool_segment"].append(sum("tool" in r.tokens.segments for r in rollouts) / n)
        metrics["hat/ok"].append(sum(r.trace.status == "ok" for r in rollouts) / n)
        metrics["hat/rounds"].append(sum(len(r.trace.rounds) for r in rollouts) / n)
        metrics["hat/rollout_s"].append(self._rollout_s)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        super().log(logs, start_time)  # TRL merges its averaged metrics into ``logs``
        if self.is_training and any(k.startswith("hat/") for k in logs) and self.accelerator.is_main_process:
            path = Path(self.rl_args.output_dir or ".") / DIAGNOSTICS_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            row = {"step": int(self.state.global_step), **logs}
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, sort_keys=True, default=float) + "\n")


# -- plots ----------------------------------------------------------------------------------------
TOKEN_NORMALISED = frozenset({"dapo", "bnpo", "cispo", "vespo"})
"""TRL loss types whose micro-batch loss is a sum over loss tokens divided by a count that rows
without loss tokens do not change (``grpo``, ``dr_grpo``, ``luspo``, ``sapo`` average over rows)."""
_COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "tool_mask",
    "advantages",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
)


def without_inert_rows(inputs: Mapping[str, Any], loss_type: str) -> dict[str, Any] | None:
    """A micro-batch of TRL's GRPO inputs without the rows that carry no loss token, and trimmed to
    its remaining rows' width; ``None`` when no row carries loss.

    The loss and its gradients are unchanged for a token-normalised ``loss_type``
    (:data:`TOKEN_NORMALISED`: TRL normalises by the generation batch's token count, and a row's
    tokens enter only through ``completion_mask · tool_mask``); the inputs are returned as they are
    for any other loss type, or when a per-row tensor is not one this function knows how to trim.
    Trimming removes completion columns after the last real token (right padding) and prompt columns
    before the first (left padding): under a causal mask the kept tokens see the same tokens, and
    rotary position embeddings depend only on distances, so their log-probabilities are the same up to
    float rounding."""
    mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
    keep = mask.sum(dim=1) > 0
    if loss_type not in TOKEN_NORMALISED or bool(keep.all()):
        return dict(inputs)
    if not bool(keep.any()):
        return None
    rows = int(keep.numel())
    known = {"prompt_ids", "prompt_mask", "num_items_in_batch", *_COMPLETION_KEYS}
    if any(torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == rows for k, v in inputs.items() if k not in known):
        return dict(inputs)  # e.g. images: left as TRL made them
    index = keep.nonzero().squeeze(1)
    width = int(inputs["completion_mask"][index].sum(dim=0).nonzero().max()) + 1
    prompt_mask = inputs["prompt_mask"][index]
    first = int(prompt_mask.sum(dim=0).nonzero().min())
    out = dict(inputs)
    for key in _COMPLETION_KEYS:
        value = out.get(key)
        if torch.is_tensor(value) and value.dim() == 2:
            out[key] = value[index, :width]
    out["prompt_ids"] = inputs["prompt_ids"][index, first:]
    out["prompt_mask"] = prompt_mask[:, first:]
    return out


def _read_diagnostics(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def plot_diagnostics(jsonl: str | Path, png: str | Path | None = None) -> Path:
    """Draw a diagnostics file (:data:`DIAGNOSTICS_FILE`) as the report's training figures: reward
    per dimension, CoT-length bands, q(L), zero-advantage groups and clip fraction, per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _read_diagnostics(Path(jsonl))
    if not rows:
        raise HatError(f"{jsonl} holds no diagnostics rows; train for at least one logged step")
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    panels = [
        ("reward per dimension", [k for k in rows[-1] if k.startswith("rewards/") and k.endswith("/mean")]),
        ("CoT length (share of rollouts)", [f"hat/cot_band/{name}" for name, _ in COT_BANDS]),
        ("q(L)", ["hat/q"]),
        ("zero-advantage groups / dropped", ["hat/zero_adv_groups", "hat/dropped"]),
        ("clip fraction", ["clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean"]),
        ("loss", ["loss"]),
    ]
    for ax, (title, keys) in zip(axes.flat, panels, strict=True):
        for key in keys:
            ys = [r.get(key) for r in rows]
            if any(y is not None for y in ys):
                ax.plot(steps, [math.nan if y is None else y for y in ys], marker=".", label=_label(key))
        ax.set_title(title)
        ax.set_xlabel("step")
        if len(ax.get_lines()) > 1:
            ax.legend(fontsize="small")
    fig.tight_layout()
    out = Path(png) if png is not None else Path(jsonl).with_suffix(".png")
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _label(key: str) -> str:
    return key.removeprefix("rewards/").removesuffix("/mean").removeprefix("hat/").removeprefix("cot_band/")


# -- building and running -------------------------------------------------------------------------
@dataclass(frozen=True)
class RLResult:
    """What a run produced. ``adapter``: the output is a LoRA adapter (else a full checkpoint)."""

    output_dir: str
    base: str
    adapter: bool
    global_step: int
    train_loss: float
    n_episodes: int
    advantage: str
    diagnostics: str
    plot: str
    wall_s: float


def rl_episodes(config: HatRLConfig) -> list[Episode]:
    """The run's simulator episodes, drawn as ``hat datagen`` draws them (never an evaluation seed)."""
    from hat.train.datagen import datagen_episodes
    from hat.train.datagen_config import DatagenConfig

    episodes = datagen_episodes(
        DatagenConfig(n_episodes=config.n_episodes, seed=config.episode_seed, fault_rate=config.fault_rate)
    )
    if len({e.episode_id for e in episodes}) != len(episodes):
        raise HatError("episode ids repeat; pick another episode_seed")
    return episodes


def load_policy(config: HatRLConfig) -> tuple[Any, Any, str, Any]:
    """``(model, tokenizer, base_ref, peft_config)``. An adapter folder is continued (a trainable
    ``PeftModel`` on its base; ``peft_config`` None); otherwise the base is loaded as SFT loads it
    and, with ``use_lora``, a fresh LoRA config is returned for TRL to apply."""
    from hat.train.sft import load_base

    folder = Path(config.model).expanduser()
    if (folder / "adapter_config.json").is_file():
        from peft import PeftModel

        data = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
        base = str(data.get("base_model_name_or_path") or "")
        if not base:
            raise HatError(f"{folder}/adapter_config.json names no base model")
        relative = folder / base
        model, tokenizer, base_ref = load_base(str(relative) if relative.exists() and base != "smollm2" else base)
        model = PeftModel.from_pretrained(model, str(folder), is_trainable=True)
        if any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        return model, tokenizer, base_ref, None
    model, tokenizer, base_ref = load_base(config.model)
    return model, tokenizer, base_ref, lora_config(config) if config.use_lora else None


def build_rl_trainer(
    config: HatRLConfig,
    *,
    episodes: Sequence[Episode] | None = None,
    policy: RolloutPolicy | None = None,
    callbacks: Sequence[Any] = (),
    loaded: tuple[Any, Any, str, Any] | None = None,
) -> HatGRPOTrainer:
    """The trainer for ``config``, not yet trained. ``episodes`` (default :func:`rl_episodes`),
    ``policy`` (default: the live model) and ``loaded`` (``load_policy``'s result) are for tests."""
    from datasets import Dataset

    chosen = list(episodes) if episodes is not None else rl_episodes(config)
    needed = int(config.generation_batch_size or 0) // int(config.num_generations or 1)
    if len(chosen) < needed:  # TRL's sampler would yield no batch at all: a run of zero steps
        raise HatError(
            f"a generation batch of {config.generation_batch_size} rollouts in groups of {config.num_generations} "
            f"needs at least {needed} episodes; got {len(chosen)} (raise --episodes or lower --batch-size/--grad-accum)"
        )
    model, tokenizer, base_ref, peft_config = loaded if loaded is not None else load_policy(config)
    runner = RolloutRunner(
        production=load_harness(config.harness),
        envelope=load_envelope(config.envelope),
        hsa_prob=config.hsa_prob,
        seed=config.seed,
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
    )
    adapter = peft_config is not None or hasattr(model, "peft_config")
    trainer = HatGRPOTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": [e.episode_id for e in chosen]}),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[*callbacks, *([adapter_base_callback(base_ref)] if adapter else [])],
        runner=runner,
        episodes=chosen,
        policy=policy,
    )
    trainer.hat_base_ref = base_ref
    return trainer


def train_rl(
    config: HatRLConfig,
    *,
    callbacks: Sequence[Any] = (),
    episodes: Sequence[Episode] | None = None,
    policy: RolloutPolicy | None = None,
) -> RLResult:
    """Train; save the final adapter/model + tokenizer, the resolved config (``rl_config.yaml``), the
    trainer state (``trainer_state.json``), the per-step diagnostics (``rl_diagnostics.jsonl`` and
    ``.png``) and the result (``rl_result.json``) into ``output_dir``; return the result.
    ``episodes`` (default: :func:`rl_episodes`) and ``policy`` (default: the live model) as for
    :func:`build_rl_trainer`."""
    if not config.output_dir:
        raise HatError("HatRLConfig.output_dir is required")
    start = time.perf_counter()
    resume = resume_checkpoint(config)  # the same rules as SFT and OPD
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    trim_step_log(out / DIAGNOSTICS_FILE, resume)
    trainer = build_rl_trainer(config, episodes=episodes, callbacks=callbacks, policy=policy)
    config.save_yaml(out / CONFIG_FILE)
    output = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(str(out))
    trainer.save_state()
    trainer._tokenizer.save_pretrained(str(out))
    adapter = hasattr(trainer.model, "peft_config")
    if adapter:
        fix_adapter_base(out, trainer.hat_base_ref)
    diagnostics = out / DIAGNOSTICS_FILE
    plot = plot_diagnostics(diagnostics, out / PLOT_FILE) if diagnostics.is_file() else None
    result = RLResult(
        output_dir=str(out),
        base=trainer.hat_base_ref,
        adapter=adapter,
        global_step=int(trainer.state.global_step),
        train_loss=float(output.training_loss),
        n_episodes=len(trainer.episodes),
        advantage=config.advantage,
        diagnostics=str(diagnostics),
        plot=str(plot or ""),
        wall_s=round(time.perf_counter() - start, 2),
    )
    (out / RESULT_FILE).write_text(json.dumps(asdict(result), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return result
