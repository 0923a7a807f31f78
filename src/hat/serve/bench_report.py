"""How a ``hat bench latency`` report is shown: a terminal table, Markdown, latency-CDF plots, files.

The report is the JSON of :mod:`hat.serve.bench`: ``runs`` (one per server: a model spec and a
speculative setting, or a ``--url``), each with ``levels``; ``bandwidth`` (one row per run: decode
rate against the memory-bandwidth bound); ``speculative`` (Table 7 rows). The layouts follow the
technical report: Table 6 is one row per run and concurrency level (Wall P50/P95, TTFT P95, client
decode tokens/s, share under 15 s, errors, n); Table 7 is speculative decoding on vs off per level
(speedup and acceptance).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from hat.serve.bench import UNDER_S

__all__ = ["latency_table", "markdown", "plot_cdfs", "run_label", "speculative_table", "write_outputs"]


def _fmt(value: Any, pattern: str = "{:.2f}") -> str:
    return "—" if value is None else pattern.format(value)


def _pct(value: float | None) -> str:
    return _fmt(None if value is None else 100 * value, "{:.1f} %")


def run_label(run: dict[str, Any]) -> str:
    """``spec (engine, speculative N)``, or the served model's name for a ``--url`` run."""
    spec = run.get("spec") or run.get("server", {}).get("model") or "?"
    parts = [run["engine"]] if run.get("engine") else []
    if run.get("speculative"):
        parts.append(f"speculative {run['speculative']}")
    return f"{spec} ({', '.join(parts)})" if parts else str(spec)


_TABLE6 = ("Model", "C", "n", "Wall P50 (s)", "Wall P95 (s)", "TTFT P95 (s)", "Decode tok/s", "< 15 s", "Errors")


def _table6_cells(run: dict[str, Any], row: dict[str, Any]) -> list[str]:
    return [
        run_label(run),
        str(row["concurrency"]),
        str(row["n"]),
        _fmt(row["wall_p50_s"]),
        _fmt(row["wall_p95_s"]),
        _fmt(row["ttft_p95_s"]),
        _fmt(row["decode_tokens_per_s"], "{:.1f}"),
        _pct(row["under_15s"]),
        str(row["errors"]),
    ]


def latency_table(report: dict[str, Any]) -> Table:
    """Table 6 for the terminal."""
    table = Table(title=f"Deployment replay · n = {report['n']} per level, {report['warmup']} warm-up not counted")
    for column in _TABLE6:
        table.add_column(column, justify="left" if column == "Model" else "right")
    for run in report["runs"]:
        for row in run["levels"]:
            table.add_row(*_table6_cells(run, row))
    return table


_TABLE7 = ("Model", "Draft", "C", "Wall P50 off / on (s)", "Speedup", "Decode off / on (tok/s)", "Decode speedup")
_TABLE7_TAIL = ("Acceptance", "Same reply")


def _table7_cells(row: dict[str, Any]) -> list[str]:
    return [
        f"{row['spec']} ({row['engine']})",
        str(row["speculative"]),
        str(row["concurrency"]),
        f"{_fmt(row['wall_p50_off_s'])} / {_fmt(row['wall_p50_on_s'])}",
        _fmt(row["speedup_wall_p50"], "{:.2f}×"),
        f"{_fmt(row['decode_off_tokens_per_s'], '{:.1f}')} / {_fmt(row['decode_on_tokens_per_s'], '{:.1f}')}",
        _fmt(row["speedup_decode"], "{:.2f}×"),
        _pct(row["acceptance"]),
        _pct(row["same_reply"]),
    ]


def speculative_table(report: dict[str, Any]) -> Table:
    """Table 7 for the terminal."""
    table = Table(title="Speculative decoding (prompt lookup) on vs off")
    for column in (*_TABLE7, *_TABLE7_TAIL):
        table.add_column(column, justify="left" if column == "Model" else "right")
    for row in report["speculative"]:
        table.add_row(*_table7_cells(row))
    return table


