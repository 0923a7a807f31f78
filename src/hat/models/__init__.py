"""Model backends and the spec strings that name them.

Every command takes a model as one string, so a model is chosen the same way everywhere:

    smollm2-hat                  the default: bundled SmolLM2 + HAT's shipped HSA-SFT LoRA adapter
                                 (transformers; ?engine=auto picks llama.cpp when installed, below)
    smollm2-hat?engine=transformers&speculative=8
                                 options: engine auto | llamacpp | transformers, speculative <n>,
                                 instances <n> (copies decoding side by side: hat.models.pool)
    smollm2                      the bundled SmolLM2-135M-Instruct GGUF (transformers + gguf)
    hf:<path-or-id>              a local checkpoint or PEFT adapter folder (a hub id downloads
                                 only with HAT_ALLOW_DOWNLOAD=1)
    openai:<base_url>#<model>    any OpenAI-compatible server (vLLM, SGLang, llama.cpp, ...)
    scripted:<file.jsonl>        replays outputs from a file (tests, demos)

A spec is ``name`` or ``name:argument``; the name picks a factory from a small registry and the
rest goes to it. The registry is open (:func:`register_model_spec`) because some models belong to
other layers: the simulator registers ``oracle`` when it is imported, without this package
knowing about the simulator. An unknown name raises :class:`ModelSpecError` listing every form.

Importing this package stays cheap: torch and transformers are imported only when a transformers
model is loaded, and a missing one raises :class:`MissingDependencyError` with the install hint.

**The engine of ``smollm2-hat``** (default :data:`DEFAULT_ENGINE`, ``transformers``, until the
llama.cpp path's latency and its agreement with transformers are measured on the shipped model -
issue 15; ``$HAT_ENGINE`` or ``?engine=`` choose another). ``engine=auto``: llama.cpp with the
adapter merged into the weights (``llamacpp:smollm2-hat``, several
times faster per token on a CPU) when ``llama_cpp`` imports and the merged GGUF exists or can be
built; otherwise transformers + PEFT, with one line on stderr saying why. Options that only the
transformers backend understands (``dtype``, ``device``, ``max_sessions``, ``batch_invariant``) also pick it, since the
caller asked for something llama.cpp cannot give. ``engine=llamacpp`` fails instead of falling
back; ``engine=transformers`` is the old behaviour (what ``hat eval`` results before the fast path
were measured on). ``speculative=N`` turns on prompt-lookup speculative decoding on either engine.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hat.errors import HatError, ModelSpecError
from hat.models.base import Generation, GenerationConfig, Message, Model, ModelBackend, Stream
from hat.models.openai_backend import OpenAICompatibleModel
from hat.models.scripted import ScriptedModel
from hat.models.transformers_backend import TransformersModel

__all__ = [
    "Generation",
    "GenerationConfig",
    "Message",
    "Model",
    "ModelBackend",
    "ModelFactory",
    "OpenAICompatibleModel",
    "ScriptedModel",
    "Stream",
    "TransformersModel",
    "load_model",
    "model_specs",
    "register_model_spec",
    "shipped_adapter",
]

ModelFactory = Callable[..., Model]
"""``factory(argument: str, *, name: str, **kw) -> Model``; ``name`` is the full spec string."""


@dataclass(frozen=True)
class _SpecForm:
    factory: ModelFactory
    usage: str
    takes_argument: bool | None  # None: optional (an entry-point factory decides)


_SPECS: dict[str, _SpecForm] = {}


def register_model_spec(
    prefix: str,
    factory: ModelFactory,
    *,
    usage: str | None = None,
    takes_argument: bool | None = True,
    replace: bool = False,
) -> None:
    """Make ``load_model`` understand specs named ``prefix``.

    ``factory(argument, name=spec, **kw)`` builds the model; ``argument`` is what follows
    ``prefix:`` (empty for a bare ``prefix``). ``usage`` is how the form is shown in errors
    (default ``prefix:<arg>``, or ``prefix`` when ``takes_argument`` is false; ``None``: the argument
    is optional and the factory checks it). Registering a
    taken prefix raises ``ValueError`` unless ``replace`` is true.
    """
    if not prefix or ":" in prefix or prefix != prefix.strip():
        raise ValueError(f"a spec prefix must be a non-empty word without ':' (got {prefix!r})")
    if prefix in _SPECS and not replace:
        raise ValueError(f"model spec {prefix!r} is already registered; pass replace=True to override")
    shown = usage or (f"{prefix}:<arg>" if takes_argument else prefix)
    _SPECS[prefix] = _SpecForm(factory, shown, takes_argument)


def model_specs() -> list[str]:
    """The usage line of every registered spec form, in registration order, then the ``hat.models``
    entry points not loaded yet."""
    from importlib.metadata import entry_points

    extra = [f"{ep.name}[:<arg>]" for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in _SPECS]
    return [form.usage for form in _SPECS.values()] + sorted(set(extra))


def load_model(spec: str, **kw: Any) -> Model:
    """Build the model a spec string names; ``kw`` goes to the backend's factory."""
    prefix, _, argument = spec.strip().partition(":")
    if "?" in prefix and not argument:  # name?options: the options are the argument (smollm2-hat?engine=...)
        prefix, argument = prefix.split("?", 1)[0], "?" + prefix.split("?", 1)[1]
    form = _SPECS.get(prefix) or _from_entry_point(prefix)
    if form is None:
        raise ModelSpecError(f"unknown model spec {spec!r}. {_valid_forms()}")
    if form.takes_argument is True and not argument:
        raise ModelSpecError(f"model spec {spec!r} needs an argument: {form.usage}. {_valid_forms()}")
    if form.takes_argument is False and argument:
        raise ModelSpecError(f"model spec {spec!r} takes no argument; use {form.usage!r}. {_valid_forms()}")
    kw.setdefault("name", spec.strip())
    return form.factory(argument, **kw)


