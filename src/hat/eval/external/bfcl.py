"""BFCL (Berkeley Function-Calling Leaderboard) v4, single-turn AST categories.

Data (``BFCL_v4_<category>.json``, JSON lines): ``id``, ``question`` (a list of turns, each a list
of chat messages; these categories have one turn, sometimes with a system message) and
``function`` (schemas in BFCL's dialect: ``"type": "dict"``, ``"float"``, ``"tuple"``, ``"any"``;
dotted names such as ``math.factorial``). ``possible_answer/BFCL_v4_<category>.json`` holds
``ground_truth``: a list of ``{function: {argument: [acceptable values]}}``, where ``""`` among
the values means the argument may be omitted. ``irrelevance`` has no answers: no call is right.

The model sees the functions through :func:`~hat.eval.external.foreign.harness_from_tools` (our
``<tool_call>`` protocol instead of BFCL's ``[f(a=1)]`` prompt format; names as BFCL gives them,
dots included), and its first output's calls are checked with a port of BFCL's Python AST
checker (``bfcl_eval/eval_checker/ast_eval/ast_checker.py``):

- *simple* categories (``simple_python``, ``live_simple``): exactly one call, of the expected
  function; every required parameter present; no parameter outside the schema or the answer;
  each value type-checked (an int is accepted for a ``float``; a value of the answer's type is
  accepted as a "variable") and found among the acceptable values: strings compared after
  BFCL's standardisation (case, spaces and ``,./-_*^`` ignored), lists element-wise, dicts key by
  key; every answer parameter without ``""`` present;
- *multiple*: one call, checked against the one expected function;
- *parallel*: as many calls as answers, matched in any order (each answer consumes one call);
- *irrelevance*: right when the model makes no call (a reply, or output we cannot parse, as
  BFCL counts an undecodable output as no call).

Our arguments arrive as JSON, so tuples are lists and there is no Python-only value; otherwise the
checks are BFCL's, including its strictness (``"5"`` is not an ``integer``).
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hat.errors import HatError
from hat.eval.external.foreign import first_turn, harness_from_tools
from hat.models.base import Message, Model
from hat.textio import read_jsonl

__all__ = ["CATEGORIES", "check_bfcl", "check_calls", "load_bfcl", "run_bfcl"]

CATEGORIES = ("simple_python", "multiple", "parallel", "live_simple", "irrelevance")
Progress = Callable[[int, int], None]
Check = tuple[bool, str]  # (valid, error)
OK: Check = (True, "")

PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
NESTED_TYPES = ("array", "tuple")
_STANDARDISE = re.compile(r"[ \,\.\/\-\_\*\^]")


# -- data ------------------------------------------------------------------------------------------
def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, row in read_jsonl(path, what="BFCL data"):
        if not isinstance(row, dict) or "id" not in row:
            raise HatError(f"{path}:{number}: a BFCL row must be a JSON object with an 'id'")
        rows.append(row)
    return rows


def load_bfcl(data_dir: str | Path, category: str) -> list[dict[str, Any]]:
    """The items of one category, each with its ``ground_truth`` joined in (``[]`` for
    irrelevance)."""
    root = Path(data_dir)
    items = _jsonl(root / f"BFCL_v4_{category}.json")
    answers_path = root / "possible_answer" / f"BFCL_v4_{category}.json"
    if category == "irrelevance" or not answers_path.exists():
        if category != "irrelevance":
            raise HatError(f"BFCL category {category!r} has no answers at {answers_path}")
        return [{**item, "ground_truth": []} for item in items]
    truth = {row["id"]: row["ground_truth"] for row in _jsonl(answers_path)}
    missing = [item["id"] for item in items if item["id"] not in truth]
    if missing:
        raise HatError(f"{answers_path} lacks answers for {missing[:5]} ({len(missing)} in all)")
    return [{**item, "ground_truth": truth[item["id"]]} for item in items]


# -- value checks (BFCL's, for Python) ---------------------------------------------------------------
def standardise(text: str) -> str:
    return _STANDARDISE.sub("", text).lower().replace("'", '"')


def _std(value: Any) -> Any:
    return standardise(value) if isinstance(value, str) else value


def _answer_type(acceptable: Sequence[Any]) -> type | None:
    return next((type(a) for a in acceptable if a != ""), None)


def _type_check(value: Any, acceptable: Sequence[Any], expected: type | None, nested: type | None) -> tuple[bool, bool]:
    """(valid, is_variable), after BFCL's ``type_checker`` (one level of nesting)."""
    answer_type = _answer_type(acceptable)
    is_variable = answer_type is not None and answer_type is not expected
    if expected is None or type(value) is expected:
        if nested is None:
            return True, is_variable
        # As BFCL: a non-list acceptable value (the optional marker "") passes the inner check.
        for item in acceptable:
            if not isinstance(item, list) or all(_type_check(v, item, nested, None)[0] for v in value):
                return True, is_variable
        return False, False
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, False