def _md(header: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def _bandwidth_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for run, bound in zip(report["runs"], report["bandwidth"]["runs"], strict=True):
        weights = bound["weight_bytes"]
        rows.append(
            [
                run_label(run),
                _fmt(None if weights is None else weights / 1e6, "{:.0f} MB"),
                _fmt(bound["bound_tokens_per_s"], "{:.0f}"),
                _fmt(bound["engine_decode_tokens_per_s"], "{:.1f}"),
                _pct(bound["engine_share"]),
                _fmt(bound["client_decode_tokens_per_s"], "{:.1f}"),
                _pct(bound["client_share"]),
            ]
        )
    return rows


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: Table 6, the bandwidth bound, Table 7 (when there is one), the command."""
    bandwidth = report["bandwidth"]
    lines = [
        f"# Deployment latency · {report.get('client', '')}",
        "",
        f"Simulator traffic (seed {report['seed']}, mode {report['mode']}), n = {report['n']} counted requests "
        f"per level after {report['warmup']} warm-up requests (not counted); wall and TTFT are client-side.",
        "",
        "## Table 6 layout: latency per concurrency level",
        "",
        *_md(_TABLE6, [_table6_cells(run, row) for run in report["runs"] for row in run["levels"]]),
        "",
        "## Decode against the memory-bandwidth bound",
        "",
        f"Bandwidth {_fmt(bandwidth['gbps'], '{:.1f}')} GB/s ({bandwidth['source']}); bound = bandwidth / weight "
        "bytes; engine decode = median over generations at the lowest concurrency (every round), client "
        "decode = reply tokens only.",
        "",
        *_md(
            ("Model", "Weights", "Bound tok/s", "Engine tok/s", "Share", "Client tok/s", "Share"),
            _bandwidth_rows(report),
        ),
        "",
    ]
    if report["speculative"]:
        lines += [
            "## Table 7 layout: speculative decoding on vs off",
            "",
            *_md((*_TABLE7, *_TABLE7_TAIL), [_table7_cells(row) for row in report["speculative"]]),
            "",
        ]
    lines += ["Command:", "", "```", report.get("command", ""), "```", ""]
    return "\n".join(lines)


def plot_cdfs(report: dict[str, Any], folder: Path) -> list[str]:
    """``latency_cdf_c<C>.png`` per level (a curve per run) and ``latency_cdf.png`` (the first run, a
    curve per level); returns notes (matplotlib missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["matplotlib is not installed (pip install 'hat-agent[serve]'); no CDF plots written"]
    levels = sorted({row["concurrency"] for run in report["runs"] for row in run["levels"]})
    for level in levels:
        curves = [
            (run_label(run), row) for run in report["runs"] for row in run["levels"] if row["concurrency"] == level
        ]
        _plot(plt, curves, folder / f"latency_cdf_c{level}.png", f"Latency CDF · concurrency {level}")
    first = report["runs"][0]
    curves = [(f"c={row['concurrency']}", row) for row in first["levels"]]
    _plot(plt, curves, folder / "latency_cdf.png", f"Latency CDF · {run_label(first)}")
    return []


def _plot(plt: Any, curves: list[tuple[str, dict[str, Any]]], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for label, row in curves:
        walls = row["wall_s"]
        if walls:
            ax.step(walls, [(i + 1) / row["n"] for i in range(len(walls))], where="post", label=label)
    ax.axvline(UNDER_S, color="grey", linestyle="--", linewidth=1, label="15 s")
    # log x: scripted-model runs (milliseconds) and LLM runs (seconds) both stay readable next to 15 s
    ax.set(xscale="log", xlabel="wall time per request (s, log scale)", ylabel="share of requests", ylim=(0, 1.02))
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_outputs(report: dict[str, Any], folder: Path) -> list[str]:
    """``latency.json`` and ``latency.md`` (with the command line) and the CDF plots; returns notes."""
    folder.mkdir(parents=True, exist_ok=True)
    report = {**report, "command": shlex.join(["hat", *sys.argv[1:]])}
    (folder / "latency.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (folder / "latency.md").write_text(markdown(report), encoding="utf-8")
    return plot_cdfs(report, folder)
