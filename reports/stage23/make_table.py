"""The full HAT table of issue 14 (report's Table 4 layout), its targets and the Figure-5-style grid.

usage (repo root, .venv active):
    python reports/stage23/make_table.py --eval reports/stage23/eval --eval reports/stage1m/eval \\
        --eval reports/stage1l/eval --eval reports/stage1b/eval \\
        --runs /work/runs/stage23 --out reports/stage23/table

Rows: base, Fixed-SFT, HSA-SFT (attempt 12's seed 1, shipped as smollm2-hat), + OPD, + HSA-RL = HAT,
and the ablations (RL with plain GRPO, RL without HSA); the Figure-5 grid adds the Fixed-SFT model
through the same stages (HSA at SFT × HSA at RL). Scores, standard errors and deltas come from
``reports/stage1b/make_report.py`` (the same summaries and case logs). Writes ``table.md``
(scores ± SE with deltas against base, the targets with their numbers, q(L) and wall time per
stage, and paired differences of the RL rows against their start on the same episodes) and
``figure5.png`` (T2 and T3-tool of the 2 × 2 grid) when its four models are measured.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

from hat.evolve import paired_bootstrap

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stage1b"))
from make_report import SUITES, _cell, _get, load

RUNS = "/work/runs/stage23"
MODELS = {  # row name: (label, eval slug)
    "base": ("base SmolLM2", "smollm2"),
    "fixed": ("Fixed-SFT", "hf__work_runs_stage1m_sft-fixed"),
    "hsa": ("HSA-SFT (smollm2-hat)", "hf__work_runs_stage1m_sft-hsa-s1"),
    "opd": ("+ OPD (attempt 1, lr 1e-4)", "hf__work_runs_stage23_opd-hsa"),
    "opd2": ("+ OPD (attempt 2, lr 2e-5)", "hf__work_runs_stage23_opd-hsa-lr2e-5"),
    "hat": ("+ HSA-RL = HAT (segments)", "hf__work_runs_stage23_rl-hat"),
    "grpo": ("ablation: RL with plain GRPO", "hf__work_runs_stage23_rl-grpo"),
    "nohsa": ("ablation: RL without HSA", "hf__work_runs_stage23_rl-nohsa"),
    "fixed-hsa": ("Fixed-SFT → OPD → HSA-RL", "hf__work_runs_stage23_rl-fixed-hsa"),
    "fixed-nohsa": ("Fixed-SFT → OPD → RL without HSA", "hf__work_runs_stage23_rl-fixed-nohsa"),
}
STAGES = {  # run folder: the result file its trainer writes
    "opd-hsa": "opd_result.json",
    "opd-hsa-lr2e-5": "opd_result.json",
    "rl-hat": "rl_result.json",
    "rl-grpo": "rl_result.json",
    "rl-nohsa": "rl_result.json",
    "opd-fixed": "opd_result.json",
    "rl-fixed-hsa": "rl_result.json",
    "rl-fixed-nohsa": "rl_result.json",
}


def _diff(scores: dict, a: str, b: str, suite: str) -> tuple[float, float] | None:
    """``(a − b, combined SE)`` on ``suite``, or None where either is not measured."""
    x, y = _get(scores, a, suite), _get(scores, b, suite)
    if x is None or y is None:
        return None
    return x["score"] - y["score"], math.sqrt((x["se"] or 0) ** 2 + (y["se"] or 0) ** 2)


def q_of(run: Path, last: int = 10) -> float | None:
    """Mean q(L) over the last ``last`` logged RL steps (``rl_diagnostics.jsonl``), or None."""
    path = run / "rl_diagnostics.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    qs = [r["hat/q"] for r in rows if r.get("hat/q") is not None][-last:]
    return statistics.fmean(qs) if qs else None


def cot_score(evals: list[Path], slug: str) -> float | None:
    """Mean over t1, t2, t3-tool and t3-prompt of a model's cot_length dimension (1 − q(L)) as a
    fraction, or None until all four summaries exist."""
    values = []
    for suite in ("t1", "t2", "t3-tool", "t3-prompt"):
        found = [d / f"{suite}_{slug}.json" for d in evals if (d / f"{suite}_{slug}.json").is_file()]
        if not found:
            return None
        values.append(json.loads(found[0].read_text(encoding="utf-8"))["dims"]["cot_length"] / 100)
    return statistics.fmean(values)


OPD_RUNS = {"opd-hsa": "opd", "opd-hsa-lr2e-5": "opd2"}  # OPD run folder: its row


def rl_start(runs: Path) -> str:
    """The OPD row HAT's RL continued (``model`` of ``rl-hat/rl_config.yaml``; attempt 1 if unknown)."""
    path = runs / "rl-hat" / "rl_config.yaml"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("model:"):
                return OPD_RUNS.get(Path(line.split(":", 1)[1].strip()).name, "opd")
    return "opd"


