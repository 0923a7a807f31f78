"""Stage-1b table, targets and plots from the eval summaries and the trainers' step logs (issue 10).

usage (repo root, .venv active):
    python reports/stage1b/make_report.py --eval reports/stage1b/eval [--eval <another folder> ...] \\
        --model base=<slug> --model fixed=<slug> --model hsa-s0=<slug> --model hsa-s1=<slug> \\
        --train fixed=/work/runs/stage1b/sft-fixed --train hsa-s0=/work/runs/stage1b/sft-hsa-s0 ... \\
        --out reports/stage1b

A slug is the eval file stem after ``<suite>_`` (``hat eval --out`` names files ``<suite>_<slug>``).
Models named ``hsa-*`` are seeds of HSA-SFT: the targets use their mean, each seed is also listed.

Writes ``table.md`` (score ± standard error per suite, deltas against base, the four targets
checked with the numbers), ``dims.md`` (per-dimension scores), ``loss.png`` (training loss per step
from ``steps.jsonl``), ``suites.png`` (per-suite bars with error bars), ``dims.png`` (per-dimension
bars for T1 and T2) and ``steps_<name>.jsonl`` (each run's step log, copied so the plots rebuild
without the run folders). Standard errors: of the mean of per-episode scores (suites, from the
``*.progress.jsonl`` case logs) and binomial for IFEval's prompt-level strict accuracy; for the
mean of HSA seeds (evaluated on the same episodes), of the per-episode mean across seeds, or where
a case log is missing (IFEval) the mean of the seeds' errors, an upper bound shown as "± ≤ x".
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
from pathlib import Path

SUITES = ["t1", "t2", "t3-tool", "t3-prompt", "ifeval"]
DIMS = ["accuracy", "effectiveness", "tool_rationality", "skill_selection"]
LABELS = {"base": "base SmolLM2", "fixed": "Fixed-Harness SFT", "hsa": "HSA-SFT (mean of seeds)"}


def _pairs(values: list[str]) -> dict[str, str]:
    return dict(value.split("=", 1) for value in values)


def _case_scores(eval_dir: Path, suite: str, slug: str) -> dict[str, float] | None:
    """``{episode id: overall score in [0, 1]}`` from a suite's case log; None without one."""
    path = eval_dir / f"{suite}_{slug}.progress.jsonl"  # attempt 2's case log; later runs keep _cases.jsonl
    if not path.is_file():
        path = eval_dir / f"{suite}_{slug}_cases.jsonl"
    if suite == "ifeval" or not path.is_file():
        return None
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {str(c.get("episode_id", i)): sum(c["scores"][d] for d in DIMS) / len(DIMS) for i, c in enumerate(cases)}


def _mean_se(values: list[float]) -> float | None:
    return 100 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def _stderr(suite: str, summary: dict, cases: dict[str, float] | None) -> float | None:
    if suite == "ifeval":
        p, n = float(summary["score"]) / 100, int(summary["n"])
        return 100 * math.sqrt(p * (1 - p) / n) if n else None
    return None if cases is None else _mean_se(list(cases.values()))


def _seed_mean_se(entries: list[dict]) -> tuple[float | None, bool]:
    """Standard error of the mean of seeds evaluated on the same episodes: from the per-episode mean
    across seeds when every seed has its case log over the same episodes (the seeds' errors are
    correlated through the shared episodes, so treating them as independent would understate it);
    otherwise the mean of the seeds' standard errors, an upper bound under any correlation."""
    cases = [e.get("cases") for e in entries]
    if all(c is not None for c in cases) and len({frozenset(c) for c in cases}) == 1:  # type: ignore[arg-type]
        ids = sorted(cases[0])  # type: ignore[arg-type]
        return _mean_se([statistics.fmean(c[i] for c in cases) for i in ids]), False  # type: ignore[index]
    ses = [e["se"] for e in entries]
    if None in ses:
        return None, True
    return statistics.fmean(ses), True


def _se_bound(score: float, n: int) -> float | None:
    """The largest standard error a mean of ``n`` scores in [0, 100] with this mean can have
    (Bhatia-Davis: variance <= m(100 - m)), for runs whose case logs are lost."""
    return math.sqrt(score * (100 - score) / (n - 1)) if n > 1 else None


