"""RoTBench (Ye et al., 2024): tool use under noisy tool and parameter names, first turn only.

Data (``First_Turn_{clean,slight,medium,heavy,union}.json``): a JSON list of items, each
``{"id", "scenario", "conversations": [system, user, assistant]}``. The system turn is RoTBench's
ReAct prompt with the tool list embedded as JSON after ``tools:``; the user turn is the query
(ending in ``Begin!``); the assistant turn's ``value`` is a *list* of acceptable answers, each
``"Thought:\\nAction: <tool>\\nAction Input: <json object>"``. Noise levels rename tools and
parameters (typos, reversed or random names, names swapped between tools), and the gold answers
use the noisy names. ``scenario`` is one of seven two-letter codes (:data:`SCENARIOS`).

We show the model the item's tools through :func:`~hat.eval.external.foreign.harness_from_tools`
(our protocol instead of RoTBench's ReAct format; the user turn verbatim) and score its first
call with the semantics of RoTBench's ``Code/Evaluation/evaluate.py``:

- **tool selection**: the called name equals a gold answer's action. The last listed tool is the
  "finish" slot: calling ``finish`` counts as calling whatever name noise gave that slot;
- **parameter identification**: also the same *set* of argument names as that answer;
- **content filling**: also equal values, except that gold values ``"None"`` are ignored, and
  answers in the finish / ask-to-user slots (the last two tools, or tools literally named
  ``finish`` / ``ask_to_user``) need no value match.

Values are compared with ``==`` after JSON decoding, as the official script does (gold values are
strings, so ``5`` does not equal ``"5"``). One official quirk is kept by default: a call with *no*
arguments is wrong at every level, even when the gold answer has no arguments either (8 of 105
clean items can therefore never be right). ``accept_empty_args=True`` removes that quirk; numbers
comparable with the paper's need the default. The official script also mutates the model's
arguments while looping over several gold answers; we compare each answer afresh.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hat.errors import HatError
from hat.eval.external.foreign import first_turn, harness_from_tools
from hat.harness.protocol import ToolCall
from hat.models.base import Model
from hat.textio import read_json

__all__ = [
    "LEVELS",
    "SCENARIOS",
    "RotSample",
    "check_rotbench",
    "load_rotbench",
    "run_rotbench",
    "score_call",
    "summarise",
]

LEVELS = ("clean", "slight", "medium", "heavy", "union")
SCENARIOS = {
    "TG": "Text Generation",
    "RS": "Real-Time Search",
    "DU": "Data Understanding",
    "PL": "Personal Life",
    "AM": "Application Manipulation",
    "IR": "Information Retrieval",
    "FT": "Financial Transactions",
}
METRICS = ("tool_selection", "parameter_identification", "content_filling")
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class RotSample:
    """One first-turn item. ``answers``: (action, arguments) pairs, any of which is right."""

    id: str
    scenario: str
    tools: tuple[dict[str, Any], ...]
    user: str
    answers: tuple[tuple[str, dict[str, Any]], ...]


def parse_answer(text: str) -> tuple[str, dict[str, Any]]:
    """``Thought: ...\\nAction: X\\nAction Input: {...}`` → ``("X", {...})`` (as evaluate.py cuts it)."""
    head, sep, tail = text.partition("Action Input:")
    if not sep or "Action:" not in head:
        raise ValueError(f"not a RoTBench answer: {text[:80]!r}")
    action = head[head.find("Action:") + len("Action:") :].strip()
    arguments = json.loads(tail)
    if not isinstance(arguments, dict):
        raise ValueError(f"Action Input is not an object: {tail[:80]!r}")
    return action, arguments


def _tools_from_system(text: str) -> list[dict[str, Any]]:
    anchor = text.find("tools:")
    start = text.find("[", anchor if anchor >= 0 else 0)
    if start < 0:
        raise ValueError("no tool list in the system turn")
    tools, _ = json.JSONDecoder().raw_decode(text[start:])
    if not isinstance(tools, list):
        raise ValueError("the tool list is not a JSON list")
    return tools


def _sample(item: dict[str, Any]) -> RotSample:
    turns = {t["from"]: t["value"] for t in item["conversations"]}
    gold = turns["assistant"]
    gold = gold if isinstance(gold, list) else [gold]
    return RotSample(
        id=str(item.get("id", "")),
        scenario=str(item.get("scenario", "")),
        tools=tuple(_tools_from_system(turns["system"])),
        user=turns["user"],
        answers=tuple(parse_answer(a) for a in gold),
    )


def load_rotbench(path: str | Path) -> list[RotSample]:
    """Read one ``First_Turn_<level>.json`` file."""
    path = Path(path)
    if not path.is_file():
        raise HatError(f"no RoTBench data at {path}; pass --data a folder with First_Turn_<level>.json files")
    items = read_json(path, what="RoTBench data")
    if not isinstance(items, list):
        raise HatError(f"{path}: RoTBench data must be a JSON list of items, not {type(items).__name__}")
    samples = []
    for n, item in enumerate(items):
        try:
            samples.append(_sample(item))
        except (KeyError, TypeError, ValueError) as exc:
            raise HatError(f"{path}: item {n} is not in RoTBench's first-turn format: {exc}") from exc
    return samples


def _slot_names(tools: Sequence[dict[str, Any]]) -> tuple[str, str]:
    finish = str(tools[-1]["name"]) if tools else "finish"
    ask = str(tools[-2]["name"]) if len(tools) >= 2 else "ask_to_user"
    return finish, ask


def _values_match(gold: dict[str, Any], called: dict[str, Any]) -> bool:
    return all(called.get(k) == v for k, v in gold.items() if v != "None")


def score_call(sample: RotSample, call: ToolCall | None, *, accept_empty_args: bool = False) -> tuple[bool, bool, bool]:
    """(tool selection, parameter identification, content filling) for the model's first call."""
    if call is None or (not call.arguments and not accept_empty_args):
        return False, False, False
    finish, ask = _slot_names(sample.tools)
    ts = pi = False
    for action, arguments in sample.answers:
        called = action if (action == finish and call.name == "finish") else call.name
        if called != action:
            continue
        ts = True
        if set(arguments) != set(call.arguments):
            continue
        pi = True
        if action in (finish, ask, "finish", "ask_to_user") or _values_match(arguments, call.arguments):
            return True, True, True
    return ts, pi, False