def targets(scores: dict, runs: Path, evals: list[Path]) -> list[str]:
    out = []
    for opd in OPD_RUNS.values():
        label = MODELS[opd][0]
        ife = _diff(scores, opd, "base", "ifeval")
        out.append(
            f"- {label} IFEval within 2 of base: not measured"
            if ife is None
            else f"- {label} IFEval within 2 of base: {'met' if ife[0] >= -2 else 'missed'} ({ife[0]:+.2f})"
        )
        for suite in ("t1", "t2"):
            d = _diff(scores, opd, "hsa", suite)
            out.append(
                f"- {label} {suite.upper()} within 2 of HSA-SFT: not measured"
                if d is None
                else f"- {label} {suite.upper()} within 2 of HSA-SFT: {'met' if d[0] >= -2 else 'missed'} ({d[0]:+.1f})"
            )
    start = rl_start(runs)
    for suite in ("t2", "t3-tool"):
        d = _diff(scores, "hat", start, suite)
        name = f"- HAT − ({MODELS[start][0]}, its start) on {suite} ≥ +3 and > 2 combined SE"
        out.append(
            f"{name}: not measured"
            if d is None
            else f"{name}: {'met' if d[0] >= 3 and d[0] > 2 * d[1] else 'missed'} ({d[0]:+.1f}; 2 SE = {2 * d[1]:.1f})"
        )
    # q(L) is the report's length penalty (0 up to 100 reasoning tokens, 1 from 200); the target reads
    # as its judge, the cot_length dimension 1 − q(L), on HAT's evaluation (mean of the 4 suites).
    cot = cot_score(evals, MODELS["hat"][1])
    q = q_of(runs / "rl-hat")
    training = "" if q is None else f"; training rollouts, last 10 logged steps: mean q(L) {q:.3f}"
    out.append(
        f"- HAT 1 − q(L) ≥ 0.95 (cot_length judge, mean of t1–t3): not measured{training}"
        if cot is None
        else f"- HAT 1 − q(L) ≥ 0.95 (cot_length judge, mean of t1–t3): {'met' if cot >= 0.95 else 'missed'} "
        f"({cot:.3f}{training})"
    )
    d = _diff(scores, "hat", "grpo", "t2")
    out.append(
        "- segment-decomposed ≥ plain GRPO on T2 (equal steps): not measured"
        if d is None
        else f"- segment-decomposed ≥ plain GRPO on T2 (equal steps): {'met' if d[0] >= 0 else 'missed'}"
        f" ({d[0]:+.1f}; 2 SE = {2 * d[1]:.1f})"
    )
    return out


PAIRED_SUITES = ("t1", "t2", "t3-tool", "t3-prompt")


