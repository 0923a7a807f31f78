"""``hat harness …``: init, validate, diff, hash.

None of these runs harness code: loading and validation read ``hooks.py`` and binding targets
statically (see :mod:`hat.harness.static_check`), so they are safe on a folder nobody has vetted.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import typer
from rich.console import Console

from hat.cli.common import fail
from hat.errors import HarnessError
from hat.harness.loader import check_harness, load_harness, resolve_harness_path
from hat.harness.state import Harness, SectionDiff, diff_harness

app = typer.Typer(help="Create, check and compare harness folders.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)


def _load_or_exit(ref: str) -> Harness:
    try:
        return load_harness(ref)
    except HarnessError as exc:
        fail(exc)


@app.command()
def init(
    directory: Path = typer.Argument(..., help="Folder to create (must not exist or be empty)."),
    source: str = typer.Option("livestream", "--from", help="Built-in harness or folder to copy."),
) -> None:
    """Write an editable copy of a harness (default: the built-in ``livestream``)."""
    if directory.exists() and any(directory.iterdir()):
        fail(f"{directory} exists and is not empty; choose a new folder")
    try:
        src = resolve_harness_path(source)
    except HarnessError as exc:
        fail(exc)
    shutil.copytree(src, directory, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    harness = _load_or_exit(str(directory))
    # the command on a line of its own, never wrapped, so it can be copied whole
    for line in (
        f"created {directory} from {source} (hash {harness.short_hash}); edit it, then check it with:",
        f"  hat harness validate {shlex.quote(str(directory))}",
    ):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def validate(
    ref: str = typer.Argument(..., help="Harness folder or built-in name."),
    as_json: bool = typer.Option(False, "--json", help="Print errors, warnings and MCP commands as JSON."),
    strict: bool = typer.Option(False, "--strict", help="Fail (exit 2) on warnings too."),
) -> None:
    """Check a harness without running any of its code; exit 0 when valid, 2 with every problem
    (file:line) otherwise. Warnings (e.g. a block that needs a product to render) are shown but
    pass unless --strict; the command lines of the harness's MCP servers are listed for review."""
    check = check_harness(ref)
    failed = not check.ok or (strict and bool(check.warnings))
    if as_json:
        print(json.dumps({**check.to_dict(), "strict": strict, "passed": not failed}, indent=2, ensure_ascii=False))
        raise typer.Exit(2 if failed else 0)
    if check.errors:
        err.print(f"[red]{ref}: {len(check.errors)} problem(s)[/]")
        for p in check.errors:
            err.print(f"  {p}", markup=False, soft_wrap=True, highlight=False)
    if check.warnings:
        err.print(f"[yellow]{ref}: {len(check.warnings)} warning(s)[/]")
        for p in check.warnings:
            err.print(f"  {p}", markup=False, soft_wrap=True, highlight=False)
    for name, command in check.mcp_commands.items():
        out.print(f"MCP server {name!r} runs: {command}", markup=False, soft_wrap=True, highlight=False)
    if failed or check.harness is None:
        raise typer.Exit(2)
    harness = check.harness
    out.print(
        f"[green]ok[/] {harness.name} {harness.version}: {len(harness.skills)} skills, {len(harness.tools)} tools, "
        f"{len(harness.pipeline)} blocks, {len(harness.hooks)} hooks (hash {harness.short_hash})"
    )


def _print_section(title: str, diff: SectionDiff) -> None:
    if diff.empty:
        return
    out.print(f"[bold]{title}[/]")
    for name in diff.added:
        out.print(f"  [green]+ {name}[/]")
    for name in diff.removed:
        out.print(f"  [red]- {name}[/]")
    for old, new in diff.renamed:
        out.print(f"  [yellow]~ {old} → {new}[/] (renamed)")
    for name in diff.changed:
        out.print(f"  [cyan]* {name}[/] (changed)")


@app.command()
def diff(
    a: str = typer.Argument(..., help="Old harness (folder or name)."),
    b: str = typer.Argument(..., help="New harness (folder or name)."),
    as_json: bool = typer.Option(False, "--json", help="Print the diff as JSON."),
) -> None:
    """Added / removed / renamed / changed skills, tools, blocks and hooks. Exits 0 when the harnesses
    are the same and 1 when they differ (like diff(1)); 2 when one cannot be loaded."""
    d = diff_harness(_load_or_exit(a), _load_or_exit(b))
    if as_json:
        print(json.dumps(d.to_dict(), indent=2))
    else:
        for title, section in (
            ("skills", d.skills),
            ("tools", d.tools),
            ("blocks", d.blocks),
            ("hooks", d.hooks),
        ):
            _print_section(title, section)
        if d.pipeline_changed:
            out.print("[bold]pipeline[/] order changed")
        if d.limits_changed:
            out.print(f"[bold]limits[/] changed: {', '.join(d.limits_changed)}")
        if d.other_changed:
            out.print(f"[bold]other[/] changed: {', '.join(d.other_changed)}")
        if d.empty:
            out.print("no differences")
    raise typer.Exit(0 if d.empty else 1)


@app.command("hash")
def hash_(ref: str = typer.Argument(..., help="Harness folder or built-in name.")) -> None:
    """Print the harness's stable content hash (SHA-256)."""
    print(_load_or_exit(ref).content_hash())
