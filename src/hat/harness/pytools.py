"""Tools from typed Python functions: the :func:`tool` decorator.

A tool is a name, a description and a JSON Schema of its arguments (:class:`~hat.harness.state.ToolSpec`).
Written by hand in ``tools/*.yaml``, the schema drifts from the function it describes; here it is
derived from the function itself::

    @tool(idempotent=True)
    def lookup_order(order_id: str, *, context: ToolContext) -> dict:
        \"\"\"Look up one of the customer's orders.

        Args:
            order_id: The order number, e.g. SD-1001.
        \"\"\"

- **name**: the function's name; **description**: the docstring's first paragraph; **parameter
  descriptions**: its ``Args:`` section (Google style; ``:param x:`` lines work too), unless a
  parameter is ``Annotated[..., Field(description=...)]`` already;
- **schema**: pydantic's, from the type hints (``Literal``, ``date``, nested models, ``Field``
  constraints), without titles (they repeat the names and cost prompt tokens);
- ``context``: a keyword-only parameter of that name receives the request's
  :class:`~hat.harness.tools.ToolContext` and is not part of the schema;
- ``idempotent=``: the runtime retries only idempotent tools (see :mod:`hat.harness.tools`).

Why pydantic's *function* adapter (``TypeAdapter`` over a signature without ``context``) and not
``create_model``: a model's fields may not be named ``json``, ``copy``, ``schema`` or
``model_*`` (they would shadow ``BaseModel`` attributes), while a tool's parameters may be named
anything. The adapter validates the call's arguments into Python values (a ``date`` string becomes a
``date``) and returns them; the result the function returns is made JSON-ready with
``pydantic_core.to_jsonable_python`` (a model, a dataclass, a date), because an observation goes into
the trace and the next prompt.

The decorated object stays the function: calling it runs the function unchanged (no validation),
so it can be unit-tested as before. :meth:`Tool.run` is what the tool registry calls: it validates
the JSON arguments, passes ``context``, and returns a JSON-ready value. Arguments that fail
pydantic's validation are an ``invalid_args`` observation, like a JSON Schema violation
(:class:`ArgumentsValidator`, which :class:`~hat.harness.tools.ToolRegistry` uses for tools made
here).

Two ways to use a decorated function:

- **as a harness binding**: ``binding: python:my_pkg.tools:lookup_order`` in a ``tools/*.yaml``;
  :func:`spec_of` gives that file's content (``tool_yaml`` its text), so the YAML can be generated
  and a test can check it has not drifted;
- **from Python**: ``ToolRegistry(harness, extra=[lookup_order])`` adds the tool to the harness it
  serves (``registry.harness``, which the agent must use too) and calls the function object directly,
  so it may live in a script or a test: ``Agent(registry.harness, model, tools=registry)``.
  :func:`with_tools` adds the specs alone (a harness to save or to diff).
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaViolation
from pydantic import Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import ArgsKwargs, CoreSchema, to_jsonable_python

from hat.errors import ToolBindingError
from hat.harness.state import Harness, ToolSpec

if TYPE_CHECKING:
    from hat.harness.tools import ToolContext

__all__ = ["ArgumentsValidator", "Tool", "as_tool", "spec_of", "tool", "tool_yaml", "with_tools"]

CONTEXT = "context"
"""The parameter that receives the :class:`~hat.harness.tools.ToolContext` (never in the schema)."""


# -- docstrings -------------------------------------------------------------------------------------
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns?|Yields?|Raises|Examples?|Notes?|See Also):\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")


@dataclass(frozen=True)
class _Docstring:
    """The parts of a docstring a tool needs: the first paragraph and per-parameter text."""

    summary: str = ""
    params: Mapping[str, str] = field(default_factory=dict)


def _parse_docstring(doc: str | None) -> _Docstring:
    """Google-style ``Args:`` (continuation lines indented deeper) and Sphinx ``:param x:`` lines."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()) or _SPHINX_PARAM.match(line.strip()):
            break
        summary.append(line.strip())
    return _Docstring(" ".join(summary), _google_args(lines) | _sphinx_params(lines))


def _google_args(lines: Sequence[str]) -> dict[str, str]:
    params: dict[str, list[str]] = {}
    in_args, indent, current = False, 0, ""
    for line in lines:
        stripped, depth = line.strip(), len(line) - len(line.lstrip())
        if _SECTION.match(stripped) and depth == 0:
            in_args, indent, current = stripped.rstrip(":") in ("Args", "Arguments", "Parameters", "Params"), 0, ""
            continue
        if not in_args or not stripped:
            continue
        match = _ARG_LINE.match(stripped)
        if match and depth > 0 and (not indent or depth <= indent):
            indent, current = depth, match.group(1).lstrip("*")
            params[current] = [match.group(2).strip()]
        elif current and depth > indent:
            params[current].append(stripped)
        elif depth == 0:
            in_args = False
    return {name: " ".join(p for p in parts if p) for name, parts in params.items()}


