"""``hat augment``: write N harness variants (HSA) with their mapping and a summary."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from hat.cli.common import ExitCode, StepProgress, check_text_or_exit, fail
from hat.errors import HatError

err = Console(stderr=True)
out = Console()


def augment_command(
    harness: str = typer.Option("livestream", help="Harness folder or built-in name."),
    n: int = typer.Option(10, "--n", min=1, help="How many variants."),
    seed: int = typer.Option(0, help="Seed (same seed → byte-identical variants)."),
    out_dir: Path = typer.Option(..., "--out", help="Folder to write variant-NNNN/ folders into."),
    config: str | None = typer.Option(None, "--config", help="Change envelope YAML (or: default, tools, prompt)."),
    split: str = typer.Option("train", help="Name pools / paraphrases to draw from: train | heldout."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary (without per-variant rows) as JSON."),
) -> None:
    """Harness-State Augmentation: N valid, task-preserving variants of a harness."""
    from hat.augment import generate_variants, load_envelope, write_variant
    from hat.cli.common import harness_or_exit
    from hat.harness.loader import validate_harness

    if config is not None and Path(config).is_file():
        check_text_or_exit(config, "change envelope")
    base = harness_or_exit(harness)
    try:
        envelope = load_envelope(config)
        variants = generate_variants(base, n, seed, envelope, split)
    except (HatError, ValueError) as exc:
        fail(exc)
    if out_dir.exists() and any(out_dir.iterdir()):
        fail(f"{out_dir} exists and is not empty; choose a new folder")
    rows: list[dict] = []
    families: Counter[str] = Counter()
    with StepProgress("augment: writing and validating variants", n) as update:
        for i, variant in enumerate(variants):
            folder = write_variant(variant, out_dir / f"variant-{i:04d}")
            problems = validate_harness(folder)
            if problems:  # a transform produced an invalid harness: a bug, say so loudly
                fail(f"{folder} is invalid: {problems[0]} (a bug in a transform; please report it)", ExitCode.FAILED)
            families.update(variant.families)
            rows.append({"folder": folder.name, **variant.summary()})
            update(i + 1)
    summary = {
        "base": base.name,
        "base_hash": base.content_hash(),
        "n": n,
        "seed": seed,
        "split": split,
        "envelope": envelope.to_dict(),
        "families": dict(families),
        "variants": rows,
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True), encoding="utf-8")
    distinct = len({r["hash"] for r in rows})
    if as_json:
        brief = {k: v for k, v in summary.items() if k != "variants"}
        print(json.dumps({**brief, "out": str(out_dir), "distinct_hashes": distinct}, sort_keys=True))
        return
    _print_families(dict(families), n)
    err.print(
        f"wrote {n} valid variants to {out_dir} ({distinct} distinct hashes); "
        f"each variant's transforms: {out_dir / 'summary.json'}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _print_families(families: dict[str, Any], n: int) -> None:
    """How many variants each transform family touched, as a table."""
    table = Table("family", "variants", "share", title="transform families")
    for family, count in sorted(families.items()):
        table.add_row(family, str(count), f"{100 * count / n:.0f}%")
    out.print(table)
