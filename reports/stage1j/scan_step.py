"""Where a skill-scan student (attempt 10) wins or loses the skill, step by step: of the episodes whose
first round loads a skill, the share whose rationale has a scan ("Skills: w=name, ... Need: ..."); of
those, the share whose scan lists exactly the prompt's skills in the prompt's order; the share of
scan pairs whose word is right for the description beside that name (the words of
``hat.env.oracle._SKILL_GLOSS``, decoys ``none``; the description is looked up in the production
harness and the HSA pools); the share whose "Need:" names are copied from the scan (same word=name
pairs) and are the names then loaded; and the share with the right skill (the judge's
skill_selection = 1). Split by whether the episode's harness renamed the skills.

usage: PYTHONPATH=src python reports/stage1j/scan_step.py reports/stage1j/eval/t[12]_*_cases.jsonl
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

from hat.augment.pools import DECOY_SKILLS, SKILL_DESCRIPTIONS
from hat.env.oracle import _SKILL_GLOSS
from hat.harness.loader import load_harness

_SCAN = re.compile(r"Skills: (.*?)\. Need: (.*?)[;.]", re.S)
_LINE = re.compile(r"^- ([^:\n]+): (.*)$", re.M)


def glossary() -> dict[str, str]:
    """Skill description -> the teacher's word for it."""
    words = {s.description: _SKILL_GLOSS.get(s.function_id, "") for s in load_harness("livestream").skills}
    for function_id, pool in SKILL_DESCRIPTIONS.items():
        for text in [*pool["train"], *pool["heldout"]]:
            words[text] = _SKILL_GLOSS[function_id]
    for split in ("train", "heldout"):
        for _, description, _ in DECOY_SKILLS[split]:
            words[description] = "none"
    return words


def catalogue(prompt: str) -> list[tuple[str, str]]:
    """(name, description) per line of the prompt's skill block, in order."""
    if "Skills (" not in prompt:
        return []
    block = prompt.split("Skills (", 1)[1].split("\n\n", 1)[0]
    return [(m.group(1).strip(), m.group(2).strip()) for m in _LINE.finditer(block)]


def pairs(text: str) -> list[tuple[str, str]]:
    return [tuple(p.split("=", 1)) for p in (x.strip() for x in text.split(",")) if "=" in p]  # type: ignore[misc]


def analyse(path: str) -> dict[str, collections.Counter[str]]:
    words = glossary()
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        trace = case["trace"]
        first = trace["rounds"][0] if trace["rounds"] else {}
        loads = [c for c in first.get("tool_calls") or [] if c.get("kind") == "skill"]
        if not loads:
            continue
        c = out["skill renamed" if "skill_rename" in case["variant"] else "production skill names"]
        c["loads_a_skill"] += 1
        c["right_skill"] += case["scores"]["skill_selection"] >= 1
        m = _SCAN.search(first.get("reasoning") or "")
        if m is None:
            continue
        c["scan"] += 1
        listed = catalogue(trace["system_prompt"])
        scan, need = pairs(m.group(1)), pairs(m.group(2))
        c["names_exact"] += [n for _, n in scan] == [n for n, _ in listed]
        desc = dict(listed)
        for word, name in scan:
            if name in desc and desc[name] in words:
                c["pairs_checked"] += 1
                c["pairs_right_word"] += words[desc[name]] == word
        loaded = [str((call.get("arguments") or {}).get("name", "")) for call in loads]
        c["need_copied"] += bool(need) and all(p in scan for p in need)
        c["loads_the_need"] += bool(need) and [n for _, n in need] == loaded
        c["right_skill_with_scan"] += case["scores"]["skill_selection"] >= 1
    return out


def main() -> None:
    for path in sys.argv[1:]:
        for split, c in analyse(path).items():
            words = f"{c['pairs_right_word']}/{c['pairs_checked']}" if c["pairs_checked"] else "-"
            print(
                f"{path} [{split}]: first round loads a skill {c['loads_a_skill']} (right skill "
                f"{c['right_skill']}); scan written {c['scan']}; names exactly the prompt's, in order "
                f"{c['names_exact']}; right word per pair {words}; Need copied from the scan "
                f"{c['need_copied']}; loads the Need {c['loads_the_need']}; right skill with a scan "
                f"{c['right_skill_with_scan']}"
            )


if __name__ == "__main__":
    main()