def _sphinx_params(lines: Sequence[str]) -> dict[str, str]:
    found = (_SPHINX_PARAM.match(line.strip()) for line in lines)
    return {m.group(1): m.group(2).strip() for m in found if m}


# -- signature → schema -----------------------------------------------------------------------------
class _NoTitles(GenerateJsonSchema):
    """Property titles repeat the names ("Order Id"); a prompt does not need them."""

    def field_title_should_be_set(self, schema: CoreSchema) -> bool:  # type: ignore[override]
        return False


def _hints(fn: Callable[..., Any], names: Iterable[str]) -> dict[str, Any]:
    """Resolved type hints of ``names`` only: ``context``'s annotation may name a type imported
    under ``TYPE_CHECKING`` (fine for the runtime, which never evaluates it)."""
    raw = getattr(fn, "__annotations__", {}) or {}

    def holder() -> None: ...

    holder.__annotations__ = {n: raw[n] for n in names if n in raw}
    try:
        return typing.get_type_hints(holder, globalns=getattr(fn, "__globals__", None), include_extras=True)
    except Exception as exc:  # NameError for an unimportable name, TypeError for a bad annotation
        raise TypeError(f"tool {fn.__name__!r}: cannot resolve its type hints ({exc})") from exc


def _with_description(hint: Any, description: str) -> Any:
    """``hint`` annotated with the docstring's description, unless a ``Field`` already gives one."""
    if typing.get_origin(hint) is Annotated:
        for meta in hint.__metadata__:
            if isinstance(meta, FieldInfo) and meta.description:
                return hint
    return Annotated[hint, Field(description=description)] if description else hint


def _arguments_adapter(fn: Callable[..., Any], doc: _Docstring) -> tuple[TypeAdapter[Any], bool]:
    """A pydantic adapter over ``fn``'s signature without ``context`` (every parameter keyword-only,
    as a JSON object supplies them) that returns the validated arguments; and whether ``fn`` takes
    ``context``."""
    signature = inspect.signature(fn)
    params = [p for p in signature.parameters.values() if p.name != CONTEXT]
    takes_context = CONTEXT in signature.parameters
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise TypeError(f"tool {fn.__name__!r}: parameter {p.name!r} cannot be passed by name from JSON")
        if p.annotation is p.empty:
            raise TypeError(f"tool {fn.__name__!r}: parameter {p.name!r} needs a type hint (the schema comes from it)")
    hints = _hints(fn, [p.name for p in params])
    annotated = {p.name: _with_description(hints[p.name], doc.params.get(p.name, "")) for p in params}

    def arguments(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    keyword = [p.replace(kind=p.KEYWORD_ONLY, annotation=annotated[p.name]) for p in params]
    arguments.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=keyword, return_annotation=signature.empty
    )
    arguments.__annotations__ = annotated
    return TypeAdapter(typing.cast(Any, arguments)), takes_context


