"""Where a skill-first student (attempt 9) wins or loses the tool, step by step: of the episodes that
need a tool, the share whose right skill was loaded; of those, the share that deferred the tools to a
later round (a first round of skill loads only); of those, the share whose next rationale quotes a
loaded rule ("Rule: ..."), whose quote names a tool that the loaded rules name, and whose calls are
then right (the judge's tool reason). Attempts with the one-round teacher show "deferred 0".

usage: python reports/stage1i/rule_step.py reports/stage1i/eval/t[12]_*_cases.jsonl
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

_BACKTICKED = re.compile(r"`([^`]+)`")


def analyse(path: str) -> dict[str, Any]:
    keys = (
        "need_tool",
        "right_skill",
        "deferred",
        "quotes_a_rule",
        "quote_names_a_loaded_tool",
        "calls_the_quoted_tool",
        "right_calls",
    )
    counts: collections.Counter[str] = collections.Counter(dict.fromkeys(keys, 0))
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if "no tools needed" in case["reasons"]["tool_rationality"]:
            continue
        counts["need_tool"] += 1
        if case["scores"]["skill_selection"] < 1:
            continue
        counts["right_skill"] += 1
        rounds = case["trace"]["rounds"]
        first = rounds[0].get("tool_calls") or []
        if not first or any(c.get("kind") != "skill" for c in first) or len(rounds) < 2:
            continue
        counts["deferred"] += 1
        loaded = " ".join(str(c.get("result", "")) for c in first if c.get("status") == "ok")
        named = set(_BACKTICKED.findall(loaded))
        think = rounds[1].get("reasoning") or ""
        quoted = set(_BACKTICKED.findall(think))
        calls = {c["name"] for c in rounds[1].get("tool_calls") or [] if c.get("kind") == "tool"}
        right = not re.search(r"\w+ not called|unknown tool|irrelevant", case["reasons"]["tool_rationality"])
        counts["quotes_a_rule"] += think.startswith("Rule:")
        counts["quote_names_a_loaded_tool"] += bool(quoted & named)
        counts["calls_the_quoted_tool"] += bool(quoted & calls)
        counts["right_calls"] += right
    return {"file": path, **counts}


def main() -> None:
    for path in sys.argv[1:]:
        c = analyse(path)
        print(
            f"{c['file']}: tool episodes {c['need_tool']}; right skill {c['right_skill']}; deferred "
            f"{c['deferred']}; quotes a rule {c['quotes_a_rule']}; the quote names a loaded tool "
            f"{c['quote_names_a_loaded_tool']}; calls the quoted tool {c['calls_the_quoted_tool']}; right "
            f"calls {c['right_calls']} (of the deferred)"
        )


if __name__ == "__main__":
    main()
