"""The prompt pipeline: render the harness's ordered Jinja blocks into the system prompt.

Each rendered block carries its id and the SHA-256 of its rendered text, so a trace shows exactly
which block changed between two harness versions (and the KV cache of an unchanged static prefix
can be reused).

Templates run in Jinja's *immutable* sandbox with size bounds (:class:`BoundedSandbox`): harness
files are written by operators, not programmers, and must not reach into Python, change the data
they render (``settings.rules.append(…)`` would edit the frozen harness for every later request) or
build strings large enough to exhaust memory (``'a' * 20000000``). Every value a template builds
and every block's output is capped at :data:`MAX_TEMPLATE_CHARS`; operations that multiply size
(``*``, ``**``, ``%``-formatting, ``center``/``indent``/``join``/``replace``/``translate``) are
checked *before* they run, the rest (``+``, ``~``, filters, method calls) right after, so no single
step allocates more than a small multiple of the cap; ``lipsum`` is removed. CPU time is not
bounded (``range`` stays capped at the sandbox's 100 000 items).

:func:`dry_render` renders every block against :func:`sample_context` so validation (and a
server's reload) rejects a template that parses but cannot render, instead of every request
failing later.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2.compiler import CodeGenerator, Frame
from jinja2.nodes import Concat
from jinja2.runtime import Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from hat.errors import HarnessError
from hat.harness.state import Harness, sha256_text

__all__ = [
    "HARNESS_VARIABLES",
    "MAX_TEMPLATE_CHARS",
    "BlockCheck",
    "BoundedSandbox",
    "RenderedBlock",
    "RenderedPrompt",
    "dry_render",
    "render_prompt",
    "render_user_message",
    "sample_context",
    "template_context",
]

#: The largest string (or list) a template may build, and the largest text one block may render.
#: A whole system prompt of a compact model is a few thousand characters.
MAX_TEMPLATE_CHARS = 200_000
_MAX_INT_BITS = 4096
_DIGITS = re.compile(r"\d+")
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\d*)(?:\.(\d+))?[a-zA-Z]")
_BRACE_SPEC = re.compile(r"\{[^{}]*?:([^{}]*)\}")
_NESTED_FIELD = re.compile(r"\{[^{}]*:[^{}]*\{")


def _too_big(what: str, size: int) -> SecurityError:
    return SecurityError(f"{what} would be {size:,} long; templates are limited to {MAX_TEMPLATE_CHARS:,}")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | list | tuple | dict) else 0


def _check_size(value: Any, what: str) -> Any:
    if _size(value) > MAX_TEMPLATE_CHARS:
        raise _too_big(what, _size(value))
    return value


def _check_format(fmt: Any) -> None:
    """A format string's widths and precisions (``%999999s``, ``{:>999999}``) size its output."""
    if not isinstance(fmt, str):
        return
    specs = [f"{w} {p}" for w, p in _PERCENT_SPEC.findall(fmt)] + _BRACE_SPEC.findall(fmt)
    for number in _DIGITS.findall(" ".join(specs)):
        if len(number) > 7 or int(number) > MAX_TEMPLATE_CHARS:
            raise _too_big("a format width", int(number))


def _check_format_args(fmt: str, values: Iterable[Any]) -> None:
    """``'{:>{}}'.format('a', 10**7)``: a nested field takes its width from the arguments."""
    if _NESTED_FIELD.search(fmt):
        for value in values:
            if isinstance(value, int) and value > MAX_TEMPLATE_CHARS:
                raise _too_big("a format width", value)


def _check_replace(text: Any, old: Any, new: Any, count: int = -1) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        hits = text.count(old) if count < 0 else min(count, text.count(old))
        size = len(text) + hits * max(len(new) - len(old), 0)
        if size > MAX_TEMPLATE_CHARS:
            raise _too_big("the replaced string", size)


