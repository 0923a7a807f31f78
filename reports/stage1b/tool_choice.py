"""Right-tool share per evaluation: of the episodes that need a tool, how many called every gold
tool (possibly with wrong arguments), and the commonest misses as (gold tool, tool called instead).
Read from the judges' reasons in ``*_cases.jsonl`` ("get_shipping not called; irrelevant: get_specs").

usage: python reports/stage1b/tool_choice.py reports/stage1*/eval/t[12]_*_cases.jsonl
"""

from __future__ import annotations

import collections
import json
import re
import sys


def tool_choice(path: str) -> tuple[int, int, collections.Counter[tuple[str, str]]]:
    needed = right = 0
    misses: collections.Counter[tuple[str, str]] = collections.Counter()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            reason = json.loads(line)["reasons"]["tool_rationality"]
            if reason.startswith("no tools needed"):
                continue
            needed += 1
            missing = re.findall(r"(\w+) not called", reason)
            right += not missing
            instead = re.search(r"(?:irrelevant|unknown tool|decoy tool): ([\w.,\- ]+)", reason)
            for gold in missing:
                misses[(gold, instead.group(1).strip() if instead else "-")] += 1
    return needed, right, misses


if __name__ == "__main__":
    for path in sys.argv[1:]:
        needed, right, misses = tool_choice(path)
        top = ", ".join(f"{g}->{c} x{k}" for (g, c), k in misses.most_common(4))
        print(f"{path}: {right}/{needed} = {100 * right / max(needed, 1):.0f}%  {top}")
