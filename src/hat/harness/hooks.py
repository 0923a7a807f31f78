"""Lifecycle hooks: small objects the runtime consults at seven points of a request.

Points: ``input`` → ``before_model`` → ``after_model`` → ``before_tool`` → ``after_tool`` /
``tool_error`` → ``stop_check``. A hook method returns ``None`` (allow) or a :class:`Verdict`:

- ``allow`` – carry on;
- ``block(reason)`` – input: refuse the request; before_tool: do not run the tool (the model sees
  why); stop_check: give up on this reply and send the fallback;
- ``rewrite(value)`` – replace what was checked (comments, messages, raw text, arguments, result,
  reply payload);
- ``retry(reason)`` – after_model/stop_check: reject and feed ``reason`` back for another round;
  tool_error/after_tool: run the tool again.

:class:`Hook` is a base class whose methods all allow (as in openai-agents' ``RunHooks``), so a
project hook overrides only what it needs. Harnesses name hooks in ``harness.yaml``: a built-in
name (see :data:`BUILTIN_HOOKS`), ``hooks:ClassName`` from the harness's own ``hooks.py``, or
``python:module:ClassName``. Feedback text shown to the model goes through ``feedback_template``
so HSA can vary the feedback message structure.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
import sys
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from jsonschema import Draft202012Validator

from hat.harness.state import Harness, HookSpec, canonical_json

__all__ = [
    "BUILTIN_HOOKS",
    "ContextNoteHook",
    "GroundedClaimsHook",
    "Hook",
    "HookContext",
    "InputGuardHook",
    "ReplyLengthHook",
    "ReplySchemaHook",
    "ToolRetryHook",
    "Verdict",
    "build_hooks",
    "check_hook_spec",
]

HOOK_POINTS = (
    "input",
    "before_model",
    "after_model",
    "before_tool",
    "after_tool",
    "tool_error",
    "stop_check",
)


@dataclass(frozen=True)
class Verdict:
    action: str  # allow | block | rewrite | retry
    reason: str = ""
    value: Any = None

    @classmethod
    def allow(cls) -> Verdict:
        return cls("allow")

    @classmethod
    def block(cls, reason: str) -> Verdict:
        return cls("block", reason)

    @classmethod
    def rewrite(cls, value: Any, reason: str = "") -> Verdict:
        return cls("rewrite", reason, value)

    @classmethod
    def retry(cls, reason: str) -> Verdict:
        return cls("retry", reason)


@dataclass
class HookContext:
    """What a hook may look at. ``grounding`` is text the reply's facts may come from (the rendered
    prompt and every tool result so far); ``state`` is per-request scratch space."""

    harness: Harness
    request_id: str
    room: dict[str, Any] = field(default_factory=dict)
    grounding: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


class Hook:
    """Base hook: every method allows. ``config`` comes from ``harness.yaml``."""

    name: ClassVar[str] = "hook"

    def __init__(self, **config: Any) -> None:
        self.config = config

    def feedback(self, reason: str) -> str:
        template = str(self.config.get("feedback_template", "[{hook}] {reason}"))
        return template.format(hook=self.name, reason=reason)

    def on_input(self, ctx: HookContext, comments: list[str]) -> Verdict | None:
        return None

    def before_model(self, ctx: HookContext, messages: list[dict[str, str]]) -> Verdict | None:
        return None

    def after_model(self, ctx: HookContext, text: str) -> Verdict | None:
        return None

    def before_tool(self, ctx: HookContext, name: str, arguments: dict[str, Any]) -> Verdict | None:
        return None

    def after_tool(self, ctx: HookContext, name: str, arguments: dict[str, Any], result: Any) -> Verdict | None:
        return None

    def on_tool_error(
        self, ctx: HookContext, name: str, arguments: dict[str, Any], status: str, error: str, attempt: int
    ) -> Verdict | None:
        return None

    def stop_check(self, ctx: HookContext, reply: dict[str, Any]) -> Verdict | None:
        return None


# -- built-in hooks ----------------------------------------------------------------------------
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


class InputGuardHook(Hook):
    """Normalises viewer comments: drops control and bidi-override characters, collapses
    whitespace, truncates over-long comments to ``limits.max_comment_chars`` (noting it), and
    refuses a request whose comments are all empty afterwards."""

    name = "input_guard"

    def on_input(self, ctx: HookContext, comments: list[str]) -> Verdict | None:
        limit = int(self.config.get("max_chars", ctx.harness.limits.max_comment_chars))
        cleaned, notes = [], []
        for text in comments:
            text = unicodedata.normalize("NFC", _CONTROL.sub(" ", text or ""))
            text = re.sub(r"\s+", " ", text).strip()
            if len(text) > limit:
                notes.append(f"a comment of {len(text)} chars was cut to {limit}")
                text = text[:limit].rstrip() + " …"
            if text:
                cleaned.append(text)
        if not cleaned:
            return Verdict.block("the comment is empty after removing control characters and whitespace")
        if cleaned != list(comments):
            return Verdict.rewrite(cleaned, "; ".join(notes) or "normalised whitespace/control characters")
        return None


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> Draft202012Validator:
    """One compiled validator per reply schema (checked on every stop check)."""
    return Draft202012Validator(json.loads(schema_json))


class ReplySchemaHook(Hook):
    """The reply payload must match ``output.reply_schema``."""

    name = "reply_schema"

    def stop_check(self, ctx: HookContext, reply: dict[str, Any]) -> Verdict | None:
        validator = _validator(canonical_json(dict(ctx.harness.output.reply_schema)))
        errors = sorted(validator.iter_errors(reply), key=lambda e: list(e.path))
        if not errors:
            return None
        field_ = ctx.harness.output.reply_field
        return Verdict.retry(
            self.feedback(
                f"the reply does not match the schema ({errors[0].message}); "
                f'answer as <reply>{{"{field_}": "..."}}</reply>'
            )
        )


class ReplyLengthHook(Hook):
    """The reply text must fit the harness's current ``limits.reply_max_chars``."""

    name = "reply_length"

    def stop_check(self, ctx: HookContext, reply: dict[str, Any]) -> Verdict | None:
        text = str(reply.get(ctx.harness.output.reply_field, ""))
        limit = int(self.config.get("max_chars", ctx.harness.limits.reply_max_chars))
        if len(text) <= limit:
            return None
        return Verdict.retry(
            self.feedback(f"the reply has {len(text)} characters; the limit is {limit}. Say it shorter.")
        )


