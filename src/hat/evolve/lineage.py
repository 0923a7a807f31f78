"""The lineage of a harness: every version, where it came from, who proposed it, why, and the
evaluation that admitted (or blocked) it.

Layout of a lineage folder (by default ``<harness folder>.lineage/``, beside the harness)::

    lineage.jsonl                 append-only events, one JSON object a line
    versions/<hash12>/            each version as a harness folder (``save_harness`` form)
    proposals/<id>/               pending and decided proposals (see :mod:`hat.evolve.propose`)

Why events and not one mutable record per version: a version is recorded when a person approves
it, and the regression gate decides about it later (and may be re-run). Appending events keeps
the history honest — nothing recorded is ever rewritten — and a crash leaves at most one torn
last line, which :func:`~hat.harness.trace.read_jsonl` skips. :meth:`Lineage.versions` folds the
events into one :class:`Version` view per hash.

Event kinds: ``version`` (hash, parent, proposer, rationale, diff, patch, proposal id, reviewer,
note), ``gate`` (hash, parent, decision ``promoted`` | ``blocked``, the numbers), ``review``
(proposal id, decision ``rejected``, reviewer, note). The **head** is the newest promoted version,
else the root: the version to serve and to diagnose next.

Snapshots are written with :func:`~hat.harness.loader.save_harness`, which round-trips to the same
content hash, so a version folder *is* the version (``hat serve --harness <lineage>/versions/…``).
Diffs between versions are taken between snapshots, so they show content, not formatting.
"""

from __future__ import annotations

import difflib
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hat.errors import HatError
from hat.harness.loader import load_harness, resolve_harness_path, save_harness
from hat.harness.state import Harness, diff_harness
from hat.harness.trace import append_jsonl, read_jsonl

__all__ = [
    "Lineage",
    "Version",
    "harness_files",
    "lineage_for",
    "unified_patch",
]

Status = Literal["root", "approved", "promoted", "blocked"]
_TEXT_FILES = ("harness.yaml", "hooks.py", "skills/*/SKILL.md", "tools/*.yaml", "prompts/*.md")


def lineage_for(harness_ref: str | Path) -> Path:
    """The default lineage folder of a harness folder: ``<folder>.lineage`` beside it."""
    path = Path(harness_ref)
    if not path.is_dir():
        raise HatError(
            f"{harness_ref!r} is not a harness folder, so it has no lineage beside it; copy it first "
            f"(`hat harness init my-harness --from {harness_ref}`) or pass --lineage"
        )
    return path.resolve().parent / f"{path.resolve().name}.lineage"