def _check_join(items: Any, sep: Any = "", count_items: bool = True) -> None:
    """``items`` is a list (:func:`_listed`); the separator alone can multiply the size."""
    if isinstance(items, list):
        size = len(str(sep)) * max(len(items) - 1, 0)
        size += sum(len(str(i)) for i in items) if count_items else 0
        if size > MAX_TEMPLATE_CHARS:
            raise _too_big("the joined string", size)


def _check_translate(text: Any, table: Any) -> None:
    if isinstance(text, str) and isinstance(table, dict):
        longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
        if len(text) * longest > MAX_TEMPLATE_CHARS:
            raise _too_big("the translated string", len(text) * longest)


def _listed(args: tuple[Any, ...], index: int) -> tuple[Any, ...]:
    """Materialise the iterable at ``args[index]`` (a range, a generator from ``map``) so its size
    can be checked before joining; strings and undefined values are left alone."""
    if len(args) > index and isinstance(args[index], Iterable) and not isinstance(args[index], str | Undefined):
        return (*args[:index], list(args[index]), *args[index + 1 :])
    return args


def _check_width(text: Any, width: Any, per_line: bool = False) -> None:
    width = len(width) if isinstance(width, str) else width
    if isinstance(width, int) and isinstance(text, str):
        size = len(text) + width * (text.count("\n") + 1) if per_line else width
        if size > MAX_TEMPLATE_CHARS:
            raise _too_big("the padded string", size)


# Checks that run before a str method (called from a template) allocates its result.
_STR_METHOD_CHECKS: dict[str, Callable[..., None]] = {
    "center": lambda s, width=0, *a: _check_width(s, width),
    "ljust": lambda s, width=0, *a: _check_width(s, width),
    "rjust": lambda s, width=0, *a: _check_width(s, width),
    "zfill": lambda s, width=0, *a: _check_width(s, width),
    "expandtabs": lambda s, tabsize=8, *a: _check_width(s, tabsize * s.count("\t")),
    "replace": lambda s, old="", new="", count=-1, *a: _check_replace(s, old, new, count),
    "join": lambda s, items=(), *a: _check_join(items, s),
    "translate": lambda s, table=None, *a: _check_translate(s, table),
}

# Checks that run before a filter allocates its result (the filter's value comes first).
_FILTER_CHECKS: dict[str, Callable[..., None]] = {
    "center": lambda v, width=80, *a, **k: _check_width(v, width),
    "indent": lambda v, width=4, *a, **k: _check_width(v, width, per_line=True),
    "join": lambda v, d="", attribute=None, *a, **k: _check_join(v, d, count_items=attribute is None),
    "replace": lambda v, old="", new="", count=None, *a, **k: _check_replace(
        v, old, new, -1 if count is None else count
    ),
    "format": lambda v, *a, **k: _check_format(v),
}


