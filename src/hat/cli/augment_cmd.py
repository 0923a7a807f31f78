"""``hat augment``: write N harness variants (HSA) with their mapping and a summary."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console

from hat.errors import HatError

err = Console(stderr=True)


def augment_command(
    harness: str = typer.Option("livestream", help="Harness folder or built-in name."),
    n: int = typer.Option(10, "--n", min=1, help="How many variants."),
    seed: int = typer.Option(0, help="Seed (same seed → byte-identical variants)."),
    out: Path = typer.Option(..., "--out", help="Folder to write variant-NNNN/ folders into."),
    config: str | None = typer.Option(None, "--config", help="Change envelope YAML (or: default, tools, prompt)."),
    split: str = typer.Option("train", help="Name pools / paraphrases to draw from: train | heldout."),
) -> None:
    """Harness-State Augmentation: N valid, task-preserving variants of a harness."""
    from hat.augment import generate_variants, load_envelope, write_variant
    from hat.cli.common import harness_or_exit
    from hat.harness.loader import validate_harness

    base = harness_or_exit(harness)
    try:
        envelope = load_envelope(config)
        variants = generate_variants(base, n, seed, envelope, split)
    except (HatError, ValueError) as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from exc
    if out.exists() and any(out.iterdir()):
        err.print(f"error: {out} exists and is not empty; choose a new folder")
        raise typer.Exit(2)
    rows: list[dict] = []
    families: Counter[str] = Counter()
    with err.status("writing and validating variants …"):
        for i, variant in enumerate(variants):
            folder = write_variant(variant, out / f"variant-{i:04d}")
            problems = validate_harness(folder)
            if problems:  # a transform produced an invalid harness: a bug, say so loudly
                err.print(f"error: {folder} is invalid: {problems[0]}", markup=False)
                raise typer.Exit(1)
            families.update(variant.families)
            rows.append({"folder": folder.name, **variant.summary()})
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
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True), encoding="utf-8")
    err.print(
        f"wrote {n} valid variants to {out} ({len({r['hash'] for r in rows})} distinct hashes); "
        f"families: {dict(families)}"
    )
