"""``HatRLConfig``: TRL's :class:`~trl.GRPOConfig` plus the fields HAT's HSA-RL stage needs.

Why a subclass: every TRL/transformers option (steps, lr, clipping ``epsilon``/``epsilon_high``,
``beta`` for the KL to the reference, ``loss_type``, ``num_iterations``, logging, checkpointing,
accelerate/DeepSpeed) stays available unchanged, and the trainer receives this object as its
``args``. HAT adds where the rollouts come from (model, harness, HSA envelope and coin-flip
probability, episodes), the advantage and the LoRA knobs.

HAT's fields:

- ``model``: the policy to start from — ``smollm2``, a checkpoint folder, or ``hf:<folder>``. A LoRA
  adapter folder (the stage-1/2 output) is *continued*: its adapter is trained further on its own
  base, so the result is again one adapter on that base (HAT's loader does not stack adapters), and
  with ``beta > 0`` TRL keeps a frozen copy of it as the reference. ``lora_*`` then do not apply.
- ``harness`` / ``envelope`` / ``hsa_prob``: the production harness, the change envelope of the HSA
  variants (train split only) and the probability that a *group* runs under a variant (the coin
  flip; 0 is the "RL without HSA" ablation).
- ``n_episodes`` / ``episode_seed`` / ``fault_rate``: simulator episodes, drawn as ``hat datagen``
  draws them (world seeds 10 000 + 1 000·seed + chunk, never an evaluation seed). Seed 1 by default,
  so RL meets worlds that the SFT data (datagen seed 0) did not.
- ``advantage``: ``segments`` (HAT's segment-decomposed GDPO), ``grpo`` (plain GRPO on the summed
  reward) or ``normalize_then_sum`` (GDPO without segments) — :mod:`hat.train.gdpo`.
- ``cot_lambda``: λ, the weight of the CoT-length term (the report's 0.1); ``advantage_eps``: ε.
- ``max_new_tokens``: tokens per model call in a rollout (unset: the harness's
  ``limits.max_new_tokens``, what production uses).
- ``autocast_bf16`` / ``lora_float32_sum``: the loss's forward and backward run under bf16 autocast
  where the CPU/GPU has native bf16 (None = detect), each LoRA delta summed in float32 — as
  ``hat train sft`` (:mod:`hat.train.lora_precision`). The rollouts generate in the model's own dtype
  (outside autocast). With TRL's ``num_iterations`` 1 the PPO ratio's old log-probabilities are the
  new ones detached, so the ratio stays exactly 1 whatever the precision.
- ``share_group_prompts``: the generation batch is split into micro-batches without TRL's shuffle
  (they accumulate into one update, so their order does not matter), so a micro-batch holds whole
  groups, and the rows of a micro-batch that share a prompt are scored as one packed sequence —
  the prompt once (:mod:`hat.train.rl_packing`; the same log-probabilities and gradients).

TRL/transformers defaults HAT changes (values in :mod:`hat.train.rl_defaults`), and why:

- ``num_generations`` 4, ``per_device_train_batch_size`` 4, ``gradient_accumulation_steps`` 2: a
  step's generation batch is 4 × 2 = 8 rollouts (two groups of four, generated together), trained
  as two micro-batches of one group each, its prompt encoded once (``share_group_prompts``), sized
  for a 2-core CPU with 24 GB: a rollout is ~1,100-1,700 tokens (the system prompt, the rounds, tool
  observations) and one forward/backward pass over all eight rows without activation checkpointing
  held 23 GB and was OOM-killed; one packed group peaks at ~9 GB (``reports/hat.md`` § Sizing). Raise
  them on a GPU (the report's G is 8).
- ``learning_rate`` 1e-5: a LoRA RL rate (TRL's 1e-6 is for full fine-tuning; SFT used 2e-4).
- ``disable_dropout``: on, so the log-probabilities of the PPO ratio are those the policy sampled with.
- ``bf16``: on only where a CUDA device supports it (as in ``HatSFTConfig``).
- ``activation_checkpointing`` off (TRL: on): compact models fit, and the rollouts generate with the
  same module, which must keep its KV cache.
- ``logging_steps`` 1: the diagnostics are per step. ``save_steps`` 25, ``save_total_limit`` 2,
  ``report_to`` none.

``loss_type`` stays TRL's ``dapo`` (token-level normalisation over the generation batch): dropped
sequences leave the normaliser too, so they really are dropped. With a per-sequence loss
(``grpo``, ``luspo``, ``sapo``) a dropped sequence still counts in the mean over sequences.
``temperature`` (TRL's 1.0) is both the sampling temperature of the rollouts and the one TRL's
log-probabilities divide by, so they stay the same distribution; it must be > 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from hat.errors import HatError
from hat.train.rl_defaults import ADVANTAGES, RL
from hat.train.trl_configs import YamlConfigMixin, bf16_supported

__all__ = ["HatRLConfig"]


@dataclass
class HatRLConfig(YamlConfigMixin, GRPOConfig):
    """TRL's ``GRPOConfig`` plus HAT's fields (see the module docstring for each and for changed
    defaults). YAML files: :class:`~hat.train.trl_configs.YamlConfigMixin`."""

    config_kind = "RL"
    # TRL derives generation_batch_size from steps_per_generation and refuses a config that sets
    # both, so the file keeps the latter and reloads into the same config
    yaml_derived = ("generation_batch_size",)

    model: str = field(default=RL.model, metadata={"help": "smollm2 | checkpoint or adapter folder | hf:<folder>"})
    harness: str = field(default=RL.harness, metadata={"help": "Production harness (folder or built-in name)."})
    envelope: str = field(default=RL.envelope, metadata={"help": "HSA change envelope (name or YAML file)."})
    hsa_prob: float = field(default=RL.hsa_prob, metadata={"help": "P(a group runs under a train-split variant)."})
    n_episodes: int = field(default=RL.n_episodes, metadata={"help": "Simulator episodes (dataset rows)."})
    episode_seed: int = field(default=RL.episode_seed, metadata={"help": "Datagen-style seed of the episodes."})
    fault_rate: float = field(default=RL.fault_rate, metadata={"help": "Tool fault probability per call."})
    advantage: str = field(default=RL.advantage, metadata={"help": "segments | grpo | normalize_then_sum"})
    cot_lambda: float = field(default=RL.cot_lambda, metadata={"help": "λ: weight of the CoT-length term."})
    advantage_eps: float = field(default=RL.advantage_eps, metadata={"help": "ε of the normalisations."})
    max_new_tokens: int | None = field(
        default=RL.max_new_tokens, metadata={"help": "Tokens per model call (None: the harness's limit)."}
    )
    use_lora: bool = field(default=RL.use_lora, metadata={"help": "LoRA adapter (True) or full fine-tuning."})
    lora_r: int = RL.lora_r
    lora_alpha: int = RL.lora_alpha
    lora_dropout: float = RL.lora_dropout
    lora_target_modules: list[str] | str = field(
        default=RL.lora_target_modules,
        metadata={"help": "Module names, or 'all-linear' (every linear layer but the head)."},
    )
    autocast_bf16: bool | None = field(
        default=RL.autocast_bf16,
        metadata={"help": "bf16 autocast of the loss's forward/backward (None: on where the CPU/GPU has native bf16)."},
    )
    lora_float32_sum: bool = field(
        default=RL.lora_float32_sum,
        metadata={"help": "Under bf16 autocast, add each LoRA delta to its base output in float32."},
    )
    share_group_prompts: bool = field(
        default=RL.share_group_prompts,
        metadata={"help": "Micro-batches hold whole groups; a prompt they share is encoded once (rl_packing)."},
    )
    torch_threads: int | None = field(
        default=RL.torch_threads,
        metadata={"help": "torch CPU threads (None: torch's default). 1 is faster on a busy CPU."},
    )

    # TRL/transformers fields with HAT's defaults (reasons: the module docstring)
    num_generations: int | None = RL.num_generations
    per_device_train_batch_size: int = RL.per_device_train_batch_size
    gradient_accumulation_steps: int = RL.gradient_accumulation_steps
    learning_rate: float = RL.learning_rate
    disable_dropout: bool = RL.disable_dropout
    bf16: bool | None = RL.bf16  # type: ignore[assignment]  # None = resolve in __post_init__
    activation_checkpointing: bool = RL.activation_checkpointing
    gradient_checkpointing: bool = RL.gradient_checkpointing  # deprecated alias (transformers 5); mirrors the above
    logging_steps: float = RL.logging_steps
    save_steps: float = RL.save_steps
    save_total_limit: int | None = RL.save_total_limit
    report_to: str | list[str] | None = RL.report_to

    def __post_init__(self) -> None:
        if self.bf16 is None:
            self.bf16 = not self.fp16 and bf16_supported()
        if self.model.startswith("hf:"):
            self.model = self.model[3:]
        problems = self._problems()
        if problems:
            raise HatError("invalid RL config: " + "; ".join(problems))
        super().__post_init__()

    def _problems(self) -> list[str]:
        checks = [
            (self.advantage in ADVANTAGES, f"advantage must be one of {', '.join(ADVANTAGES)}"),
            (0.0 <= self.hsa_prob <= 1.0, "hsa_prob must be in [0, 1]"),
            (0.0 <= self.fault_rate <= 1.0, "fault_rate must be in [0, 1]"),
            (self.n_episodes >= 1, "n_episodes must be >= 1"),
            (self.episode_seed >= 0, "episode_seed must be >= 0"),
            (self.cot_lambda >= 0.0, "cot_lambda must be >= 0"),
            (self.advantage_eps >= 0.0, "advantage_eps must be >= 0"),
            (self.temperature > 0.0, "temperature must be > 0 (rollouts are sampled; TRL divides logits by it)"),
            (self.max_new_tokens is None or self.max_new_tokens >= 1, "max_new_tokens must be >= 1 (or unset)"),
            (
                self.beta == 0.0 or self.use_lora or not (self.model == "smollm2" or self.model.endswith(".gguf")),
                "beta > 0 with full fine-tuning reloads the reference from the model's folder: give a checkpoint "
                "folder as model (or use LoRA, whose reference is the model without the adapter)",
            ),
        ]
        return [message for ok, message in checks if not ok]