def _string_ok(value: str, acceptable: Sequence[Any]) -> bool:
    return standardise(value) in [standardise(a) for a in acceptable if isinstance(a, str)]


def _as_list(answer: Any) -> list[Any] | None:
    """An acceptable list value; BFCL's loops read the optional marker ``""`` as an empty list."""
    if isinstance(answer, list):
        return answer
    return [] if answer == "" else None


def _list_ok(value: list[Any], acceptable: Sequence[Any]) -> bool:
    options = [[_std(x) for x in a] for a in map(_as_list, acceptable) if a is not None]
    return [_std(x) for x in value] in options


def _dict_ok(value: Mapping[str, Any], acceptable: Sequence[Any]) -> bool:
    for answer in acceptable:
        if answer == "" or not isinstance(answer, Mapping):
            continue
        keys_ok = all(k in answer and _std(v) in [_std(a) for a in answer[k]] for k, v in value.items())
        if keys_ok and all(k in value or "" in vals for k, vals in answer.items()):
            return True
    return False


def _list_of_dicts_ok(value: list[Any], acceptable: Sequence[Any]) -> bool:
    for answer in map(_as_list, acceptable):
        if answer is None or len(answer) != len(value):
            continue
        if all(isinstance(v, Mapping) and _dict_ok(v, [a]) for v, a in zip(value, answer, strict=True)):
            return True
    return False


def _value_ok(value: Any, acceptable: Sequence[Any], expected: type | None, nested: type | None) -> bool:
    if expected is dict:
        return isinstance(value, Mapping) and _dict_ok(value, acceptable)
    if expected is list and nested is dict:
        return isinstance(value, list) and _list_of_dicts_ok(value, acceptable)
    if expected is str:
        return _string_ok(value, acceptable)
    if expected is list:
        return _list_ok(value, acceptable)
    return value in acceptable


def _param_check(name: str, value: Any, details: Mapping[str, Any], acceptable: Sequence[Any]) -> Check:
    type_name = str(details.get("type", ""))
    expected = PYTHON_TYPES.get(type_name)
    nested = None
    if type_name in NESTED_TYPES:
        nested = PYTHON_TYPES.get(str((details.get("items") or {}).get("type", "")))
    if type_name == "float" and type(value) is int:
        value = float(value)  # BFCL allows Python's int → float promotion
    valid, is_variable = _type_check(value, acceptable, expected, nested)
    if not valid:
        return False, f"wrong type for {name!r}: expected {type_name}, got {type(value).__name__}"
    ok = value in acceptable if is_variable else _value_ok(value, acceptable, expected, nested)
    return OK if ok else (False, f"invalid value for {name!r}: {value!r}; expected one of {list(acceptable)}")


# -- call checks -----------------------------------------------------------------------------------
def _find(functions: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((f for f in functions if f.get("name") == name), None)


def check_call(function: Mapping[str, Any], call: Mapping[str, Any], answer: Mapping[str, Any]) -> Check:
    """One decoded call ``{name: arguments}`` against one answer ``{name: {param: [values]}}``
    (BFCL's ``simple_function_checker``)."""
    name, acceptable = next(iter(answer.items()))
    if name not in call:
        return False, f"expected a call to {name!r}"
    arguments = call[name]
    params = function.get("parameters", {})
    details = params.get("properties", {})
    missing = [p for p in params.get("required", []) if p not in arguments]
    if missing:
        return False, f"missing required parameter {missing[0]!r}"
    for param, value in arguments.items():
        if param not in details or param not in acceptable:
            return False, f"unexpected parameter {param!r}"
        result = _param_check(param, value, details[param], acceptable[param])
        if not result[0]:
            return result
    absent = [p for p, vals in acceptable.items() if p not in arguments and "" not in vals]
    return (False, f"parameter {absent[0]!r} not given and not optional") if absent else OK


def _check_against(functions: Sequence[Mapping[str, Any]], call: Mapping[str, Any], answer: Mapping[str, Any]) -> Check:
    function = _find(functions, next(iter(answer)))
    if function is None:
        return False, f"the answer names {next(iter(answer))!r}, which is not among the functions"
    return check_call(function, call, answer)


def _parallel(functions: Sequence[Mapping[str, Any]], calls: list[dict[str, Any]], truth: list[Any]) -> Check:
    if len(calls) != len(truth):
        return False, f"wrong number of calls: {len(calls)} for {len(truth)} expected"
    used: set[int] = set()
    for i, answer in enumerate(truth):
        match = next(
            (j for j, call in enumerate(calls) if j not in used and _check_against(functions, call, answer)[0]), None
        )
        if match is None:
            return False, f"no call matches expected call {i} ({next(iter(answer))})"
        used.add(match)
    return OK


def check_calls(
    category: str, functions: Sequence[Mapping[str, Any]], calls: list[dict[str, Any]], truth: list[Any]
) -> Check:
    """Score decoded calls (``[{name: arguments}, ...]``) the way BFCL scores ``category``."""
    if "irrelevance" in category:
        return OK if not calls else (False, f"made {len(calls)} call(s) where none fits")
    if "parallel" in category:
        return _parallel(functions, calls, truth)
    if len(calls) != len(truth) or len(calls) != 1:
        return False, f"wrong number of calls: {len(calls)} for {len(truth)} expected"
    return _check_against(functions, calls[0], truth[0])


# -- running ---------------------------------------------------------------------------------------
def _messages(item: Mapping[str, Any]) -> list[Message]:
    turn = item["question"][0]
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in turn]