def _pct(hits: int, n: int) -> float:
    return round(100.0 * hits / n, 2) if n else 0.0


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracies (0-100) of records carrying ``scenario`` and the three metric booleans."""
    out: dict[str, Any] = {"n": len(records)}
    for metric in METRICS:
        out[metric] = _pct(sum(r[metric] for r in records), len(records))
    groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        groups[r["scenario"]].append(r)
    out["by_scenario"] = {
        code: {"n": len(rs), **{m: _pct(sum(r[m] for r in rs), len(rs)) for m in METRICS}}
        for code, rs in sorted(groups.items())
    }
    return out


def _run_sample(model: Model, sample: RotSample, level: str, options: dict[str, Any]) -> dict[str, Any]:
    harness, _ = harness_from_tools(
        sample.tools, name=f"rotbench-{level}", rename=options["rename"], max_new_tokens=options["max_new_tokens"]
    )
    turn = first_turn(model, harness, [sample.user])
    call = turn.calls[0] if turn.calls else None
    ts, pi, cf = score_call(sample, call, accept_empty_args=options["accept_empty_args"])
    return {
        "id": sample.id,
        "level": level,
        "scenario": sample.scenario,
        "gold": [{"name": a, "arguments": args} for a, args in sample.answers],
        "calls": turn.calls_as_dicts(),
        "kind": turn.kind,
        "raw_output": turn.raw_output,
        "tool_selection": ts,
        "parameter_identification": pi,
        "content_filling": cf,
    }


def check_rotbench(data_dir: str | Path, levels: Sequence[str] = LEVELS) -> int:
    """Read every level file :func:`run_rotbench` will read, without a model, so missing or
    malformed data fails before a slow model load. Returns the number of items."""
    return sum(len(load_rotbench(Path(data_dir) / f"First_Turn_{lv}.json")) for lv in levels)


def run_rotbench(
    model: Model,
    data_dir: str | Path,
    *,
    levels: Sequence[str] = LEVELS,
    limit: int | None = None,
    rename: Callable[[str], str] | None = None,
    accept_empty_args: bool = False,
    max_new_tokens: int = 256,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the first-turn sets of ``levels`` (each file ``First_Turn_<level>.json`` in
    ``data_dir``; ``limit`` keeps the first N items of each). ``rename`` shows every tool under
    another name (scoring maps calls back); ``max_new_tokens`` bounds each answer. Returns
    ``levels`` (per level: ``n``, the three accuracies, ``by_scenario``) and per-item
    ``records``."""
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown:
        raise ValueError(f"unknown RoTBench level(s) {unknown}; known: {', '.join(LEVELS)}")
    data = {lv: load_rotbench(Path(data_dir) / f"First_Turn_{lv}.json")[:limit] for lv in levels}
    options = {"rename": rename, "accept_empty_args": accept_empty_args, "max_new_tokens": max_new_tokens}
    total, done = sum(len(s) for s in data.values()), 0
    records: list[dict[str, Any]] = []
    for level, samples in data.items():
        for sample in samples:
            records.append(_run_sample(model, sample, level, options))
            done += 1
            if progress is not None:
                progress(done, total)
    by_level = {lv: summarise([r for r in records if r["level"] == lv]) for lv in data}
    return {
        "model": getattr(model, "name", type(model).__name__),
        "levels": by_level,
        "renamed": rename is not None,
        "accept_empty_args": accept_empty_args,
        "max_new_tokens": max_new_tokens,
        "records": records,
    }
