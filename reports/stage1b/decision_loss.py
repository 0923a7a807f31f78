"""Decision-token diagnostic (reports/stage1b.md §5): log-loss and teacher-forced exactness of the
first tool name the model writes in its first tool-calling turn (all of its tokens), on
product-question rows it was trained on vs rows of the same data it never saw, production and
HSA-variant rows apart.

usage: python reports/stage1b/decision_loss.py <datagen folder> <trained adapter folder> <rows per group>
(the 2,000 training rows are re-selected the way `hat train sft --max-examples 2000 --seed 0` selects them)
"""

from __future__ import annotations

import json
import random
import re
import sys
from typing import Any

import torch

from hat.models import load_model
from hat.train.sft import load_rows, select_rows

_SKILL_TOOLS = {"load_skill", "use_skill", "read_skill", "activate_skill"}


def decision(row: dict[str, Any]) -> tuple[list[dict[str, Any]], str, str] | None:
    """(messages before the first tool-calling turn, that turn, the first non-skill tool it calls)."""
    msgs = row["messages"]
    for k, msg in enumerate(msgs):
        if msg["role"] == "assistant" and "<tool_call>" in msg["content"]:
            calls = re.findall(r'<tool_call>\{"name": "([^"]+)"', msg["content"])
            names = [c for c in calls if c not in _SKILL_TOOLS] or calls
            return msgs[:k], msg["content"], names[0]
    return None


def score(tok: Any, net: Any, row: dict[str, Any]) -> tuple[float, bool] | None:
    """(summed NLL of the tool name's tokens where the turn first writes it, all argmax-correct)."""
    found = decision(row)
    if found is None:
        return None
    context, content, name = found
    prompt = tok.apply_chat_template(context, add_generation_prompt=True, tokenize=False)
    at = content.find(name)
    pre = tok(prompt + content[:at].rstrip(" "), add_special_tokens=False)["input_ids"]
    full = tok(prompt + content[:at] + name, add_special_tokens=False)["input_ids"]
    k = next(i for i, (a, b) in enumerate(zip([*pre, -1], full, strict=False)) if a != b)
    with torch.no_grad():
        logits = net(torch.tensor([full])).logits[0, k - 1 : len(full) - 1].float()
    target = torch.tensor(full[k:])
    nll = float(-torch.log_softmax(logits, -1).gather(1, target[:, None]).sum())
    return nll, bool((logits.argmax(-1) == target).all())


def main() -> None:
    data, model_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rows = load_rows(data)
    seen_keys = {(r["episode_id"], r.get("sample")) for r in select_rows(rows, max_examples=2000, seed=0)}
    model = load_model(f"hf:{model_dir}")
    tok, net = model.tokenizer, model.model.eval()
    rng = random.Random(0)
    out = {}
    for label, want_seen in (("seen", True), ("unseen", False)):
        for kind in ("production", "hsa"):
            pool = [
                r
                for r in rows
                if ((r["episode_id"], r.get("sample")) in seen_keys) == want_seen
                and r.get("harness_kind") == kind
                and r["intent"] == "product_qa"
            ]
            scores = [s for s in (score(tok, net, r) for r in rng.sample(pool, min(n, len(pool)))) if s]
            out[f"{label}/{kind}"] = {
                "n": len(scores),
                "nll": round(sum(s[0] for s in scores) / len(scores), 3),
                "acc": round(sum(s[1] for s in scores) / len(scores), 3),
            }
            print(label, kind, out[f"{label}/{kind}"], flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
