"""Where the first tool decision fails, step by step, for models trained on attempt 6's rationale
("Asked: shipping time and fee of jeans. Plan: product-qa, then get_shipping."): of the episodes
that need a tool, the share whose first reasoning states the gold need (the oracle's fixed need
words per gold function, ``hat.env.oracle._NEEDS``), and, of those, the share in which every gold
tool was called (the judge's tool reason). Also: tool calls whose name is not in the system prompt.
The episodes' gold is rebuilt from the suite (``build_cases(suite, n, seed)``), seed from the file.

usage: python reports/stage1b/asked_step.py reports/stage1f/eval/t[12]_*_cases.jsonl
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

from hat.env.oracle import _NEEDS
from hat.eval.suites import build_cases

_ASKED = re.compile(r"Asked: (.*?)\. ")


def stated_needs(reasoning: str) -> set[str | None]:
    """The gold functions whose need words open the parts of the ``Asked:`` sentence (None: unknown)."""
    m = _ASKED.match(reasoning or "")
    if not m:
        return set()
    return {next((f for f, words in _NEEDS.items() if part.startswith(words)), None) for part in m.group(1).split("; ")}


def analyse(path: str) -> dict[str, Any]:
    summary = json.loads(Path(path.replace("_cases.jsonl", ".json")).read_text(encoding="utf-8"))
    suite, n, seed = summary["suite"], summary["n"], summary["seed"]
    cases = build_cases(suite, n=n, seed=seed)
    gold = {c.episode.episode_id: {g.function_id for g in c.episode.gold.tool_calls} for c in cases}
    counts: collections.Counter[str] = collections.Counter()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        trace, need = case["trace"], gold[case["episode_id"]]
        calls = [c["name"] for r in trace["rounds"] for c in r.get("tool_calls") or []]
        counts["calls"] += len(calls)
        counts["calls_not_in_prompt"] += sum(name not in trace["system_prompt"] for name in calls)
        if not need:
            continue
        counts["need_tool"] += 1
        right_need = stated_needs(trace["rounds"][0].get("reasoning") or "") == need
        right_tool = not re.search(r"\w+ not called", case["reasons"]["tool_rationality"])
        counts["need_stated"] += right_need
        counts["need_stated_and_right_tool"] += right_need and right_tool
        counts["need_wrong_but_right_tool"] += (not right_need) and right_tool
    return {"file": path, "suite": suite, "n": n, "seed": seed, **counts}


def main() -> None:
    for path in sys.argv[1:]:
        c = analyse(path)
        pct = lambda a, b: f"{100 * a / b:.0f} %" if b else "-"  # noqa: E731
        print(
            f"{c['file']}: need stated {c['need_stated']}/{c['need_tool']} ({pct(c['need_stated'], c['need_tool'])}); "
            f"right tool given the need {c['need_stated_and_right_tool']}/{c['need_stated']} "
            f"({pct(c['need_stated_and_right_tool'], c['need_stated'])}); right tool without it "
            f"{c['need_wrong_but_right_tool']}; calls not in the prompt {c['calls_not_in_prompt']}/{c['calls']}"
        )


if __name__ == "__main__":
    main()