# -- the tool ---------------------------------------------------------------------------------------
class Tool:
    """A Python function as a tool: ``name``, ``description``, ``parameters`` (JSON Schema),
    ``idempotent``, ``timeout_s``, ``metadata``. Calling it calls the function; :meth:`run` is
    the registry's entry (validated arguments in, JSON-ready value out)."""

    fn: Callable[..., Any]

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        timeout_s: float | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(fn, Tool):
            fn = fn.fn
        if not callable(fn) or not hasattr(fn, "__name__"):
            raise TypeError(f"@tool needs a function, got {fn!r}")
        doc = _parse_docstring(fn.__doc__)
        self.fn = fn
        self.name = name or fn.__name__
        self.description = (description or doc.summary).strip()
        if not self.description:
            raise TypeError(f"tool {self.name!r} needs a description: give the function a docstring")
        self.idempotent = idempotent
        self.timeout_s = timeout_s
        self.metadata = {"function_id": self.name, **(metadata or {})}
        self._adapter, self.takes_context = _arguments_adapter(fn, doc)
        self.parameters: dict[str, Any] = self._adapter.json_schema(schema_generator=_NoTitles)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name!r} of {getattr(self.fn, '__module__', '?')}.{self.fn.__qualname__}>"

    @property
    def binding(self) -> str:
        """``python:module:function``: where a harness's YAML finds this tool."""
        return f"python:{self.fn.__module__}:{self.fn.__qualname__}"

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as Python values; raises pydantic's ``ValidationError``."""
        return dict(self._adapter.validate_python(ArgsKwargs((), dict(arguments))))

    def run(self, /, *, context: ToolContext | None = None, **arguments: Any) -> Any:
        """One call from the registry: validate, pass ``context`` if the function takes it, and
        return a JSON-ready result."""
        kwargs = self.validate(arguments)
        if self.takes_context:
            if context is None:
                from hat.harness.tools import ToolContext

                context = ToolContext()
            kwargs[CONTEXT] = context
        return to_jsonable_python(self.fn(**kwargs), fallback=str)

    def spec(self, binding: str | None = None) -> ToolSpec:
        """The :class:`ToolSpec` a harness holds for this tool (``binding`` defaults to
        :attr:`binding`)."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            binding=binding or self.binding,
            timeout_s=self.timeout_s,
            metadata=dict(self.metadata),
            idempotent=self.idempotent,
        )


@typing.overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@typing.overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    timeout_s: float | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    timeout_s: float | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a :class:`Tool` (``@tool`` or ``@tool(idempotent=True, ...)``).
    Raises ``TypeError`` at decoration time for what cannot become a schema: a parameter without
    a type hint, ``*args``/``**kwargs``, positional-only parameters, no docstring."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f, name=name, description=description, idempotent=idempotent, timeout_s=timeout_s, metadata=metadata
        )

    return wrap(fn) if fn is not None else wrap


def as_tool(fn: Callable[..., Any]) -> Tool:
    """``fn`` itself if it is a :class:`Tool`, else ``tool(fn)`` (a plain typed function)."""
    return fn if isinstance(fn, Tool) else Tool(fn)


def spec_of(fn: Callable[..., Any], *, binding: str | None = None) -> dict[str, Any]:
    """The content of the ``tools/<name>.yaml`` that binds ``fn`` (a :class:`Tool` or a plain
    typed function): name, description, parameters, binding, idempotent, metadata, and
    ``timeout_s`` when set."""
    data = as_tool(fn).spec(binding).to_dict()
    return {k: v for k, v in data.items() if v is not None}


def tool_yaml(fn: Callable[..., Any], *, binding: str | None = None) -> str:
    """:func:`spec_of` as YAML text, ready to write to ``tools/<name>.yaml``."""
    import yaml

    return yaml.safe_dump(spec_of(fn, binding=binding), sort_keys=False, allow_unicode=True, width=100)


def with_tools(harness: Harness, tools: Iterable[Callable[..., Any]]) -> Harness:
    """``harness`` with a :class:`ToolSpec` for each of ``tools``: one with the name of an existing
    tool replaces it in place, the others are appended. Pure; the functions are not registered
    anywhere (:class:`~hat.harness.tools.ToolRegistry` ``extra=`` runs them)."""
    specs = {t.name: t.spec() for t in map(as_tool, tools)}
    kept = tuple(specs.pop(t.name, t) for t in harness.tools)
    return harness.replace(tools=kept + tuple(specs.values()))


def extend(harness: Harness, extra: Iterable[Callable[..., Any]]) -> tuple[Harness, dict[str, Callable[..., Any]]]:
    """For :class:`~hat.harness.tools.ToolRegistry` ``extra=``: the harness with the tools' specs,
    and the callables to run by tool name (each :meth:`Tool.run`)."""
    tools = [as_tool(fn) for fn in extra]
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ToolBindingError(f"extra tools share the name(s) {duplicates}; give each a unique name=")
    return with_tools(harness, tools), {t.name: t.run for t in tools}


def runner(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What the registry calls for a bound function: :meth:`Tool.run` for a :class:`Tool`
    (validation, ``context``, JSON-ready result), the function itself otherwise."""
    return fn.run if isinstance(fn, Tool) else fn


class ArgumentsValidator:
    """Checks one tool call's arguments the way :class:`~hat.harness.tools.ToolRegistry` reports
    them (``iter_errors`` like a ``jsonschema`` validator, so the registry treats both alike): first
    the harness's JSON Schema of the tool (under its current, possibly HSA-renamed parameter names),
    then, for a :class:`Tool`, pydantic's validation of the canonical arguments (what JSON Schema
    cannot say: custom validators, nested models). Either failure is an ``invalid_args``
    observation for the model instead of an exception inside the tool."""

    def __init__(self, spec: ToolSpec, schema: Mapping[str, Any], tool: Tool) -> None:
        self.spec, self.tool = spec, tool
        self._schema = Draft202012Validator(dict(schema))

    def iter_errors(self, arguments: Mapping[str, Any]) -> Iterator[SchemaViolation]:
        errors = list(self._schema.iter_errors(arguments))
        if errors:
            yield from errors
            return
        from hat.harness.tools import canonical_arguments

        try:
            self.tool.validate(canonical_arguments(self.spec, arguments))
        except ValidationError as exc:
            for error in exc.errors(include_url=False):
                yield SchemaViolation(str(error["msg"]), path=deque(error["loc"]))


def validator_for(spec: ToolSpec, schema: Mapping[str, Any], fn: Callable[..., Any] | None) -> Any:
    """The registry's argument validator for one tool: :class:`ArgumentsValidator` for a
    :class:`Tool` (or its :meth:`Tool.run`), a plain JSON Schema validator otherwise."""
    bound = getattr(fn, "__self__", fn)
    if isinstance(bound, Tool):
        return ArgumentsValidator(spec, schema, bound)
    return Draft202012Validator(dict(schema))
