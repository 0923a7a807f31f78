"""Propose: edits to the harness that target one failure cluster, each a validated harness folder
with a rationale, waiting for a person to approve or reject it.

Proposers:

- **rules** (for the failure kinds whose fix is known):

  ==========================  ==================================================================
  ``restore_rule``            a ``missing_tool_call`` whose skill lost the rule naming the tool:
                              the rule is put back (from a reference harness or an ancestor in
                              the lineage), at its old position, under the tool's current name
  ``add_rule``                the same failure with no reference that had the rule: a new rule
                              "Call `<tool>` …" from the tool's own description is appended
  ``restore_description``     ``skill_not_loaded`` / a misused tool whose skill or tool
                              description differs from the reference: the reference text is put
                              back (a description that misleads is rewritten to the known one)
  ==========================  ==================================================================

- **llm**: any :class:`~hat.models.base.Model` (``openai:<url>#<model>``) is shown the cluster, a
  representative trace and the file to change, and answers with JSON ``{"rationale", "files"}``.
  (This path is exercised with a stand-in model in the tests, never against a live server.)

- **person**: an edited copy of the harness folder (``hat evolve propose --from-folder``), and the
  review page's edit-and-approve.

Every proposal is written with :func:`~hat.harness.loader.save_harness` into
``<lineage>/proposals/<id>/harness`` and validated there with the project's own
:func:`~hat.harness.loader.check_harness`; an invalid edit never becomes a proposal. Edits of file
text (LLM, person) may touch ``harness.yaml``, skills, tools and prompts, never ``hooks.py``: that
file is code, and a proposal must not be a way to run code through a review form.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from hat.errors import HarnessValidationError, HatError, Problem
from hat.evolve.lineage import Lineage, canonical_files, unified_patch
from hat.evolve.policy import names_tool
from hat.harness.loader import check_harness, load_harness, save_harness
from hat.harness.state import Harness, Skill, ToolSpec
from hat.models.base import GenerationConfig, Model

__all__ = [
    "EDITABLE",
    "Proposal",
    "ProposalStore",
    "edit_files",
    "llm_proposal",
    "propose",
    "rule_proposals",
]

EDITABLE = re.compile(r"^(harness\.yaml|skills/[a-z0-9-]+/SKILL\.md|tools/[\w.\-]+\.yaml|prompts/[\w.\-]+\.md)$")
_RULE = re.compile(r"^\s*\d+[.)]\s+(.*\S)\s*$")


@dataclass(frozen=True)
class Proposal:
    """One proposed edit of ``base_hash`` (a lineage version) into the harness ``new_hash``."""

    id: str
    kind: str
    proposer: str
    rationale: str
    base_hash: str
    new_hash: str
    cluster: dict[str, Any] = field(default_factory=dict)
    patch: str = ""
    evaluation: dict[str, Any] | None = None
    created_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Proposal:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class ProposalStore:
    """``<lineage>/proposals/<id>/`` — ``proposal.json`` and the proposed ``harness/`` folder."""

    def __init__(self, lineage: Lineage) -> None:
        self.lineage = lineage
        self.root = lineage.proposals_dir

    def add(
        self, base: Harness, new: Harness, *, kind: str, proposer: str, rationale: str, cluster: dict[str, Any]
    ) -> Proposal:
        """Validate ``new`` in its own folder and record it; raises when it is invalid or no change."""
        base_version = self.lineage.get(base.content_hash())
        if new.content_hash() == base.content_hash():
            raise HatError(f"the {kind} proposal changes nothing in {base_version.short}")
        pid = f"{kind}-{new.short_hash[:8]}"
        if (self.root / pid / "proposal.json").is_file():
            return self.get(pid)  # the same edit proposed again: keep the first (and its evaluation)
        _write_validated(new, self.root / pid / "harness")
        proposal = Proposal(
            id=pid,
            kind=kind,
            proposer=proposer,
            rationale=rationale,
            base_hash=base_version.hash,
            new_hash=new.content_hash(),
            cluster=cluster,
            patch=unified_patch(canonical_files(base), canonical_files(new)),
            created_at=time.time(),
        )
        self.save(proposal)
        return proposal

    def save(self, proposal: Proposal) -> None:
        folder = self.root / proposal.id
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(proposal.to_dict(), indent=2, ensure_ascii=False, default=str)
        (folder / "proposal.json").write_text(text + "\n", encoding="utf-8")

    def get(self, pid: str) -> Proposal:
        file = self.root / PurePosixPath(pid).name / "proposal.json"
        if not file.is_file():
            raise HatError(
                f"no proposal {pid!r} in {self.root}; known: {', '.join(p.id for p in self.all()) or 'none'}"
            )
        return Proposal.from_dict(json.loads(file.read_text(encoding="utf-8")))

    def folder(self, pid: str) -> Path:
        return self.root / self.get(pid).id / "harness"

    def harness(self, pid: str) -> Harness:
        return load_harness(self.folder(pid))

    def all(self) -> list[Proposal]:
        files = sorted(self.root.glob("*/proposal.json")) if self.root.is_dir() else []
        items = [Proposal.from_dict(json.loads(f.read_text(encoding="utf-8"))) for f in files]
        return sorted(items, key=lambda p: (p.created_at, p.id))

    def status(self, pid: str) -> str:
        review = self.lineage.reviews().get(pid)
        return str(review["decision"]) if review else "pending"


def _write_validated(harness: Harness, folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    save_harness(harness, folder)
    check = check_harness(folder)
    if not check.ok:
        shutil.rmtree(folder.parent, ignore_errors=True)
        raise HarnessValidationError(list(check.errors), str(folder))


# -- editing files ----------------------------------------------------------------------------------
def edit_files(base_folder: str | Path, files: dict[str, str]) -> Harness:
    """The harness of ``base_folder`` with ``files`` (relative path → new text) replaced, validated.
    Only :data:`EDITABLE` paths (never ``hooks.py``); raises :class:`HarnessValidationError`."""
    bad = [p for p in files if not EDITABLE.match(p) or ".." in PurePosixPath(p).parts]
    if bad:
        problems = [Problem(p, "not an editable harness file (harness.yaml, skills, tools, prompts)") for p in bad]
        raise HarnessValidationError(problems, str(base_folder))
    with tempfile.TemporaryDirectory(prefix="hat-edit-") as tmp:
        work = Path(tmp) / "harness"
        shutil.copytree(base_folder, work, ignore=shutil.ignore_patterns("__pycache__"))
        for rel, content in files.items():
            target = work / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content.replace("\r\n", "\n"), encoding="utf-8")
        check = check_harness(work)
        if not check.ok or check.harness is None:
            raise HarnessValidationError(list(check.errors), "the edited harness")
        return dataclasses.replace(check.harness, root=None)


# -- rules --------------------------------------------------------------------------------------------
def _split(body: str) -> tuple[list[str], list[str]]:
    """(numbered rules' text, other lines) of a skill body."""
    rules, other = [], []
    for line in body.splitlines():
        match = _RULE.match(line)
        (rules.append(match.group(1)) if match else other.append(line))
    return rules, other


def _join(other: list[str], rules: list[str]) -> str:
    head = "\n".join(line for line in other if line.strip())
    numbered = "\n".join(f"{i}. {rule}" for i, rule in enumerate(rules, 1))
    return f"{head}\n{numbered}".strip() if head else numbered


def _with_skill(harness: Harness, skill: Skill) -> Harness:
    return harness.replace(skills=tuple(skill if s.name == skill.name else s for s in harness.skills))


def _with_tool(harness: Harness, tool: ToolSpec) -> Harness:
    return harness.replace(tools=tuple(tool if t.name == tool.name else t for t in harness.tools))


Candidate = tuple[str, str, Harness]  # (kind, rationale, new harness)


def _restore_rule(cluster: dict[str, Any], harness: Harness, ref: Harness) -> Candidate | None:
    key = cluster["key"]
    skill, tool = harness.skill(key.get("skill", "")), harness.tool(key.get("tool", ""))
    if skill is None or tool is None:
        return None
    ref_skill, ref_tool = ref.skill_by_function(skill.function_id), ref.tool_by_function(tool.function_id)
    if ref_skill is None or ref_tool is None:
        return None
    rules, other = _split(skill.body)
    ref_rules, _ = _split(ref_skill.body)
    lost = [(i, r) for i, r in enumerate(ref_rules) if names_tool(r, ref_tool.name) and r not in rules]
    if not lost or any(names_tool(r, tool.name) for r in rules):
        return None
    for index, rule in lost:
        rules.insert(min(index, len(rules)), rule.replace(f"`{ref_tool.name}`", f"`{tool.name}`"))
    new = _with_skill(harness, dataclasses.replace(skill, body=_join(other, rules)))
    quoted = "; ".join(f"“{r}”" for _, r in lost)
    why = (
        f"{cluster['n']} {key.get('intent', '')} episode(s) fail {key.get('dimension', '')} because `{tool.name}` is "
        f"never called. Skill `{skill.name}` no longer has the rule that says to call it, which "
        f"{ref.name} {ref.version} ({ref.short_hash}) has: {quoted} Put it back."
    )
    return "restore_rule", why, new


def _add_rule(cluster: dict[str, Any], harness: Harness) -> Candidate | None:
    key = cluster["key"]
    skill, tool = harness.skill(key.get("skill", "")), harness.tool(key.get("tool", ""))
    if skill is None or tool is None or names_tool(skill.body, tool.name):
        return None
    rules, other = _split(skill.body)
    purpose = tool.description.rstrip(". ")
    rules.insert(0, f"Call `{tool.name}` for these requests ({purpose[:1].lower() + purpose[1:]}).")
    new = _with_skill(harness, dataclasses.replace(skill, body=_join(other, rules)))
    why = (
        f"{cluster['n']} {key.get('intent', '')} episode(s) fail {key.get('dimension', '')} because `{tool.name}` is "
        f"never called, and no rule of skill `{skill.name}` mentions it. Add a first rule that does, "
        "worded from the tool's own description."
    )
    return "add_rule", why, new


def _restore_description(cluster: dict[str, Any], harness: Harness, ref: Harness) -> Candidate | None:
    key, kind = cluster["key"], cluster.get("kind", "")
    if kind in ("skill_not_loaded", "wrong_skill_loaded"):
        skill = harness.skill(key.get("skill", ""))
        ref_skill = ref.skill_by_function(skill.function_id) if skill else None
        if skill is None or ref_skill is None or ref_skill.description == skill.description:
            return None
        new = _with_skill(harness, dataclasses.replace(skill, description=ref_skill.description))
        what = f"skill `{skill.name}`"
    else:
        tool = harness.tool(key.get("tool", ""))
        ref_tool = ref.tool_by_function(tool.function_id) if tool else None
        if tool is None or ref_tool is None or ref_tool.description == tool.description:
            return None
        new = _with_tool(harness, dataclasses.replace(tool, description=ref_tool.description))
        what = f"tool `{tool.name}`"
    why = (
        f"{cluster['n']} {key.get('intent', '')} episode(s) fail {key.get('dimension', '')} ({kind}). The description "
        f"of {what} differs from {ref.name} {ref.version} ({ref.short_hash}); restore that description."
    )
    return "restore_description", why, new


def rule_proposals(cluster: dict[str, Any], harness: Harness, references: Sequence[Harness] = ()) -> list[Candidate]:
    """Rule-based candidates for one cluster (``Cluster.to_dict()``), first reference that helps wins."""
    out: list[Candidate] = []
    if cluster.get("kind") == "missing_tool_call":
        restored = next((c for ref in references if (c := _restore_rule(cluster, harness, ref))), None)
        added = None if restored else _add_rule(cluster, harness)
        out += [c for c in (restored, added) if c]
    described = next((c for ref in references if (c := _restore_description(cluster, harness, ref))), None)
    if described:
        out.append(described)
    return out


# -- LLM ------------------------------------------------------------------------------------------------
_LLM_SYSTEM = (
    "You maintain the harness (skills, tools, prompts) of a live-commerce AI agent. Propose the smallest "
    "edit that fixes the failure cluster. Answer with one JSON object only: "
    '{"rationale": "<why, one paragraph>", "files": {"<relative path>": "<full new file text>"}}. '
    "Editable paths: harness.yaml, skills/<name>/SKILL.md, tools/<name>.yaml, prompts/<block>.md."
)


def _llm_prompt(cluster: dict[str, Any], files: dict[str, str]) -> str:
    example = (cluster.get("examples") or [{}])[0]
    shown = {k: example.get(k) for k in ("comments", "skills_loaded", "tool_calls", "reply", "reasons")}
    part = cluster.get("key", {}).get("part", "")
    relevant = {p: t for p, t in files.items() if p == part or p.startswith(("skills/", "tools/"))}
    return "\n\n".join(
        [
            f"Failure cluster: {json.dumps({k: cluster.get(k) for k in ('key', 'kind', 'n', 'reasons')})}",
            f"Representative trace: {json.dumps(shown, ensure_ascii=False)}",
            *[f"--- {p}\n{t}" for p, t in relevant.items()],
        ]
    )


def _parse_json(text: str) -> dict[str, Any] | None:
    start, end = text.find("{"), text.rfind("}")
    try:
        value = json.loads(text[start : end + 1]) if start >= 0 < end else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def llm_proposal(
    cluster: dict[str, Any], base_folder: str | Path, model: Model, *, max_new_tokens: int = 1024
) -> Candidate:
    """Ask ``model`` for an edit; returns a validated candidate or raises :class:`HatError` saying
    why the answer was unusable (not JSON, no files, or an invalid harness)."""
    from hat.evolve.lineage import harness_files

    files = harness_files(base_folder)
    messages = [{"role": "system", "content": _LLM_SYSTEM}, {"role": "user", "content": _llm_prompt(cluster, files)}]
    answer = model.generate(messages, GenerationConfig(max_new_tokens=max_new_tokens)).text
    data = _parse_json(answer)
    edits = data.get("files") if data else None
    if not isinstance(edits, dict) or not edits or not all(isinstance(v, str) for v in edits.values()):
        raise HatError(f"the model's answer has no usable 'files' object: {answer[:200]!r}")
    new = edit_files(base_folder, {str(k): v for k, v in edits.items()})
    return "llm", str(data.get("rationale", "")).strip() if data else "", new


# -- one cluster -> stored proposals ------------------------------------------------------------------
def propose(
    lineage: Lineage,
    cluster: dict[str, Any],
    *,
    base: str | None = None,
    references: Sequence[Harness] = (),
    model: Model | None = None,
    model_name: str = "llm",
) -> tuple[list[Proposal], list[str]]:
    """Proposals for ``cluster`` on the lineage version ``base`` (default: the head), and notes on
    the candidates that could not be made. References: the given harnesses, then the ancestors of
    ``base`` in the lineage (a rule an earlier version had is a rule to restore)."""
    store = ProposalStore(lineage)
    version = lineage.get(base) if base else lineage.head()
    harness = lineage.load(version.hash)
    ancestors = [lineage.load(v.hash) for v in lineage.chain(version.hash)[1:]]
    candidates = rule_proposals(cluster, harness, [*references, *ancestors])
    notes = [] if candidates else [f"no rule-based fix for a {cluster.get('kind')} cluster here"]
    if model is not None:
        try:
            candidates.append(llm_proposal(cluster, lineage.folder(version.hash), model))
        except HatError as exc:
            notes.append(f"{model_name}: {exc}")
    proposals = []
    for kind, why, new in candidates:
        proposer = model_name if kind == "llm" else f"rules:{kind}"
        try:
            proposals.append(store.add(harness, new, kind=kind, proposer=proposer, rationale=why, cluster=cluster))
        except HatError as exc:
            notes.append(f"{proposer}: {exc}")
    return proposals, notes
