"""``HatOPDConfig``: TRL's :class:`~trl.DistillationConfig` plus the fields of HAT's stage 2.

Stage 2 is general on-policy distillation (OPD): the stage-1 student samples answers to general
prompts, the frozen base model (the teacher) scores every sampled token, and the loss is the
per-token reverse KL ``KL(student || teacher)`` on the student's own samples. TRL 1.16's
``DistillationTrainer`` is exactly that with its defaults: it is always fully on-policy (it has no
GKD ``lmbda``; the stable trainer always samples from the student, which is GKD's λ = 1; the mixed
λ < 1 trainer lives in ``trl.experimental.gkd``), and ``beta = 1.0`` selects the reverse KL of its
generalized JSD (0 = forward KL, 0.5 = JSD). Both are left at TRL's values on purpose.

Why a subclass: every TRL/transformers option (steps, schedules, logging, checkpointing, vLLM
generation on a GPU machine) stays available and the trainer gets this object as its ``args``;
HAT adds the student/teacher specs, the prompt selection and the LoRA knobs, as
:class:`~hat.train.sft_config.HatSFTConfig` does for SFT.

HAT's fields:

- ``model``: the student — a ``hat train sft`` output folder (a LoRA adapter over its base, or a
  full checkpoint), or any spec ``hat train sft`` accepts (``smollm2``, a folder, ``hf:<folder>``).
- ``teacher``: empty = the student's base model: the adapter's ``base_model_name_or_path``, else the
  ``model`` recorded in the folder's ``sft_config.yaml`` (the ``teacher`` of an ``opd_config.yaml``).
- ``prompts`` / ``n_prompts``: ``n_prompts`` prompts drawn with ``seed`` from the training-only
  general prompts (``../shared/data/general/prompts.jsonl``), read by :func:`hat.train.replay.load_prompts`.
- LoRA: with an adapter student and ``use_lora`` the *stage-1 adapter itself* keeps training (its
  own rank and modules; ``lora_*`` are unused), so the result is again one adapter over the base
  and loads, exports and serves like an SFT adapter. A full-checkpoint student gets a new adapter
  (``lora_*``). ``use_lora=False``: full fine-tuning (an adapter student is merged first).
- ``max_new_tokens``: the sampled answer limit, HAT's name for TRL's ``max_completion_length``
  (given, it sets that field; unset, it mirrors it).
- ``torch_threads``: as for SFT (1 is faster on a busy 2-core CPU).

Defaults that differ from TRL's (values in :mod:`hat.train.opd_defaults`), and why:

- ``learning_rate`` 1e-4: a LoRA rate (TRL: 1e-6, a full fine-tuning rate); half SFT's 2e-4 because
  on-policy gradients from a few samples are noisier than SFT's. Not tuned; pass a smaller one
  with ``use_lora=False``.
- ``per_device_train_batch_size`` 8 prompts per step and ``num_train_epochs`` 1 (each prompt sampled
  once; TRL: 3): 512 prompts → 64 steps. ``max_new_tokens`` 256 (TRL: 512): a CPU step's cost is
  dominated by sampling and by the two forward passes over prompt + answer.
- ``disable_dropout`` on (TRL: off) and ``lora_dropout`` 0: the samples must come from the policy
  being trained, and the loss is measured under the same function that sampled them.
- ``bf16``: on only where a CUDA device supports it (TRL: whenever ``fp16`` is off; on CPU bf16
  autocast is slower and lossy); ``activation_checkpointing`` off (TRL: on; 135M fits without it).
- ``logging_steps`` 1 (every step goes to ``opd_log.jsonl``), ``save_steps`` 10 (a step costs
  minutes on CPU), ``save_total_limit`` 2, ``report_to`` none.

``resume_from_checkpoint``: a checkpoint folder, or ``"latest"`` for the newest complete one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import DistillationConfig

from hat.errors import HatError
from hat.train.opd_defaults import OPD
from hat.train.trl_configs import YamlConfigMixin, bf16_supported

__all__ = ["HatOPDConfig"]


@dataclass
class HatOPDConfig(YamlConfigMixin, DistillationConfig):
    """TRL's ``DistillationConfig`` plus HAT's stage-2 fields (see the module docstring). YAML files:
    :class:`~hat.train.trl_configs.YamlConfigMixin`."""

    config_kind = "OPD"

    model: str = field(default=OPD.model, metadata={"help": "The student: a hat train sft output folder or a spec."})
    teacher: str = field(default=OPD.teacher, metadata={"help": "Teacher spec (empty: the student's base model)."})
    prompts: str = field(default=OPD.prompts, metadata={"help": "General prompts JSONL (id, source, prompt)."})
    n_prompts: int = field(default=OPD.n_prompts, metadata={"help": "Prompts drawn with seed (each sampled once)."})
    use_lora: bool = field(default=OPD.use_lora, metadata={"help": "LoRA adapter (True) or full fine-tuning."})
    lora_r: int = OPD.lora_r
    lora_alpha: int = OPD.lora_alpha
    lora_dropout: float = OPD.lora_dropout
    lora_target_modules: list[str] | str = field(
        default=OPD.lora_target_modules,
        metadata={"help": "Module names, or 'all-linear' (every linear layer but the head)."},
    )
    max_new_tokens: int | None = field(
        default=OPD.max_new_tokens,
        metadata={"help": "Answer limit; sets max_completion_length (None: mirrors it)."},
    )
    torch_threads: int | None = field(
        default=OPD.torch_threads,
        metadata={"help": "torch CPU threads (None: torch's default). 1 is faster on a busy CPU."},
    )

    max_completion_length: int | None = OPD.max_completion_length
    learning_rate: float = OPD.learning_rate
    per_device_train_batch_size: int = OPD.per_device_train_batch_size
    num_train_epochs: float = OPD.num_train_epochs
    disable_dropout: bool = OPD.disable_dropout
    bf16: bool | None = OPD.bf16  # type: ignore[assignment]  # None = resolve in __post_init__
    activation_checkpointing: bool = OPD.activation_checkpointing
    gradient_checkpointing: bool = OPD.gradient_checkpointing  # deprecated alias (transformers 5)
    logging_steps: float = OPD.logging_steps
    save_steps: float = OPD.save_steps
    save_total_limit: int | None = OPD.save_total_limit
    report_to: str | list[str] | None = OPD.report_to

    def __post_init__(self) -> None:
        if self.bf16 is None:
            self.bf16 = not self.fp16 and bf16_supported()
        if self.model.startswith("hf:"):
            self.model = self.model[3:]
        if self.teacher.startswith("hf:"):
            self.teacher = self.teacher[3:]
        if self.max_new_tokens is None:
            self.max_new_tokens = self.max_completion_length
        self.max_completion_length = self.max_new_tokens
        super().__post_init__()
        problems = [
            "n_prompts must be >= 1" if self.n_prompts < 1 else "",
            "max_new_tokens must be >= 1" if self.max_new_tokens is not None and self.max_new_tokens < 1 else "",
            "temperature must be > 0 (on-policy samples)" if self.temperature <= 0 else "",
        ]
        problems = [p for p in problems if p]
        if problems:
            raise HatError("invalid OPD config: " + "; ".join(problems))
