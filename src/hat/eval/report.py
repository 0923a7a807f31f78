"""Write a suite result as Markdown (for people) and JSON (for tools), with the command that made it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hat.eval.runner import TASK_DIMS, SuiteResult
from hat.provenance import code_version

__all__ = ["render_markdown", "write_report"]


def render_markdown(result: SuiteResult, command: str = "", k_worst: int = 8) -> str:
    s = result.summary()
    lines = [
        f"# {s['suite']} — {s['model']}",
        "",
        f"n = {s['n']}, seed = {s['seed']}, wall time {s['wall_s']} s" + (f"; command: `{command}`" if command else ""),
        "",
        f"**Score {s['score']:.1f}** (mean over episodes of the mean of {', '.join(TASK_DIMS)}; × 100)",
        "",
        "| dimension | score |",
        "|---|---|",
        *[f"| {d} | {v:.1f} |" for d, v in s["dims"].items()],
        "",
        "## Per intent",
        "",
        "| intent | n | score | " + " | ".join(TASK_DIMS) + " |",
        "|---|---|---|" + "---|" * len(TASK_DIMS),
    ]
    for intent, row in s["by_intent"].items():
        dims = " | ".join(f"{row[d]:.1f}" for d in TASK_DIMS)
        lines.append(f"| {intent} | {row['n']} | {row['score']:.1f} | {dims} |")
    lines += [
        "",
        f"Statuses: {s['statuses']}; mean rounds {s['mean_rounds']}; P50 latency {s['latency_ms_p50']} ms",
        "",
    ]
    lines += ["## Worst failures", ""]
    for c in result.worst(k_worst):
        lines.append(
            f"- `{c.episode_id}` ({c.intent}, {c.variant}) overall {100 * c.overall:.0f}: "
            f"comment {c.trace.comments[0][:80]!r} → reply {c.trace.reply[:80]!r}"
        )
        for d in TASK_DIMS:
            if c.scores[d] < 1:
                lines.append(f"  - {d} {100 * c.scores[d]:.0f}: {c.reasons[d]}")
    return "\n".join(lines) + "\n"


def write_report(result: SuiteResult, out_dir: str | Path, command: str = "") -> dict[str, Path]:
    """``<suite>_<model>.md``, ``.json`` (summary) and ``_cases.jsonl`` (per-case scores and traces)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{result.suite}_{_slug(result.model)}"
    summary: dict[str, Any] = {**result.summary(), "command": command, "code": code_version()}
    paths = {"markdown": out / f"{stem}.md", "json": out / f"{stem}.json", "cases": out / f"{stem}_cases.jsonl"}
    paths["markdown"].write_text(render_markdown(result, command), encoding="utf-8")
    paths["json"].write_text(json.dumps(summary, indent=2), encoding="utf-8")
    with open(paths["cases"], "w", encoding="utf-8") as fh:
        for c in result.cases:
            row = {
                "episode_id": c.episode_id,
                "intent": c.intent,
                "variant": c.variant,
                "scores": c.scores,
                "reasons": c.reasons,
                "trace": c.trace.to_dict(),
            }
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return paths


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:60]
