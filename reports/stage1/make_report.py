"""Stage-1 table and plots from the eval summaries and the trainers' logs.

usage (repo root, .venv active):
    python reports/stage1/make_report.py --eval reports/stage1/eval \
        --model base=<eval model slug> --model fixed=<slug> --model hsa=<slug> \
        --train fixed=runs/stage1/sft-fixed --train hsa=runs/stage1/sft-hsa --out reports/stage1

Writes ``table.md`` (scores with deltas against base, the targets checked), ``loss.png``
(training loss per step), ``suites.png`` (per-suite bars) and ``train_<name>.json`` (each run's
``log_history``, copied so the plot is reproducible without the ignored ``runs/`` folder).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SUITES = ["t1", "t2", "t3-tool", "t3-prompt", "ifeval"]
LABELS = {"base": "base SmolLM2", "fixed": "Fixed-Harness SFT", "hsa": "HSA-SFT"}


def _pairs(values: list[str]) -> dict[str, str]:
    return dict(value.split("=", 1) for value in values)


def _load_scores(eval_dir: Path, slugs: dict[str, str]) -> dict[str, dict[str, dict]]:
    scores: dict[str, dict[str, dict]] = {}
    for name, slug in slugs.items():
        for suite in SUITES:
            path = eval_dir / f"{suite}_{slug}.json"
            if path.is_file():
                scores.setdefault(name, {})[suite] = json.loads(path.read_text(encoding="utf-8"))
    return scores


def _cell(value: float | None, base: float | None) -> str:
    if value is None:
        return "—"
    if base is None:
        return f"{value:.1f}"
    return f"{value:.1f} ({value - base:+.1f})"


def table(scores: dict[str, dict[str, dict]]) -> str:
    def score(name: str, suite: str) -> float | None:
        entry = scores.get(name, {}).get(suite)
        return None if entry is None else float(entry["score"])

    head = "| model | " + " | ".join(SUITES) + " | T1 − T2 gap |"
    lines = [head, "|---|" + "---|" * (len(SUITES) + 1)]
    for name in scores:
        cells = [_cell(score(name, s), None if name == "base" else score("base", s)) for s in SUITES]
        t1, t2 = score(name, "t1"), score(name, "t2")
        gap = "—" if t1 is None or t2 is None else f"{t1 - t2:.1f}"
        lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(cells) + f" | {gap} |")
    lines += ["", "Deltas in parentheses are against base. IFEval: prompt-level strict accuracy.", ""]

    def diff(a: tuple[str, str], b: tuple[str, str]) -> float | None:
        x, y = score(*a), score(*b)
        return None if x is None or y is None else x - y

    def check(label: str, got: float | None, target: float) -> str:
        if got is None:
            return f"- {label}: not measured"
        return f"- {label}: {'met' if got >= target else 'missed'} ({got:+.1f}; target {target:+.1f})"

    lines.append("Targets (issue 5):")
    lines.append(check("HSA-SFT − base on T1 ≥ +30", diff(("hsa", "t1"), ("base", "t1")), 30))
    lines.append(check("HSA-SFT − Fixed-SFT on T2 ≥ +10", diff(("hsa", "t2"), ("fixed", "t2")), 10))
    fixed_gap, hsa_gap = diff(("fixed", "t1"), ("fixed", "t2")), diff(("hsa", "t1"), ("hsa", "t2"))
    if fixed_gap is None or hsa_gap is None:
        lines.append("- Fixed gap ≥ 2 × HSA gap: not measured")
    else:
        verdict = "met" if fixed_gap >= 2 * hsa_gap else "missed"
        lines.append(f"- Fixed gap ≥ 2 × HSA gap: {verdict} (Fixed {fixed_gap:.1f}, HSA {hsa_gap:.1f})")
    lines.append(check("HSA-SFT IFEval within 2 of base", diff(("hsa", "ifeval"), ("base", "ifeval")), -2))
    return "\n".join(lines) + "\n"


def plots(scores: dict[str, dict[str, dict]], runs: dict[str, Path], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in runs:
        history = json.loads((out / f"train_{name}.json").read_text(encoding="utf-8"))
        points = [(h["step"], h["loss"]) for h in history if "loss" in h]
        ax.plot([p[0] for p in points], [p[1] for p in points], label=LABELS.get(name, name), marker=".")
    ax.set_xlabel("optimizer step (batch 1)")
    ax.set_ylabel("training loss (assistant tokens)")
    ax.set_title("Stage 1 SFT on SmolLM2-135M (LoRA r=16)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "loss.png", dpi=120)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(scores)
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        values = [scores[name].get(s, {}).get("score", 0.0) for s in SUITES]
        bars = ax.bar([j + i * width for j in range(len(SUITES))], values, width, label=LABELS.get(name, name))
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(SUITES))], SUITES)
    ax.set_ylabel("score (0–100)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "suites.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval", type=Path, required=True)
    parser.add_argument("--model", action="append", default=[], help="name=<eval model slug>")
    parser.add_argument("--train", action="append", default=[], help="name=<sft output folder>")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {name: Path(folder) for name, folder in _pairs(args.train).items()}
    for name, folder in runs.items():
        state = folder / "trainer_state.json"
        if state.is_file():  # else keep the copy made earlier
            history = json.loads(state.read_text(encoding="utf-8"))["log_history"]
            (args.out / f"train_{name}.json").write_text(json.dumps(history, indent=1), encoding="utf-8")
    scores = _load_scores(args.eval, _pairs(args.model))
    (args.out / "table.md").write_text(table(scores), encoding="utf-8")
    plots(scores, runs, args.out)
    print((args.out / "table.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