def _bounded_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    check = _FILTER_CHECKS.get(name)
    pass_arg = getattr(fn, "jinja_pass_arg", None)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if name == "join":
            args = _listed(args, 1 if pass_arg else 0)
        if check is not None:
            check(*(args[1:] if pass_arg else args), **kwargs)
        return _check_size(fn(*args, **kwargs), f"the result of the {name!r} filter")

    return wrapper


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles ``a ~ b`` to :meth:`BoundedSandbox.bounded_concat` instead of Jinja's ``str_join``."""

    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with every string and list a template builds capped (module doc)."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters = {name: _bounded_filter(name, fn) for name, fn in self.filters.items()}
        self.globals.pop("lipsum", None)  # lipsum(n=10**7) builds gigabytes before any check
        self.concat = self._bounded_output  # type: ignore[method-assign]

    def call_binop(self, context: jinja2.runtime.Context, operator_: str, left: Any, right: Any) -> Any:
        if operator_ == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
        elif operator_ == "%":
            _check_format(left)
        elif operator_ == "**" and _int_power_too_big(left, right):
            raise SecurityError(f"{left} ** {right} is too large for a template")
        return _check_size(self.binop_table[operator_](left, right), f"the result of {operator_!r}")

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        target = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
        owner = getattr(target, "__self__", None)
        name = getattr(target, "__name__", "")
        if isinstance(owner, str):
            if name in ("format", "format_map"):
                _check_format(owner)
                _check_format_args(owner, (*args, *kwargs.values()))
            elif name in _STR_METHOD_CHECKS:
                args = _listed(args, 0) if name == "join" else args
                _STR_METHOD_CHECKS[name](owner, *args, **kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        return _check_size(result, f"the result of {name or 'a call'}()")

    def bounded_concat(self, values: Iterable[Any]) -> str:
        return str(_check_size("".join(map(str, values)), "the '~' concatenation"))

    def _bounded_output(self, parts: Iterable[str]) -> str:
        out, size = [], 0
        for part in parts:
            size += len(part)
            if size > MAX_TEMPLATE_CHARS:
                raise _too_big("the rendered text", size)
            out.append(part)
        return "".join(out)


def _int_power_too_big(base: Any, exponent: Any) -> bool:
    ints = isinstance(base, int) and isinstance(exponent, int)
    return ints and exponent > 0 and max(base.bit_length(), 1) * exponent > _MAX_INT_BITS


def _check_repeat(seq: Any, times: Any) -> None:
    if isinstance(seq, str | list | tuple) and isinstance(times, int) and not isinstance(times, bool):
        if len(seq) * times > MAX_TEMPLATE_CHARS:
            raise _too_big("the repeated value", len(seq) * times)
    elif isinstance(seq, int) and isinstance(times, int) and seq.bit_length() + times.bit_length() > _MAX_INT_BITS:
        raise SecurityError("the multiplication's result is too large for a template")


_ENV = BoundedSandbox(undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)


@functools.lru_cache(maxsize=512)
def _compile(source: str) -> jinja2.Template:
    """Compiled templates are cached by source (compiling was ~90 % of per-request runtime cost);
    a compiled Jinja template is immutable and safe to render from many threads."""
    return _ENV.from_string(source)


@dataclass(frozen=True)
class RenderedBlock:
    id: str
    text: str
    hash: str


@dataclass(frozen=True)
class RenderedPrompt:
    blocks: tuple[RenderedBlock, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks if b.text)

    @property
    def block_hashes(self) -> dict[str, str]:
        return {b.id: b.hash[:16] for b in self.blocks}


#: Template variables the harness provides; a request's context cannot override them (a caller must
#: not be able to replace the harness's rules or tool list by sending ``{"settings": ...}``).
HARNESS_VARIABLES = (
    "harness",
    "limits",
    "settings",
    "skills",
    "tools",
    "tool_signatures_json",
    "skill_tool",
    "reply_field",
    "context",
)


class _Identity:
    """A harness as a cache key by identity (a frozen harness holds dicts, so it has no hash)."""

    __slots__ = ("harness",)

    def __init__(self, harness: Harness) -> None:
        self.harness = harness

    def __hash__(self) -> int:
        return id(self.harness)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.harness is self.harness


@functools.lru_cache(maxsize=256)
def _harness_variables(key: _Identity) -> dict[str, Any]:
    """The harness's own template variables, computed once per harness object (the tool signatures'
    JSON was most of a request's template-context cost; templates cannot change these values: the
    sandbox is immutable)."""
    harness = key.harness
    return {
        "harness": harness,
        "limits": harness.limits,
        "settings": dict(harness.settings),
        "skills": list(harness.skills),
        "tools": list(harness.tools),
        "tool_signatures_json": [json.dumps(t.signature(), ensure_ascii=False) for t in harness.tools],
        "skill_tool": harness.output.skill_tool,
        "reply_field": harness.output.reply_field,
    }


def template_context(harness: Harness, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The variables every block template can use: the harness's own (:data:`HARNESS_VARIABLES`)
    and each key of the request's ``context`` as a top-level variable (also reachable as
    ``context``); where names collide the harness's win."""
    context = dict(context or {})
    return {**context, **_harness_variables(_Identity(harness)), "context": context}


def render_prompt(harness: Harness, variables: dict[str, Any]) -> RenderedPrompt:
    """Render the pipeline's blocks in order. A template error names the block."""
    rendered = []
    for block_id in harness.pipeline:
        block = harness.block(block_id)
        if block is None:
            raise HarnessError(f"pipeline block {block_id!r} has no template (prompts/{block_id}.md)")
        try:
            text = _compile(block.template).render(**variables).strip()
        except Exception as exc:
            raise HarnessError(f"prompt block {block_id!r} failed to render: {type(exc).__name__}: {exc}") from exc
        rendered.append(RenderedBlock(block_id, text, sha256_text(text)))
    return RenderedPrompt(tuple(rendered))


def render_user_message(harness: Harness, turns: Sequence[str], mode: str, context: Mapping[str, Any]) -> str:
    """The user message for ``turns``: the harness's input block
    (:attr:`~hat.harness.state.Harness.input_block`) rendered with ``turns``, ``mode`` and the
    template context, or without one the single turn / the turns as a numbered list. Not stripped:
    a turn's own text reaches the model as sent (callers neutralise markup first)."""
    block = harness.block(harness.input_block) if harness.input_block else None
    if block is None:
        if len(turns) == 1:
            return turns[0]
        return "\n".join(f"{i}. {t}" for i, t in enumerate(turns, 1))
    variables = {**template_context(harness, context), "turns": list(turns), "mode": mode}
    try:
        return _compile(block.template).render(**variables)
    except Exception as exc:
        raise HarnessError(f"input block {block.id!r} failed to render: {type(exc).__name__}: {exc}") from exc


# -- dry render (validation) -----------------------------------------------------------------------
def sample_context(harness: Harness, *, bare: bool = False) -> dict[str, Any]:
    """The variables a dry render uses: the harness's own :attr:`~hat.harness.state.Harness.sample_context`
    (a request context shaped like the real ones, from ``sample_context.yaml``), or (``bare``) an
    empty context, as a request that carries none gets."""
    if bare:
        return template_context(harness)
    return template_context(harness, json.loads(json.dumps(dict(harness.sample_context), default=str)))


@dataclass(frozen=True)
class BlockCheck:
    """A block's dry render: ``text`` with the full sample (None when that failed, ``error`` says
    why); ``warning`` when it renders with the full sample but fails with an empty context."""

    block_id: str
    text: str | None
    error: str = ""
    warning: str = ""
    line: int | None = None


def _template_line(exc: BaseException) -> int | None:
    line, tb = getattr(exc, "lineno", None), exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line if isinstance(line, int) else None


def _try_render(template: str, variables: dict[str, Any]) -> tuple[str | None, str, int | None]:
    try:
        return _compile(template).render(**variables), "", None
    except Exception as exc:  # any template failure is a validation problem, never a crash
        return None, f"{type(exc).__name__}: {exc}", _template_line(exc)


def dry_render(harness: Harness) -> list[BlockCheck]:
    """Render every block of ``harness`` (in the pipeline or not) against :func:`sample_context`."""
    full, bare = sample_context(harness), sample_context(harness, bare=True)
    checks = []
    for block in harness.blocks:
        text, error, line = _try_render(block.template, full)
        if text is None:
            checks.append(
                BlockCheck(block.id, None, f"fails to render with the harness's sample context: {error}", "", line)
            )
            continue
        _, bare_error, bare_line = _try_render(block.template, bare)
        warning = f"fails to render when a request has no context: {bare_error}" if bare_error else ""
        checks.append(BlockCheck(block.id, text, "", warning, bare_line))
    return checks