def paired(scores: dict, runs: Path) -> list[str]:
    """Each OPD row against HSA-SFT, each RL row against its start (and HAT against plain GRPO) on
    the episodes both evaluated: mean difference, its paired standard error and a 95 % percentile
    bootstrap interval (seeded). Every model runs each suite on the same episodes and seed, so the
    pairs share an episode's difficulty, which the unpaired "2 combined SE" of the targets does not remove."""
    start = rl_start(runs)
    comparisons = [(opd, "hsa") for opd in OPD_RUNS.values()]
    comparisons += [(row, start) for row in ("hat", "grpo", "nohsa")] + [("hat", "grpo")]
    lines = ["| comparison | " + " | ".join(PAIRED_SUITES) + " |", "|---|" + "---|" * len(PAIRED_SUITES)]
    any_row = False
    for new, old in comparisons:
        cells = []
        for suite in PAIRED_SUITES:
            a, b = _get(scores, old, suite), _get(scores, new, suite)
            ids = sorted(set(a["cases"]) & set(b["cases"])) if a and b and a.get("cases") and b.get("cases") else []
            if len(ids) < 2:
                cells.append("—")
                continue
            diffs = [100 * (b["cases"][i] - a["cases"][i]) for i in ids]
            mean, lo, hi = paired_bootstrap(diffs, random.Random(0), resamples=2000)
            se = statistics.stdev(diffs) / math.sqrt(len(diffs))
            cells.append(f"{mean:+.1f} ± {se:.1f} [{lo:+.1f}, {hi:+.1f}] (n = {len(ids)})")
        if any(c != "—" for c in cells):
            any_row = True
            lines.append(f"| {MODELS[new][0]} − {MODELS[old][0]} | " + " | ".join(cells) + " |")
    if not any_row:
        return []
    return [
        "Paired differences (same episodes and evaluation seed): mean ± paired SE [95 % bootstrap CI]:",
        "",
        *lines,
        "",
    ]


def walls(runs: Path) -> list[str]:
    """Per finished run: its steps and the sum of its logged step times (a run resumed in several
    processes has only the last one's wall in its result file)."""
    lines = ["| run | steps | sum of step times |", "|---|---|---|"]
    for name, result in STAGES.items():
        path = runs / name / result
        if path.is_file():
            r = json.loads(path.read_text(encoding="utf-8"))
            log = runs / name / ("opd_log.jsonl" if result.startswith("opd") else "rl_diagnostics.jsonl")
            rows = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines() if x.strip()]
            total = sum(float(row.get("step_time", 0.0)) for row in rows)
            lines.append(f"| {name} | {r['global_step']} | {total / 3600:.2f} h |")
    return lines


def table(scores: dict, runs: Path, evals: list[Path]) -> str:
    lines = ["| model | " + " | ".join(SUITES) + " |", "|---|" + "---|" * len(SUITES)]
    for name, (label, _) in MODELS.items():
        if name in scores:
            cells = [_cell(_get(scores, name, s), None if name == "base" else _get(scores, "base", s)) for s in SUITES]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Score ± standard error (n = 100 episodes per suite, IFEval 541 prompts, prompt-level strict);"
        " deltas against base.",
        "",
        "Targets (issue 14):",
        *targets(scores, runs, evals),
        "",
        *paired(scores, runs),
        "Wall time per stage (this machine's trainer, from its result file):",
        "",
        *walls(runs),
    ]
    return "\n".join(lines) + "\n"


def figure5(scores: dict, out: Path) -> bool:
    grid = {("no", "no"): "fixed-nohsa", ("no", "yes"): "fixed-hsa", ("yes", "no"): "nohsa", ("yes", "yes"): "hat"}
    if any(_get(scores, m, "t2") is None for m in grid.values()):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, suite in zip(axes, ("t2", "t3-tool"), strict=True):
        for i, sft in enumerate(("no", "yes")):
            entries = [_get(scores, grid[(sft, rl)], suite) or {"score": 0.0, "se": 0.0} for rl in ("no", "yes")]
            ax.bar(
                [j + i * 0.4 for j in range(2)],
                [e["score"] for e in entries],
                0.4,
                yerr=[e["se"] or 0.0 for e in entries],
                capsize=3,
                label=f"HSA at SFT: {sft}",
            )
        ax.set_xticks([0.2, 1.2], ["HSA at RL: no", "HSA at RL: yes"])
        ax.set_title(suite)
        ax.set_ylim(0, 100)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "figure5.png", dpi=120)
    plt.close(fig)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval", type=Path, action="append", required=True, help="eval folder (repeatable)")
    parser.add_argument("--runs", type=Path, default=Path(RUNS), help="issue 14's run folder")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    scores = load(args.eval, {name: slug for name, (_, slug) in MODELS.items()})
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(scores, args.runs, args.eval)
    (args.out / "table.md").write_text(text, encoding="utf-8")
    print(text)
    if figure5(scores, args.out):
        print(f"wrote {args.out / 'figure5.png'}")


if __name__ == "__main__":
    main()