def load(eval_dirs: list[Path], slugs: dict[str, str]) -> dict[str, dict[str, dict]]:
    """``{model: {suite: {"score", "se", "se_bound", "dims", "n"}}}``, HSA seeds averaged into ``hsa``;
    each summary is read from the first of ``eval_dirs`` that has it."""
    scores: dict[str, dict[str, dict]] = {}
    for name, slug in slugs.items():
        for suite in SUITES:
            folder = next((d for d in eval_dirs if (d / f"{suite}_{slug}.json").is_file()), None)
            if folder is not None:
                summary = json.loads((folder / f"{suite}_{slug}.json").read_text(encoding="utf-8"))
                cases = _case_scores(folder, suite, slug)
                se = _stderr(suite, summary, cases)
                bound = se is None
                if bound:
                    se = _se_bound(float(summary["score"]), int(summary["n"]))
                scores.setdefault(name, {})[suite] = {
                    "score": float(summary["score"]),
                    "se": se,
                    "se_bound": bound,
                    "dims": summary.get("dims", {}),
                    "n": summary["n"],
                    "cases": cases,
                }
    seeds = [name for name in scores if name.startswith("hsa-")]
    if seeds:
        scores["hsa"] = {}
        for suite in SUITES:
            entries = [scores[s][suite] for s in seeds if suite in scores[s]]
            if len(entries) == len(seeds):
                se, bound = _seed_mean_se(entries)
                scores["hsa"][suite] = {
                    "score": statistics.fmean(e["score"] for e in entries),
                    "se": se,
                    "se_bound": bound or any(e.get("se_bound") for e in entries),
                    "dims": {d: statistics.fmean(e["dims"].get(d, 0.0) for e in entries) for d in entries[0]["dims"]},
                    "n": sum(e["n"] for e in entries),
                }
    return scores


def _get(scores: dict, name: str, suite: str) -> dict | None:
    return scores.get(name, {}).get(suite)


def _cell(entry: dict | None, base: dict | None) -> str:
    if entry is None:
        return "—"
    bound = "≤ " if entry.get("se_bound") else ""  # no case log: the largest SE the mean allows
    text = f"{entry['score']:.1f}" + (f" ± {bound}{entry['se']:.1f}" if entry["se"] is not None else "")
    return text if base is None else f"{text} ({entry['score'] - base['score']:+.1f})"


def table(scores: dict[str, dict[str, dict]]) -> str:
    lines = ["| model | " + " | ".join(SUITES) + " | T1 − T2 gap |", "|---|" + "---|" * (len(SUITES) + 1)]
    for name in scores:
        cells = [_cell(_get(scores, name, s), None if name == "base" else _get(scores, "base", s)) for s in SUITES]
        t1, t2 = _get(scores, name, "t1"), _get(scores, name, "t2")
        gap = "—" if t1 is None or t2 is None else f"{t1['score'] - t2['score']:.1f}"
        lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(cells) + f" | {gap} |")
    note = (
        "Score ± standard error (± ≤ x: an upper bound — a lost case log, x the largest SE the mean"
        " allows; or a mean of seeds without case logs, the mean of their SEs)"
    )
    lines += ["", f"{note}; deltas against base. IFEval: prompt-level strict accuracy.", ""]
    return "\n".join([*lines, "Targets (issue 10):", *targets(scores)]) + "\n"