def _run_item(
    model: Model, category: str, item: Mapping[str, Any], rename: Callable[[str], str] | None, max_new_tokens: int
) -> dict[str, Any]:
    harness, _ = harness_from_tools(
        item["function"], name=f"bfcl-{category}", rename=rename, max_new_tokens=max_new_tokens
    )
    turn = first_turn(model, harness, _messages(item))
    calls = [{c.name: dict(c.arguments)} for c in turn.calls]
    valid, error = check_calls(category, item["function"], calls, item["ground_truth"])
    return {
        "id": item["id"],
        "category": category,
        "calls": turn.calls_as_dicts(),
        "kind": turn.kind,
        "raw_output": turn.raw_output,
        "valid": valid,
        "error": error,
    }


def _summary(records: Sequence[dict[str, Any]], categories: Sequence[str]) -> dict[str, Any]:
    by_cat: dict[str, list[bool]] = collections.defaultdict(list)
    for r in records:
        by_cat[r["category"]].append(r["valid"])
    per = {
        c: {"n": len(by_cat[c]), "accuracy": round(100.0 * sum(by_cat[c]) / len(by_cat[c]), 2)}
        for c in categories
        if by_cat[c]
    }
    n = sum(v["n"] for v in per.values())
    return {
        "categories": per,
        "overall_micro": round(100.0 * sum(r["valid"] for r in records) / n, 2) if n else 0.0,
        "overall_macro": round(sum(v["accuracy"] for v in per.values()) / len(per), 2) if per else 0.0,
    }


def _present(data_dir: str | Path) -> tuple[str, ...]:
    found = tuple(c for c in CATEGORIES if (Path(data_dir) / f"BFCL_v4_{c}.json").exists())
    if not found:
        raise HatError(
            f"no BFCL_v4_<category>.json files in {data_dir} (looked for {', '.join(CATEGORIES)}); "
            "pass --data the folder that holds them"
        )
    return found


def check_bfcl(data_dir: str | Path) -> int:
    """Read every category :func:`run_bfcl` will run (questions and answers), without a model, so
    missing or malformed data fails before a slow model load. Returns the number of items."""
    return sum(len(load_bfcl(data_dir, c)) for c in _present(data_dir))


def run_bfcl(
    model: Model,
    data_dir: str | Path,
    *,
    categories: Sequence[str] | None = None,
    limit: int | None = None,
    rename: Callable[[str], str] | None = None,
    max_new_tokens: int = 256,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run BFCL ``categories`` (default: those of :data:`CATEGORIES` with a file in ``data_dir``;
    ``limit`` keeps the first N items of each). Returns per-category accuracy (0-100), overall
    micro (over items) and macro (mean of categories) accuracy, and per-item ``records``.
    ``max_new_tokens`` bounds each answer: a model that ignores the protocol rambles to the limit
    (SmolLM2-135M on 2 CPU cores: ~40 s an item at 256)."""
    categories = tuple(categories or _present(data_dir))
    data = {c: load_bfcl(data_dir, c)[:limit] for c in categories}
    total, done = sum(len(v) for v in data.values()), 0
    records = []
    for category, items in data.items():
        for item in items:
            records.append(_run_item(model, category, item, rename, max_new_tokens))
            done += 1
            if progress is not None:
                progress(done, total)
    return {
        "model": getattr(model, "name", type(model).__name__),
        **_summary(records, categories),
        "renamed": rename is not None,
        "max_new_tokens": max_new_tokens,
        "records": records,
    }