ENTRY_POINT_GROUP = "hat.models"
"""Entry-point group of model specs from other packages or layers (``name = "module:factory"``)."""


def _from_entry_point(prefix: str) -> _SpecForm | None:
    """A spec form declared as a ``hat.models`` entry point (the simulator's ``oracle`` is one),
    registered on first use. Loading the entry point's module may register the form itself, with
    its own usage line; otherwise its factory is registered with an optional argument."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP, name=prefix):
        try:
            factory = ep.load()
        except Exception as exc:  # a broken plugin is a clear error, not a crash
            raise ModelSpecError(f"model spec {prefix!r} comes from {ep.value}, which failed to load: {exc}") from exc
        if prefix not in _SPECS:
            _SPECS[prefix] = _SpecForm(factory, f"{prefix}[:<arg>]", None)
        return _SPECS[prefix]
    return None


def _valid_forms() -> str:
    return "Valid forms: " + ", ".join(model_specs())


def _smollm2(argument: str, **kw: Any) -> Model:
    return TransformersModel.smollm2(**kw)


def shipped_adapter(name: str) -> Path:
    """The folder ``hat/models/adapters/<name>`` of a PEFT adapter that ships with HAT
    (``smollm2-hat``); a clear error when it is not installed."""
    folder = Path(__file__).parent / "adapters" / name
    if not (folder / "adapter_config.json").is_file():
        raise ModelSpecError(
            f"the shipped adapter {name!r} is not in this installation ({folder}); reinstall HAT "
            "(make install) or use the base model 'smollm2'"
        )
    return folder


ENGINES = ("auto", "llamacpp", "transformers")
DEFAULT_ENGINE = "transformers"
"""The engine ``smollm2-hat`` uses when neither the spec nor ``$HAT_ENGINE`` names one."""
_TRANSFORMERS_ONLY = ("dtype", "device", "max_sessions", "batch_invariant")


def _hat_options(argument: str) -> tuple[str, dict[str, Any]]:
    """``"?engine=...&speculative=N"`` → ``(engine, backend kwargs)``; anything else is a spec error."""
    from urllib.parse import parse_qs

    usage = "smollm2-hat[?engine=auto|llamacpp|transformers&speculative=<n>&instances=<n>]"
    if argument and not argument.startswith("?"):
        raise ModelSpecError(f"model spec 'smollm2-hat:{argument}' is not understood; use {usage}")
    query = parse_qs(argument[1:], keep_blank_values=True)
    if unknown := sorted(set(query) - {"engine", "speculative", "instances"}):
        raise ModelSpecError(f"unknown smollm2-hat option {unknown[0]!r}; use {usage}")
    engine = (query.get("engine") or [os.environ.get("HAT_ENGINE") or DEFAULT_ENGINE])[-1].strip()
    if engine not in ENGINES:
        raise ModelSpecError(f"smollm2-hat engine {engine!r} (from the spec or $HAT_ENGINE) is not one of {ENGINES}")
    kw: dict[str, Any] = {}
    if "speculative" in query:
        value = query["speculative"][-1]
        if not value.isdigit():
            raise ModelSpecError(f"smollm2-hat option speculative={value!r} must be a number of draft tokens (0: off)")
        kw["speculative"] = int(value)
    if "instances" in query:
        value = query["instances"][-1]
        if not value.isdigit() or int(value) < 1:
            raise ModelSpecError(f"smollm2-hat option instances={value!r} must be a number of model copies (>= 1)")
        kw["instances"] = int(value)
    return engine, kw


def _transformers_hat(instances: int = 1, **kw: Any) -> Model:
    """The shipped adapter on transformers; ``instances`` > 1: that many copies in a ModelPool."""
    if instances == 1:
        return TransformersModel.from_pretrained(shipped_adapter("smollm2-hat"), **kw)
    from hat.models.pool import ModelPool

    return ModelPool.build(lambda: TransformersModel.from_pretrained(shipped_adapter("smollm2-hat"), **kw), instances)


def _smollm2_hat(argument: str, **kw: Any) -> Model:
    engine, options = _hat_options(argument)
    kw = {**options, **kw}
    if engine == "transformers":
        return _transformers_hat(**kw)
    if engine == "llamacpp":
        return _llamacpp.LlamaCppModel.from_spec("smollm2-hat", **kw)
    why = next((f"{key}= is a transformers option" for key in _TRANSFORMERS_ONLY if key in kw), None)
    if why is None:
        try:
            return _llamacpp.LlamaCppModel.from_spec("smollm2-hat", **kw)
        except _llamacpp.LlamaCppMissing:
            why = "the fast engine llama-cpp-python is not installed (make install-fast builds it)"
        except (HatError, ImportError, OSError) as exc:
            why = f"the fast engine failed ({type(exc).__name__}: {exc})"
    print(f"note: smollm2-hat runs on transformers, the slower engine: {why}", file=sys.stderr, flush=True)
    return _transformers_hat(**kw)


def _hf(argument: str, **kw: Any) -> Model:
    return TransformersModel.from_pretrained(argument, **kw)


def _openai(argument: str, **kw: Any) -> Model:
    base_url, sep, model = argument.rpartition("#")
    if not sep or not base_url or not model:
        raise ModelSpecError(
            f"openai spec needs a base URL and a model name: openai:<base_url>#<model> "
            f"(e.g. openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-1.5B-Instruct); got {argument!r}"
        )
    return OpenAICompatibleModel(base_url, model, **kw)


def _scripted(argument: str, **kw: Any) -> Model:
    return ScriptedModel.from_jsonl(os.path.expanduser(argument), **kw)


register_model_spec(
    "smollm2-hat",
    _smollm2_hat,
    usage="smollm2-hat[?engine=auto|llamacpp|transformers&speculative=<n>&instances=<n>]",
    takes_argument=None,  # optional: the ?options
)
register_model_spec("smollm2", _smollm2, takes_argument=False)
register_model_spec("hf", _hf, usage="hf:<path-or-hub-id>")
register_model_spec("openai", _openai, usage="openai:<base_url>#<model>")
register_model_spec("scripted", _scripted, usage="scripted:<file.jsonl>")

from hat.models import llamacpp_backend as _llamacpp  # noqa: E402  (registers the llamacpp: spec)