def targets(scores: dict[str, dict[str, dict]]) -> list[str]:
    hsa_t1, hsa_t2 = _get(scores, "hsa", "t1"), _get(scores, "hsa", "t2")
    fix_t1, fix_t2 = _get(scores, "fixed", "t1"), _get(scores, "fixed", "t2")
    base_if, hsa_if = _get(scores, "base", "ifeval"), _get(scores, "hsa", "ifeval")
    out = []
    out.append(
        "- HSA-SFT T1 ≥ 60: not measured"
        if hsa_t1 is None
        else f"- HSA-SFT T1 ≥ 60: {'met' if hsa_t1['score'] >= 60 else 'missed'} ({hsa_t1['score']:.1f})"
    )
    if hsa_t2 is None or fix_t2 is None:
        out.append("- HSA-SFT − Fixed-SFT on T2 ≥ +10 and > 2 combined SE: not measured")
    else:
        diff = hsa_t2["score"] - fix_t2["score"]
        se = math.sqrt((hsa_t2["se"] or 0) ** 2 + (fix_t2["se"] or 0) ** 2)
        ok = diff >= 10 and diff > 2 * se
        out.append(f"- HSA-SFT − Fixed-SFT on T2 ≥ +10 and > 2 combined SE: {'met' if ok else 'missed'}"
                   f" ({diff:+.1f}; 2 SE = {2 * se:.1f})")  # fmt: skip
    if None in (hsa_t1, hsa_t2, fix_t1, fix_t2):
        out.append("- HSA gap ≤ half of Fixed gap: not measured")
    else:
        hsa_gap = hsa_t1["score"] - hsa_t2["score"]  # type: ignore[index]
        fix_gap = fix_t1["score"] - fix_t2["score"]  # type: ignore[index]
        ok = hsa_gap <= fix_gap / 2
        verdict = "met" if ok else "missed"
        out.append(f"- HSA gap ≤ half of Fixed gap: {verdict} (HSA {hsa_gap:.1f}, Fixed {fix_gap:.1f})")
    if hsa_if is None or base_if is None:
        out.append("- HSA-SFT IFEval within 2 of base: not measured")
    else:
        diff = hsa_if["score"] - base_if["score"]
        out.append(f"- HSA-SFT IFEval within 2 of base: {'met' if diff >= -2 else 'missed'} ({diff:+.1f})")
    return out


def dims_table(scores: dict[str, dict[str, dict]]) -> str:
    lines = ["| model | suite | " + " | ".join(DIMS) + " |", "|---|---|" + "---|" * len(DIMS)]
    for name in scores:
        for suite in SUITES[:-1]:
            entry = _get(scores, name, suite)
            if entry:
                cells = [f"{entry['dims'].get(d, 0.0):.1f}" for d in DIMS]
                lines.append(f"| {LABELS.get(name, name)} | {suite} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plots(scores: dict[str, dict[str, dict]], runs: list[str], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for name in runs:
        steps = [json.loads(x) for x in (out / f"steps_{name}.jsonl").read_text(encoding="utf-8").splitlines()]
        ax.plot([s["step"] for s in steps], [s["loss"] for s in steps], label=name, linewidth=0.8)
    ax.set_xlabel("optimizer step (one pack)")
    ax.set_ylabel("training loss (trained tokens)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "loss.png", dpi=120)
    for kind, keys, fname in (("suites", SUITES, "suites.png"), ("dims", DIMS, "dims.png")):
        fig, axes = plt.subplots(1, 1 if kind == "suites" else 2, figsize=(8, 3.5), squeeze=False)
        for k, ax in enumerate(axes[0]):
            suite = None if kind == "suites" else ["t1", "t2"][k]
            names = [n for n in scores if not n.startswith("hsa-")]
            width = 0.8 / max(len(names), 1)
            for i, name in enumerate(names):
                entries = [
                    _get(scores, name, key) if suite is None else {"score": (_get(scores, name, suite) or {})
                                                                     .get("dims", {}).get(key, 0.0), "se": None}
                    for key in keys
                ]  # fmt: skip
                values = [e["score"] if e else 0.0 for e in entries]
                errors = [(e or {}).get("se") or 0.0 for e in entries]
                xs = [j + i * width for j in range(len(keys))]
                ax.bar(xs, values, width, yerr=errors, capsize=2, label=LABELS.get(name, name))
            ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(keys))], keys, fontsize=7)
            ax.set_ylim(0, 105)
            ax.set_title(suite or "suites", fontsize=9)
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval", type=Path, action="append", required=True, help="eval folder (repeatable)")
    parser.add_argument("--model", action="append", default=[], help="name=<eval file slug>")
    parser.add_argument("--train", action="append", default=[], help="name=<sft output folder>")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for name, folder in _pairs(args.train).items():
        steps = Path(folder) / "steps.jsonl"
        if steps.is_file():
            shutil.copyfile(steps, args.out / f"steps_{name}.jsonl")
        if (args.out / f"steps_{name}.jsonl").is_file():
            runs.append(name)
    scores = load(args.eval, _pairs(args.model))
    (args.out / "table.md").write_text(table(scores), encoding="utf-8")
    (args.out / "dims.md").write_text(dims_table(scores), encoding="utf-8")
    plots(scores, runs, args.out)
    print((args.out / "table.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