_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?")


class GroundedClaimsHook(Hook):
    """No invented discounts, prices or delivery promises: every number in the reply must appear in
    the rendered prompt or a tool result, and no ``forbidden_phrases`` may appear."""

    name = "grounded_claims"

    def stop_check(self, ctx: HookContext, reply: dict[str, Any]) -> Verdict | None:
        text = str(reply.get(ctx.harness.output.reply_field, ""))
        lowered = text.lower()
        for phrase in self.config.get("forbidden_phrases", []):
            if str(phrase).lower() in lowered:
                return Verdict.retry(self.feedback(f"do not promise {phrase!r}; only state what a tool returned"))
        grounding = " ".join(ctx.grounding)
        known = {_norm_number(n) for n in _NUMBER.findall(grounding)}
        allowed = {str(n) for n in self.config.get("allowed_numbers", [])}
        for number in _NUMBER.findall(text):
            if _norm_number(number) not in known and number not in allowed:
                return Verdict.retry(
                    self.feedback(
                        f"the number {number} is not in the product data or any tool result; "
                        "call a tool to check it or leave it out"
                    )
                )
        return None


def _norm_number(text: str) -> str:
    text = text.replace(",", ".")
    try:
        return f"{float(text):g}"
    except ValueError:
        return text


class ToolRetryHook(Hook):
    """Re-run a failed tool call: up to ``retries`` times for the statuses in ``statuses``
    (``timeout``, ``error``), sleeping ``backoff_s * 2**(attempt-1)`` between attempts."""

    name = "tool_retry"

    def on_tool_error(
        self, ctx: HookContext, name: str, arguments: dict[str, Any], status: str, error: str, attempt: int
    ) -> Verdict | None:
        if status not in self.config.get("statuses", ["timeout"]) or attempt > int(self.config.get("retries", 1)):
            return None
        time.sleep(float(self.config.get("backoff_s", 0.2)) * 2 ** (attempt - 1))
        return Verdict.retry(f"{name} {status}; retry {attempt}")


