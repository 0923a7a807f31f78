"""``hat datagen-general``: general-instruction replay rows, answered by the base model itself.

Why: HSA-SFT rows teach short spoken livestream replies, and a model trained on them alone loses
general instruction following (IFEval prompt-strict fell from 18 to 8). Mixing general rows into
SFT ("replay") counters that. The answers are the **base model's own** greedy answers
(self-distillation): training on them pulls the student back to what the base model already does
on general prompts instead of teaching it a new teacher's style it cannot imitate at 135M.

Choices worth knowing:

- **Prompts** come from ``general/prompts.jsonl``, the one training-only external set; ``n`` of
  them are drawn with ``random.Random(f"replay:{seed}")`` (see :class:`ReplayConfig`).
- **Rendering**: one user message, no system message, so the tokenizer's template adds its own
  default (SmolLM2: "You are a helpful AI assistant named SmolLM, …") — exactly how IFEval runs
  the base model, and how the SFT trainer renders the row, so the trained prompt is the prompt the
  answer was generated from.
- **Filter**: an answer cut by ``max_new_tokens`` (``finish_reason == "length"``) is dropped unless
  ``keep_truncated``; a kept one is marked ``"truncated": true`` and SFT trains it without the
  end-of-turn token (``hat.train.sft.encode_row``), so the model learns the base model's long
  answers without learning to stop mid-sentence. Dropping them skews the replay short: at 384
  tokens, 51 % of the open-ended (user-oriented) answers and 25 % of the T0 ones were cut (attempt
  11's set). Whitespace-only answers are dropped. Kept answers are stored verbatim.
- **Batches**: prompts go length-sorted (less padding) through
  :meth:`~hat.models.TransformersModel.generate_batch`; a backend without it is called one prompt
  at a time (the scripted double, OpenAI-compatible servers).
- **Resumable**: after every batch, one record per prompt (kept rows and drops alike) is appended
  to ``data.part.jsonl`` in one flushed write, so a crash loses at most the batch in flight.
  Running the same config on the folder again skips the finished ids. ``data.jsonl`` (rows in
  selection order, canonical JSON like ``hat datagen``) is written through a temp file and
  ``os.replace``, then the part file is removed. A resumed run batches differently, so its outputs
  may differ from an uninterrupted run's in the last float bits (see ``generate_batch``).

Row columns are those of :mod:`hat.train.datagen` (``load_rows`` and ``encode_row`` read them):
``harness_kind`` is ``general``, ``episode_id`` the prompt id, ``teacher`` the model spec, one
``reply`` segment spanning the answer, and the harness columns empty (``tools`` ``"[]"``,
``harness_hash`` ``""``, ``harness_variant`` ``[]``, ``augmentation`` ``"{}"``). ``source`` names the
prompt's origin.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hat.errors import HatError
from hat.harness.state import canonical_json
from hat.models import load_model
from hat.models.base import Generation, GenerationConfig, Message, Model
from hat.train.datagen import DATA_FILE, dataset_hash
from hat.train.replay_config import ReplayConfig, resolve_prompts_path

__all__ = [
    "PART_FILE",
    "ReplayConfig",
    "build_replay_row",
    "generate_replay",
    "load_prompts",
    "select_prompts",
]

PART_FILE = "data.part.jsonl"
CONFIG_FILE = "config.yaml"
STATS_FILE = "stats.json"
ProgressFn = Callable[[int, int], None]


# -- prompts --------------------------------------------------------------------------------------
def load_prompts(path: str | Path) -> list[dict[str, Any]]:
    """The prompts of a JSONL file (``id``, ``source``, ``prompt`` per line), in file order."""
    path = resolve_prompts_path(path)
    prompts: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            item = json.loads(line)
            missing = {"id", "source", "prompt"} - set(item)
            if missing:
                raise HatError(f"{path}:{number}: a general prompt needs {sorted(missing)}")
            if str(item["id"]) in prompts:
                raise HatError(f"{path}:{number}: duplicate prompt id {item['id']!r}; ids must be unique")
            prompts[str(item["id"])] = {**item, "id": str(item["id"])}
    return list(prompts.values())


def select_prompts(prompts: Sequence[dict[str, Any]], config: ReplayConfig) -> list[dict[str, Any]]:
    """``config.n`` prompts drawn with ``config.seed`` (in draw order), skipping excluded sources."""
    excluded = set(config.exclude_sources)
    pool = [p for p in prompts if p["source"] not in excluded]
    if len(pool) < config.n:
        raise HatError(f"n={config.n} but only {len(pool)} prompts are available after exclusions; lower --n")
    return random.Random(f"replay:{config.seed}").sample(pool, config.n)


# -- rows -----------------------------------------------------------------------------------------
def build_replay_row(prompt: dict[str, Any], answer: str, teacher: str) -> dict[str, Any]:
    """The dataset row of one answered prompt (columns: see the module docstring)."""
    messages: list[Message] = [
        {"role": "user", "content": str(prompt["prompt"])},
        {"role": "assistant", "content": answer},
    ]
    return {
        "episode_id": str(prompt["id"]),
        "source": str(prompt["source"]),
        "sample": 0,
        "intent": "general",
        "mode": "single",
        "world_seed": -1,
        "teacher": teacher,
        "status": "ok",
        "messages": messages,
        "tools": "[]",
        "harness_hash": "",
        "harness_kind": "general",
        "harness_variant": [],
        "augmentation": "{}",
        "scores": {},
        "segments": [{"message": 1, "kind": "reply", "start": 0, "end": len(answer)}],
    }


def _record(prompt: dict[str, Any], gen: Generation, config: ReplayConfig) -> dict[str, Any]:
    """One part-file record: what happened to a prompt, with its row if the answer is kept."""
    truncated = gen.finish_reason == "length"
    empty = not gen.text.strip()
    kept = not empty and (config.keep_truncated or not truncated)
    return {
        "id": str(prompt["id"]),
        "source": str(prompt["source"]),
        "truncated": truncated,
        "empty": empty,
        "chars": len(gen.text),
        "completion_tokens": gen.completion_tokens,
        "row": (build_replay_row(prompt, gen.text, config.model) | ({"truncated": True} if truncated else {}))
        if kept
        else None,
    }


# -- generation -----------------------------------------------------------------------------------
def _generate(model: Model, prompts: Sequence[dict[str, Any]], config: GenerationConfig) -> list[Generation]:
    chats: list[list[Message]] = [[{"role": "user", "content": str(p["prompt"])}] for p in prompts]
    batch = getattr(model, "generate_batch", None)
    if batch is not None and len(chats) > 1:
        return list(batch(chats, config))
    return [model.generate(chat, config) for chat in chats]


def _batches(todo: Sequence[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    ordered = sorted(todo, key=lambda p: len(str(p["prompt"])))  # stable: ties keep draw order
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


# -- files ----------------------------------------------------------------------------------------
def _read_part(path: Path) -> dict[str, dict[str, Any]]:
    """Finished records by id; a torn last line (a crash mid-write) is ignored."""
    if not path.is_file():
        return {}
    records: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        records[record["id"]] = record
    return records


def _append_part(path: Path, records: Sequence[dict[str, Any]]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(canonical_json(r) + "\n" for r in records))
        fh.flush()
        os.fsync(fh.fileno())


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _prepare_out(out: Path, config: ReplayConfig) -> None:
    """A new or empty folder gets ``config.yaml``; a folder holding an unfinished run of the same
    config is resumed; anything else is refused."""
    if (out / DATA_FILE).exists():
        raise HatError(f"{out} already holds a finished dataset ({DATA_FILE}); choose a new folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / CONFIG_FILE).is_file():
            raise HatError(f"{out} exists and is not empty; choose a new folder for the dataset")
        differ = config.same_data(ReplayConfig.load(out / CONFIG_FILE))
        if differ:
            raise HatError(
                f"{out} holds an unfinished run with a different config ({', '.join(differ)}); "
                "rerun it with the same options to resume, or choose a new folder"
            )
    out.mkdir(parents=True, exist_ok=True)
    config.save(out / CONFIG_FILE)


# -- the run --------------------------------------------------------------------------------------
def _load_options(config: ReplayConfig) -> dict[str, Any]:
    """``dtype`` for a local transformers model (``auto``: the backend's default); nothing otherwise."""
    local = config.model in ("smollm2", "smollm2-hat") or config.model.startswith("hf:")
    return {"dtype": config.dtype} if local and config.dtype != "auto" else {}


def generate_replay(
    config: ReplayConfig,
    out_dir: str | Path,
    progress: ProgressFn | None = None,
    *,
    model: Model | None = None,
    on_resume: ProgressFn | None = None,
) -> dict[str, Any]:
    """Answer ``config.n`` general prompts with ``config.model`` and write a dataset into ``out_dir``
    (new, empty, or an unfinished run of the same config, which is resumed): ``data.jsonl``,
    ``config.yaml`` and ``stats.json``. Returns the stats. ``progress(done, total)`` is called
    after every batch (``done`` counts resumed prompts too). ``model``: an already loaded model to
    use instead of loading ``config.model`` (which still names the teacher in the rows).
    ``on_resume(resumed, total)`` is called once, before the first batch, when an unfinished run
    is resumed (``StepProgress.resume``: resumed prompts then do not count toward the ETA)."""
    start = time.perf_counter()
    chosen = select_prompts(load_prompts(config.prompts), config)
    out = Path(out_dir)
    _prepare_out(out, config)
    part = out / PART_FILE
    done = _read_part(part)
    resumed = sum(p["id"] in done for p in chosen)
    todo = [p for p in chosen if p["id"] not in done]
    load_s = gen_s = 0.0
    if todo:
        if resumed and on_resume is not None:
            on_resume(resumed, len(chosen))
        model = model if model is not None else load_model(config.model, **_load_options(config))
        load_s = time.perf_counter() - start
        gen_s = _answer(model, todo, config, part, done, progress, total=len(chosen))
    rows = [done[p["id"]]["row"] for p in chosen if done[p["id"]]["row"] is not None]
    _write_atomic(out / DATA_FILE, "".join(canonical_json(r) + "\n" for r in rows))
    stats = _stats(config, [done[p["id"]] for p in chosen], rows, resumed, len(todo), load_s, gen_s)
    stats["wall_s"] = round(time.perf_counter() - start, 2)
    _write_atomic(out / STATS_FILE, json.dumps(stats, indent=2, sort_keys=True) + "\n")
    part.unlink(missing_ok=True)
    return stats


def _answer(
    model: Model,
    todo: Sequence[dict[str, Any]],
    config: ReplayConfig,
    part: Path,
    done: dict[str, dict[str, Any]],
    progress: ProgressFn | None,
    total: int,
) -> float:
    """Generate ``todo`` batch by batch, appending each batch's records; returns the seconds spent."""
    generation = GenerationConfig(max_new_tokens=config.max_new_tokens)
    start, finished = time.perf_counter(), total - len(todo)
    for batch in _batches(todo, config.batch_size):
        records = [_record(p, g, config) for p, g in zip(batch, _generate(model, batch, generation), strict=True)]
        _append_part(part, records)
        done.update((r["id"], r) for r in records)
        finished += len(batch)
        if progress is not None:
            progress(finished, total)
    return time.perf_counter() - start


def _stats(
    config: ReplayConfig,
    records: Sequence[dict[str, Any]],
    rows: Sequence[dict[str, Any]],
    resumed: int,
    generated: int,
    load_s: float,
    gen_s: float,
) -> dict[str, Any]:
    kept_chars = [len(r["messages"][1]["content"]) for r in rows]
    truncated = sum(r["truncated"] for r in records)
    return {
        "prompts": len(records),
        "rows": len(rows),
        "resumed": resumed,
        "generated": generated,
        "truncated": truncated,
        "truncated_rate": round(truncated / len(records), 4) if records else 0.0,
        "dropped": {
            "truncated": sum(r["truncated"] and not r["empty"] and r["row"] is None for r in records),
            "empty": sum(r["empty"] for r in records),
        },
        "answer_chars": _summary(kept_chars),
        "answer_chars_all": _summary([r["chars"] for r in records]),
        "completion_tokens": sum(r["completion_tokens"] for r in records),
        "by_source": dict(sorted(Counter(r["source"] for r in rows).items())),
        "dataset_hash": dataset_hash(rows),
        "model": config.model,
        "load_s": round(load_s, 2),
        "generate_s": round(gen_s, 2),
        "answers_per_min": round(60 * generated / gen_s, 2) if gen_s > 0 else None,
    }


def _summary(values: Sequence[int]) -> dict[str, float]:
    if not values:
        return {"median": 0.0, "mean": 0.0, "max": 0.0}
    return {
        "median": float(statistics.median(values)),
        "mean": round(statistics.fmean(values), 1),
        "max": float(max(values)),
    }