def harness_files(folder: str | Path) -> dict[str, str]:
    """Every text file of a harness folder, by relative path (POSIX), sorted."""
    root = Path(folder)
    files = {}
    for pattern in _TEXT_FILES:
        for path in sorted(root.glob(pattern)):
            if path.is_file():
                files[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
    return dict(sorted(files.items()))


def canonical_files(harness: Harness) -> dict[str, str]:
    """The files ``save_harness`` writes for ``harness``: the form every lineage diff compares."""
    with tempfile.TemporaryDirectory(prefix="hat-evolve-") as tmp:
        save_harness(harness, Path(tmp) / "h")
        return harness_files(Path(tmp) / "h")


def unified_patch(old: dict[str, str], new: dict[str, str]) -> str:
    """A unified diff (``git diff`` style, ``a/`` and ``b/`` prefixes) from one file map to another."""
    chunks: list[str] = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        chunks.extend(
            difflib.unified_diff(
                (a or "").splitlines(keepends=True),
                (b or "").splitlines(keepends=True),
                fromfile=f"a/{path}" if a is not None else "/dev/null",
                tofile=f"b/{path}" if b is not None else "/dev/null",
            )
        )
    return "".join(line if line.endswith("\n") else line + "\n" for line in chunks)


@dataclass(frozen=True)
class Version:
    """One harness version as the lineage knows it now (events folded)."""

    hash: str
    parent: str | None
    status: Status
    proposer: str = ""
    rationale: str = ""
    diff: dict[str, Any] = field(default_factory=dict)
    patch: str = ""
    proposal_id: str | None = None
    reviewer: str = ""
    note: str = ""
    created_at: float = 0.0
    gate: dict[str, Any] | None = None

    @property
    def short(self) -> str:
        return self.hash[:12]

    def to_dict(self) -> dict[str, Any]:
        return {
            "hash": self.hash,
            "parent": self.parent,
            "status": self.status,
            "proposer": self.proposer,
            "rationale": self.rationale,
            "diff": self.diff,
            "patch": self.patch,
            "proposal_id": self.proposal_id,
            "reviewer": self.reviewer,
            "note": self.note,
            "created_at": self.created_at,
            "gate": self.gate,
        }


class Lineage:
    """A lineage folder (module docstring). Cheap to construct; reads the event file on demand."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.file = self.root / "lineage.jsonl"
        self.proposals_dir = self.root / "proposals"

    # -- reading ---------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.file.is_file()

    def events(self) -> list[dict[str, Any]]:
        return read_jsonl(self.file).rows if self.exists() else []

    def versions(self) -> dict[str, Version]:
        """Every version, in the order recorded, with its latest gate decision folded in."""
        out: dict[str, Version] = {}
        for event in self.events():
            kind, key = event.get("kind"), str(event.get("hash", ""))
            if kind == "version":
                out[key] = _version_from(event)
            elif kind == "gate" and key in out:
                old = out[key]
                status: Status = "promoted" if event.get("decision") == "promoted" else "blocked"
                out[key] = Version(**{**old.__dict__, "status": status, "gate": event})
        return out

    def get(self, ref: str) -> Version:
        """A version by full hash or unique prefix."""
        matches = [v for h, v in self.versions().items() if h.startswith(ref)]
        if len(matches) != 1:
            known = ", ".join(v.short for v in self.versions().values()) or "none"
            what = "no version" if not matches else f"{len(matches)} versions"
            raise HatError(f"{what} in {self.root} match {ref!r}; known versions: {known}")
        return matches[0]

    def root_version(self) -> Version:
        roots = [v for v in self.versions().values() if v.status == "root"]
        if not roots:
            raise HatError(f"{self.root} has no lineage yet; start one with `hat evolve init <harness folder>`")
        return roots[0]

    def head(self) -> Version:
        """The newest promoted version, else the root."""
        promoted = [v for v in self.versions().values() if v.status == "promoted"]
        return promoted[-1] if promoted else self.root_version()

    def chain(self, ref: str | None = None) -> list[Version]:
        """``ref`` (default: the head) and its ancestors, newest first."""
        versions = self.versions()
        current: Version | None = self.get(ref) if ref else self.head()
        out: list[Version] = []
        while current is not None and current not in out:
            out.append(current)
            current = versions.get(current.parent) if current.parent else None
        return out

    def folder(self, ref: str) -> Path:
        return self.root / "versions" / self.get(ref).short

    def load(self, ref: str) -> Harness:
        return load_harness(self.folder(ref))

    # -- writing ---------------------------------------------------------------------------------
    def init(self, harness_ref: str | Path) -> Version:
        """Start the lineage at the harness in ``harness_ref`` (idempotent for the same harness)."""
        harness = load_harness(resolve_harness_path(harness_ref))
        if self.exists():
            root = self.root_version()
            if root.hash != harness.content_hash():
                raise HatError(
                    f"{self.root} already starts at {root.short}, not at {harness.short_hash}; "
                    "choose another --lineage folder for a different harness"
                )
            return root
        self._snapshot(harness)
        event = {
            "kind": "version",
            "hash": harness.content_hash(),
            "parent": None,
            "status": "root",
            "proposer": "init",
            "rationale": f"lineage started from {harness_ref}",
            "created_at": time.time(),
        }
        self._append(event)
        return _version_from(event)

    def add_version(
        self,
        harness: Harness,
        *,
        parent: str,
        proposer: str,
        rationale: str,
        proposal_id: str | None = None,
        reviewer: str = "",
        note: str = "",
    ) -> Version:
        """Record an approved version (a child of ``parent``, which must be in the lineage)."""
        base = self.get(parent)
        new_hash = harness.content_hash()
        if new_hash in self.versions():
            raise HatError(f"version {new_hash[:12]} is already in the lineage; nothing to record")
        old = self.load(base.hash)
        self._snapshot(harness)
        event = {
            "kind": "version",
            "hash": new_hash,
            "parent": base.hash,
            "status": "approved",
            "proposer": proposer,
            "rationale": rationale,
            "diff": diff_harness(old, harness).to_dict(),
            "patch": unified_patch(canonical_files(old), canonical_files(harness)),
            "proposal_id": proposal_id,
            "reviewer": reviewer,
            "note": note,
            "created_at": time.time(),
        }
        self._append(event)
        return _version_from(event)

    def record_gate(self, ref: str, result: dict[str, Any]) -> Version:
        """Append the gate's decision (``result["decision"]``) and numbers for a version."""
        version = self.get(ref)
        self._append({"kind": "gate", "hash": version.hash, "parent": version.parent, "time": time.time(), **result})
        return self.get(version.hash)

    def record_review(self, proposal_id: str, decision: str, *, reviewer: str = "", note: str = "") -> None:
        event = {"kind": "review", "proposal_id": proposal_id, "decision": decision, "reviewer": reviewer}
        self._append({**event, "note": note, "time": time.time()})

    def reviews(self) -> dict[str, dict[str, Any]]:
        """The latest review decision per proposal id (approvals are the ``version`` events)."""
        out: dict[str, dict[str, Any]] = {}
        for event in self.events():
            if event.get("kind") == "review":
                out[str(event["proposal_id"])] = event
            elif event.get("kind") == "version" and event.get("proposal_id"):
                out[str(event["proposal_id"])] = {**event, "decision": "approved"}
        return out

    def _snapshot(self, harness: Harness) -> Path:
        folder = self.root / "versions" / harness.short_hash
        if not folder.exists():
            save_harness(harness, folder)
        return folder

    def _append(self, event: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.file, [json.dumps(event, ensure_ascii=False, default=str)], fsync=True)


def _version_from(event: dict[str, Any]) -> Version:
    return Version(
        hash=str(event["hash"]),
        parent=event.get("parent"),
        status=event.get("status", "approved"),
        proposer=str(event.get("proposer", "")),
        rationale=str(event.get("rationale", "")),
        diff=dict(event.get("diff") or {}),
        patch=str(event.get("patch", "")),
        proposal_id=event.get("proposal_id"),
        reviewer=str(event.get("reviewer", "")),
        note=str(event.get("note", "")),
        created_at=float(event.get("created_at", 0.0)),
    )