class ContextNoteHook(Hook):
    """A hook-triggered edit of the context: before each model call, add ``text`` (``{limit}`` is
    the current reply limit) as a system note after the system prompt."""

    name = "context_note"

    def before_model(self, ctx: HookContext, messages: list[dict[str, str]]) -> Verdict | None:
        text = str(self.config.get("text", "")).format(limit=ctx.harness.limits.reply_max_chars)
        if not text or not messages:
            return None
        return Verdict.rewrite(
            [messages[0], {"role": "system", "content": text}, *messages[1:]], "added a context note"
        )


BUILTIN_HOOKS: dict[str, type[Hook]] = {
    cls.name: cls
    for cls in (InputGuardHook, ReplySchemaHook, ReplyLengthHook, GroundedClaimsHook, ToolRetryHook, ContextNoteHook)
}


# -- resolution ----------------------------------------------------------------------------------
def _load_project_module(harness: Harness) -> Any:
    """Import the harness's ``hooks.py`` from its source (so a saved/augmented copy works too)."""
    key = f"hat_harness_hooks_{harness.content_hash()[:16]}"
    if key in sys.modules:
        return sys.modules[key]
    if not harness.hooks_source:
        raise ImportError("the harness has no hooks.py")
    spec = importlib.util.spec_from_loader(key, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(Path(harness.root or ".") / "hooks.py")
    exec(compile(harness.hooks_source, module.__file__, "exec"), module.__dict__)
    sys.modules[key] = module
    return module


def _resolve(spec: HookSpec, harness: Harness) -> type[Hook]:
    if spec.name in BUILTIN_HOOKS:
        return BUILTIN_HOOKS[spec.name]
    if spec.name.startswith("hooks:"):
        obj = getattr(_load_project_module(harness), spec.name[len("hooks:") :])
    elif spec.name.startswith("python:"):
        module, _, attr = spec.name[len("python:") :].partition(":")
        obj = getattr(importlib.import_module(module), attr)
    else:
        raise LookupError(
            f"unknown hook {spec.name!r}; use a built-in ({', '.join(sorted(BUILTIN_HOOKS))}), "
            "'hooks:ClassName' (the harness's hooks.py) or 'python:module:ClassName'"
        )
    if not (isinstance(obj, type) and issubclass(obj, Hook)):
        raise TypeError(f"{spec.name!r} is not a subclass of hat.harness.hooks.Hook")
    return obj


def check_hook_spec(spec: HookSpec, harness: Harness) -> str | None:
    """The problem with a hook reference, or None. Used by harness validation."""
    try:
        _resolve(spec, harness)(**dict(spec.config))
    except LookupError as exc:
        return str(exc.args[0]) if exc.args else str(exc)
    except Exception as exc:  # import errors, syntax errors in hooks.py, bad config
        return f"hook {spec.name!r} cannot be loaded: {type(exc).__name__}: {exc}"
    return None


def build_hooks(harness: Harness, extra: Sequence[Hook] = ()) -> list[Hook]:
    return [_resolve(spec, harness)(**dict(spec.config)) for spec in harness.hooks] + list(extra)


def describe(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)[:200]
