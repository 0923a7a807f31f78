"""``HatSFTConfig``: TRL's :class:`~trl.SFTConfig` plus the fields HAT's SFT stage needs.

Why a subclass and not a separate dataclass: every TRL/transformers training option (steps, lr,
schedules, logging, checkpointing, accelerate/DeepSpeed settings) stays available unchanged and
the trainer receives this object as its ``args``; HAT adds only the model spec, the LoRA knobs and
the data selection.

Defaults that differ from TRL's, and why (the values live in :mod:`hat.train.defaults`, which the
CLI reads without importing TRL, so ``hat train sft --help`` shows them and stays fast):

- ``bf16``: TRL turns it on whenever ``fp16`` is off. Here it is resolved in ``__post_init__`` to
  *on only when a CUDA device supports bf16*; on CPU, bf16 autocast is slower and lossy.
- ``activation_checkpointing`` (transformers 5's name for ``gradient_checkpointing``, which is now a
  deprecated alias that mirrors it): off (TRL: on). Compact models fit without it; it costs ~20 %.
- ``learning_rate``: 2e-4, a LoRA rate (TRL: 2e-5, a full fine-tuning rate); pass a smaller one
  with ``use_lora=False``.
- ``max_length``: the sequence length (CLI ``--max-seq-length``), 2048 (TRL: 1024). Livestream rows
  are long because the system prompt is (SmolLM2 tokens over 300 oracle rows: median 1336, max
  1786; 95 % exceed 1024), and TRL truncates at the end (``truncation_mode="keep_start"``), which
  would cut exactly the final reply. A row whose assistant tokens are all cut is dropped; the run
  logs a warning and ``SFTResult.n_truncated`` counts truncated rows.
- ``assistant_only_loss`` stays **False** on purpose: the rows are pre-tokenized by HAT with an
  ``assistant_masks`` column, which TRL folds into the labels (see :mod:`hat.train.sft`). TRL's own
  ``assistant_only_loss=True`` needs a conversational dataset and a chat template with
  ``{% generation %}`` markers, which SmolLM2's template lacks and TRL ships none for.
- ``save_steps`` 50, ``save_total_limit`` 2, ``logging_steps`` 5, ``report_to`` none.

``torch_threads``: measured on a 2-core CPU shared with other jobs (load ~4), one SmolLM2 LoRA step
at 4 × 1024 tokens took 90–99 s with 1 thread and 163–165 s with 2 (OpenMP threads spin while the
other core is busy); leave it unset on an idle or GPU machine.

``resume_from_checkpoint``: a checkpoint folder, or ``"latest"`` for the newest
``checkpoint-*`` in ``output_dir``.

The fast path (``packing``, the default; :mod:`hat.train.packing`): rows of one room snapshot are
packed behind their shared prompt prefix, the LM head runs only on trained positions, and the
decoder runs under bf16 autocast where the CPU has native bf16 (``autocast_bf16``: None = detect,
so TRL's ``bf16`` stays off on CPU), with each LoRA layer's sum of base output and adapter delta in
float32 (``lora_float32_sum``, on: in bf16 a young adapter's delta is rounded into the base output's
grid and the loss curve lags float32's by about a step). A *step* then processes ``per_device_train_batch_size`` packs
of up to ``pack_max_rows`` rows each (default 1 pack per step). ``packing=False`` is the old
recipe: TRL's ``SFTTrainer`` row by row with full logits in float32.

Replay (keeping general ability): ``replay_data`` is a ``hat datagen-general`` folder of general
instruction rows answered by the base model itself; ``replay_ratio`` general rows are mixed in per
livestream row (0.25 → one general row for every four livestream rows), a seeded subsample.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import SFTConfig

from hat.errors import HatError
from hat.train.defaults import SFT
from hat.train.trl_configs import YamlConfigMixin, bf16_supported

__all__ = ["HatSFTConfig"]


@dataclass
class HatSFTConfig(YamlConfigMixin, SFTConfig):
    """TRL's ``SFTConfig`` plus HAT's fields (see the module docstring for changed defaults).

    ``model``: ``smollm2`` (the bundled GGUF, loaded by HAT's transformers loader), a checkpoint
    folder, or ``hf:<folder>``. ``data``: a ``hat datagen`` folder. ``fixed_harness``: the baseline —
    production-harness rows only. ``max_examples``: train on exactly this many rows (a seeded
    subsample; an error if the data has fewer), so a fixed-harness baseline and an HSA run see the
    same number of examples; give both the same ``max_steps`` too. YAML files:
    :class:`~hat.train.trl_configs.YamlConfigMixin`.
    """

    config_kind = "SFT"

    model: str = field(default=SFT.model, metadata={"help": "smollm2 | checkpoint folder | hf:<folder>"})
    data: str = field(default=SFT.data, metadata={"help": "A hat datagen folder."})
    use_lora: bool = field(default=SFT.use_lora, metadata={"help": "LoRA adapter (True) or full fine-tuning."})
    lora_r: int = SFT.lora_r
    lora_alpha: int = SFT.lora_alpha
    lora_dropout: float = SFT.lora_dropout
    lora_target_modules: list[str] | str = field(
        default=SFT.lora_target_modules,
        metadata={"help": "Module names, or 'all-linear' (every linear layer but the head)."},
    )
    fixed_harness: bool = field(
        default=SFT.fixed_harness, metadata={"help": "Production-harness rows only (the baseline)."}
    )
    max_examples: int | None = field(
        default=SFT.max_examples, metadata={"help": "Exactly this many rows (seeded subsample)."}
    )
    packing: bool = field(
        default=SFT.packing,
        metadata={"help": "Shared-prefix packing + trained-positions-only loss (False: TRL row by row)."},
    )
    pack_max_rows: int = field(
        default=SFT.pack_max_rows, metadata={"help": "Rows per pack (they share one prompt prefix)."}
    )
    pack_max_tokens: int = field(
        default=SFT.pack_max_tokens, metadata={"help": "Tokens per pack, prefix counted once."}
    )
    packing_attention: str = field(
        default=SFT.packing_attention,
        metadata={"help": "prefix-cache (fast) | block-mask (the literal packed sequence)."},
    )
    autocast_bf16: bool | None = field(
        default=SFT.autocast_bf16,
        metadata={"help": "bf16 autocast of the decoder (None: on where the CPU/GPU has native bf16)."},
    )
    lora_float32_sum: bool = field(
        default=SFT.lora_float32_sum,
        metadata={
            "help": "Under bf16 autocast, add each LoRA delta to its base output in float32 (else a young "
            "adapter's update is rounded away and the loss lags float32's)."
        },
    )
    replay_data: str = field(
        default=SFT.replay_data, metadata={"help": "A hat datagen-general folder (general replay rows)."}
    )
    replay_ratio: float = field(
        default=SFT.replay_ratio, metadata={"help": "General rows per livestream row (seeded subsample)."}
    )
    torch_threads: int | None = field(
        default=SFT.torch_threads,
        metadata={"help": "torch CPU threads (None: torch's default). 1 is faster on a busy CPU."},
    )

    # TRL/transformers fields with HAT's defaults (reasons: the module docstring)
    learning_rate: float = SFT.learning_rate
    bf16: bool | None = SFT.bf16  # type: ignore[assignment]  # None = resolve in __post_init__
    activation_checkpointing: bool = SFT.activation_checkpointing
    gradient_checkpointing: bool = SFT.gradient_checkpointing  # deprecated alias (transformers 5); mirrors the above
    max_length: int | None = SFT.max_length
    per_device_train_batch_size: int = SFT.per_device_train_batch_size
    logging_steps: float = SFT.logging_steps
    save_steps: float = SFT.save_steps
    save_total_limit: int | None = SFT.save_total_limit
    report_to: str | list[str] | None = SFT.report_to

    def __post_init__(self) -> None:
        if self.bf16 is None:
            self.bf16 = not self.fp16 and bf16_supported()
        if self.model.startswith("hf:"):
            self.model = self.model[3:]
        super().__post_init__()
        if self.max_examples is not None and self.max_examples < 1:
            raise HatError("max_examples must be >= 1 (or unset to use every row)")
        if self.packing_attention not in ("prefix-cache", "block-mask"):
            raise HatError("packing_attention must be prefix-cache or block-mask")
        if self.replay_ratio < 0 or (self.replay_ratio > 0 and not self.replay_data):
            raise HatError("replay_ratio must be >= 0, and > 0 needs replay_data (a hat datagen-general folder)")
        if self.packing:
            self.remove_unused_columns = False
