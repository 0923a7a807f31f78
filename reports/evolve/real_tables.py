"""Markdown tables for reports/evolve.md from the files real_model.sh copies into reports/evolve/real/:
the gates (cells that moved, plus every suite's overall cell), the pairwise tally and the A/B.

    python reports/evolve/real_tables.py reports/evolve/real
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def gate_table(path: Path) -> str:
    data = json.loads(path.read_text())
    rows = [
        "| suite | slice | dimension | n | old | new | Δ | 95 % CI | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in data["cells"]:
        if (
            c["verdict"] == "same"
            and not (c["slice"] == "all" and c["dim"] == "overall")
            and not c["slice"].startswith("target:")
        ):
            continue
        rows.append(
            f"| {c['suite']} | {c['slice']} | {c['dim']} | {c['n']} | {c['old']:.1f} | {c['new']:.1f} | "
            f"{c['diff']:+.1f} | [{c['lo']:+.1f}, {c['hi']:+.1f}] | {c['verdict']} |"
        )
    settings = data["settings"]
    head = (
        f"Decision **{data['decision']}**; target {data['target']}; settings: suites {settings['suites']}, "
        f"n {settings['n']}, seed {settings['seed']}, model `{settings['model']}`, batch size "
        f"{settings.get('batch_size')}, dtype {settings.get('dtype', 'float32')}."
    )
    reasons = "\n".join(f"- {r}" for r in data["reasons"][:8])
    more = f"\n- … {len(data['reasons']) - 8} more" if len(data["reasons"]) > 8 else ""
    return f"{head}\n\n" + "\n".join(rows) + f"\n\nReasons:\n{reasons}{more}\n"


def tally_table(path: Path) -> str:
    result = json.loads(path.read_text())
    t = result["overall"]

    def share(tally: dict, key: str) -> str:
        s = tally.get(key)
        return "—" if not s else f"{100 * s['estimate']:.1f} % [{100 * s['low']:.1f}, {100 * s['high']:.1f}]"

    lines = [
        f"{result['model']} vs {result['baseline']}, rater {result['rater']}: {result['n_rated']} of "
        f"{result['n_pairs']} pairs rated - {t['wins']} wins, {t['ties']} ties, {t['losses']} losses for the model.",
        f"Win share {share(t, 'win')}, tie {share(t, 'tie')}, loss {share(t, 'loss')}; win of decided "
        f"{share(t, 'win_of_decided')} (Wilson 95 %).",
        "",
        "| intent | n | wins | ties | losses | win share (Wilson 95 %) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {k} | {v['n']} | {v['wins']} | {v['ties']} | {v['losses']} | {share(v, 'win')} |"
        for k, v in result["by_intent"].items()
    ]
    return "\n".join(lines) + "\n"


def ab_table(path: Path) -> str:
    a = json.loads(path.read_text())

    def interval(d: dict) -> str:
        return f"{d['estimate']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"

    rows = [
        "| | absolute uplift | relative uplift |",
        "|---|---|---|",
        f"| difference in means | {interval(a['uplift'])} | {interval(a['relative_uplift'])} |",
    ]
    if "cuped" in a:
        c = a["cuped"]
        rows.append(f"| CUPED (θ = {c['theta']:.3f}) | {interval(c['uplift'])} | {interval(c['relative_uplift'])} |")
    truth = a.get("true_uplift", {})
    rows.append(
        f"| true (simulation) | {truth.get('absolute', float('nan')):+.4f} "
        f"| {truth.get('relative', float('nan')):+.4f} |"
    )
    arms = ", ".join(f"{arm} {a['n'][arm]} visits, mean {a['means'][arm]:.3f}" for arm in ("control", "treatment"))
    systems = a.get("systems", {})
    head = f"{systems.get('control')} (control) vs {systems.get('treatment')} (treatment): {arms}; "
    head += f"{a['n_boot']} bootstrap replicates."
    return head + "\n\n" + "\n".join(rows) + "\n"


def main(folder: str) -> None:
    root = Path(folder)
    for name, render in (
        ("gate1.json", gate_table),
        ("gate2.json", gate_table),
        ("pairwise_tally.json", tally_table),
        ("ab.json", ab_table),
    ):
        if (root / name).is_file():
            print(f"### {name}\n\n{render(root / name)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "reports/evolve/real")
