"""History: the metrics of every gated version, in lineage order, as a table and a plot (the report's
Figure 2 shape: one line per metric across harness versions, each version marked by the gate's
decision; a blocked version hangs off its parent with a dotted line, as it never shipped).

Numbers come only from the gate records (:meth:`~hat.evolve.lineage.Lineage.record_gate`): a
version's metrics are the ``new`` side of its latest gate, the root's the ``old`` side of the first
gate run against it. Versions never gated have no numbers and are left out of the plot (listed in
the table with empty cells), so the plot never mixes runs of different settings silently — each
row carries the suite, n, seed and model it was measured with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hat.eval.runner import TASK_DIMS
from hat.evolve.lineage import Lineage

__all__ = ["history_rows", "plot_history"]


def _metrics(summary: dict[str, Any]) -> dict[str, float]:
    return {"score": float(summary.get("score", 0.0)), **{d: float(v) for d, v in summary.get("dims", {}).items()}}


def history_rows(lineage: Lineage, suite: str = "t1") -> list[dict[str, Any]]:
    """One row per version (lineage order): hash, status, proposer, and ``suite``'s metrics if gated."""
    versions = lineage.versions()
    measured: dict[str, dict[str, Any]] = {}
    for event in lineage.events():
        if event.get("kind") != "gate" or suite not in event.get("summaries", {}):
            continue
        sides = event["summaries"][suite]
        settings = {k: event.get("settings", {}).get(k) for k in ("n", "seed", "model")}
        measured[str(event["hash"])] = {**_metrics(sides["new"]), **settings}
        old = str(event.get("settings", {}).get("old") or event.get("parent") or "")
        if old and old not in measured:
            measured[old] = {**_metrics(sides["old"]), **settings}
    return [
        {
            "version": v.short,
            "status": v.status,
            "proposer": v.proposer,
            "parent": (v.parent or "")[:12],
            "suite": suite,
            **measured.get(h, {}),
        }
        for h, v in versions.items()
    ]


_MARK = {"root": ("s", "#2f6fd6"), "promoted": ("o", "#2e9d4f"), "blocked": ("X", "#d23b3b"), "approved": ("D", "#999")}


def plot_history(rows: list[dict[str, Any]], out: str | Path, *, title: str = "") -> Path:
    """Write the plot of ``rows`` (from :func:`history_rows`) to ``out`` (PNG, matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [r for r in rows if "score" in r]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(points) + 3), 4.2), dpi=120)
    xs = list(range(len(points)))
    kept = [x for x, r in zip(xs, points, strict=True) if r["status"] != "blocked"]
    styles: list[tuple[str, dict[str, Any]]] = [
        ("score", {"linewidth": 2.6, "color": "black"}),
        *[(d, {"linewidth": 1.2, "color": f"C{i}"}) for i, d in enumerate(TASK_DIMS)],
    ]
    for metric, style in styles:  # the line runs through the versions that were kept ...
        ax.plot(kept, [points[x].get(metric, float("nan")) for x in kept], label=metric, marker=".", **style)
        for x in (x for x in xs if x not in kept and x > 0):  # ... a blocked one hangs off its predecessor
            before = max((k for k in kept if k < x), default=x)
            values = [points[before].get(metric, float("nan")), points[x].get(metric, float("nan"))]
            ax.plot([before, x], values, linestyle=":", marker=".", **style)
    for x, row in zip(xs, points, strict=True):
        marker, color = _MARK.get(row["status"], ("o", "#999"))
        ax.scatter([x], [row["score"]], marker=marker, s=90, color=color, zorder=5)
        label = f"{row['status']} {row['score']:.1f}"
        ax.annotate(label, (x, row["score"]), textcoords="offset points", xytext=(0, 9), ha="center", fontsize=8)
    ax.set_xticks(xs, [f"{r['version'][:8]}\n{r['proposer'][:22]}" for r in points], fontsize=7)
    low = min((min(r.get(m, 100) for m in ("score", *TASK_DIMS)) for r in points), default=0)
    ax.set_ylim(max(0, low - 5), 104)
    ax.set_ylabel(f"{points[0]['suite'] if points else ''} score (×100)")
    ax.set_title(title or "Harness versions: gate metrics per version")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
