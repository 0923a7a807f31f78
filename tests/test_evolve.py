"""The harness evolution loop end to end on the simulator, and its parts.

The scripted cycle: a copy of the livestream harness loses the after-sales rule that says to call
``handoff_to_service`` → T1 with the ``rule-reader`` policy (which does only what the skills' rules
say) → diagnose finds the after-sales cluster → the rule-based proposal restores the rule → it is
approved through the review API → the gate promotes it. A proposal that also breaks the pricing
skill is blocked by the gate. Everything runs on simulator policies (no model is loaded).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from hat.cli.main import app
from hat.errors import HarnessValidationError, HatError
from hat.eval.runner import run_cases
from hat.eval.suites import Case, build_cases
from hat.evolve import Lineage, ProposalStore, diagnose, gate, llm_proposal, paired_bootstrap, rule_proposals
from hat.evolve.diagnose import judged_from_results, load_traces
from hat.evolve.review import COOKIE, create_review_app
from hat.evolve.text import centroid_order, tfidf, threshold_clusters
from hat.harness.loader import load_harness, resolve_harness_path
from hat.harness.trace import write_traces
from hat.models.base import Generation

runner = CliRunner()
N, SEED = 120, 7
TOKEN = "review-token-for-tests"
HANDOFF_RULE = "Call `handoff_to_service`"


def _drop_lines(file: Path, needle: str) -> None:
    file.write_text("\n".join(line for line in file.read_text().splitlines() if needle not in line) + "\n")


def _defective_copy(root: Path) -> Path:
    """The livestream harness with the after-sales rule about the hand-off masked."""
    folder = root / "shop"
    shutil.copytree(resolve_harness_path("livestream"), folder)
    _drop_lines(folder / "skills/after-sales-handoff/SKILL.md", "handoff_to_service")
    return folder


def _hat(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def _client(lineage: Lineage) -> TestClient:
    return TestClient(create_review_app(lineage, TOKEN, allowed_hosts=["testserver"]))


API = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}


@pytest.fixture(scope="module")
def cycle(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The defective harness, its lineage, a T1 run through `hat eval --out`, and the diagnosis."""
    root = tmp_path_factory.mktemp("evolve")
    folder = _defective_copy(root)
    assert runner.invoke(app, ["evolve", "init", str(folder)]).exit_code == 0
    run = _hat(
        "eval", "--suite", "t1", "--model", "rule-reader", "--harness", folder, "--n", N, "--seed", SEED,
        "--out", root / "base", "--json",
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    diag = runner.invoke(
        app, ["evolve", "diagnose", "--eval-report", str(root / "base"), "--out", str(root / "diag.json"), "--json"]
    )
    assert diag.exit_code == 0, diag.output
    return {
        "root": root,
        "folder": folder,
        "lineage": Lineage(root / "shop.lineage"),
        "summary": json.loads(run.stdout.strip().splitlines()[-1]),
        "diagnosis": json.loads(diag.stdout),
    }


# -- the scripted cycle ------------------------------------------------------------------------------
def test_defect_hurts_the_rule_reader_and_not_the_oracle(cycle):
    by_intent = cycle["summary"]["by_intent"]
    assert by_intent["after_sales"]["tool_rationality"] == 0.0
    assert all(row["score"] == 100.0 for intent, row in by_intent.items() if intent != "after_sales")
    cases = build_cases("t1", n=40, seed=SEED, harness=str(cycle["folder"]))
    assert run_cases("t1", cases, "oracle", seed=SEED).score() == 100.0  # the oracle ignores rules


def test_diagnose_ranks_the_after_sales_cluster_first(cycle):
    d = cycle["diagnosis"]
    top = d["clusters"][0]
    assert top["key"]["intent"] == "after_sales" and top["kind"] == "missing_tool_call"
    assert top["key"]["tool"] == "handoff_to_service"
    assert top["key"]["part"] == "skills/after-sales-handoff/SKILL.md"
    assert top["key"]["dimension"] in ("effectiveness", "tool_rationality")
    n_after_sales = cycle["summary"]["by_intent"]["after_sales"]["n"]
    assert top["n"] == n_after_sales and len(d["clusters"]) == 2  # effectiveness and tool rationality
    assert top["impact"] == pytest.approx(100 * n_after_sales / 4 / N, abs=1e-3)
    example = top["examples"][0]
    assert example["intent"] == "after_sales"
    assert not any(c["name"] == "handoff_to_service" for c in example["tool_calls"])
    assert d["themes"] and any("handoff_to_service" in t["terms"] for t in d["themes"])


def test_full_cycle_restore_approve_gate_promote(cycle):
    root, folder, lineage = cycle["root"], cycle["folder"], cycle["lineage"]
    proposed = _hat(
        "evolve", "propose", "--harness", folder, "--diagnosis", root / "diag.json", "--reference", "livestream",
        "--evaluate", "--model", "rule-reader", "--n", N, "--seed", SEED, "--json",
    )  # fmt: skip
    assert proposed.exit_code == 0, proposed.output
    proposal = json.loads(proposed.stdout)["proposals"][0]
    assert proposal["kind"] == "restore_rule" and proposal["proposer"] == "rules:restore_rule"
    assert re.search(r"^\+2\. Call `handoff_to_service`", proposal["patch"], re.M)
    assert proposal["evaluation"]["decision"] == "promoted"  # the preview the review page shows

    client = _client(lineage)
    page = client.get(f"/proposals/{proposal['id']}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert page.status_code == 200 and "handoff_to_service" in page.text and 'id="evaluation"' in page.text
    approved = client.post(f"/proposals/{proposal['id']}/approve", data={"note": "ok", "reviewer": "ana"}, headers=API)
    assert approved.status_code == 200, approved.text
    version = approved.json()["version"]
    recorded = lineage.get(version)
    assert recorded.status == "approved" and recorded.parent == lineage.root_version().hash
    assert recorded.reviewer == "ana" and recorded.proposal_id == proposal["id"]
    assert recorded.diff["skills"]["changed"] == ["after-sales-handoff"]

    gated = _hat(
        "evolve", "gate", version[:12], "--harness", folder, "--model", "rule-reader", "--suites", "t1,t3-prompt",
        "--n", N, "--seed", SEED, "--json",
    )  # fmt: skip
    assert gated.exit_code == 0, gated.output
    total = 2 * N * 2  # old and new on two suites: one progress step per episode, on stderr
    assert f"gate {version[:12]} · rule-reader: {total}/{total} (100%)" in gated.stderr
    result = json.loads(gated.stdout)
    assert result["decision"] == "promoted"
    target = next(c for c in result["cells"] if c["slice"].startswith("target:"))
    assert target["slice"] == "target:after_sales" and target["lo"] > 0
    assert {c["suite"] for c in result["cells"]} == {"t1", "t3-prompt"}
    assert lineage.head().hash == version and lineage.get(version).gate["decision"] == "promoted"

    log = runner.invoke(app, ["evolve", "log", "--harness", str(folder)])
    assert log.exit_code == 0 and version[:12] in log.output and "promoted" in log.output and "root" in log.output
    plot = root / "history.png"
    hist = runner.invoke(app, ["evolve", "history", "--harness", str(folder), "--out", str(plot), "--json"])
    assert hist.exit_code == 0, hist.output
    rows = json.loads(hist.stdout)
    assert [r["status"] for r in rows] == ["root", "promoted"] and rows[1]["score"] > rows[0]["score"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gate_blocks_a_proposal_that_breaks_another_intent(tmp_path):
    folder = _defective_copy(tmp_path)
    lineage = Lineage(tmp_path / "shop.lineage")
    lineage.init(folder)
    edited = tmp_path / "edited"
    shutil.copytree(folder, edited)
    (edited / "skills/after-sales-handoff/SKILL.md").write_text(
        (resolve_harness_path("livestream") / "skills/after-sales-handoff/SKILL.md").read_text()
    )
    _drop_lines(edited / "skills/pricing-discounts/SKILL.md", "`get_")  # the overreach: pricing loses its tools
    proposed = _hat(
        "evolve", "propose", "--harness", folder, "--from-folder", edited, "--rationale",
        "restore the hand-off, tidy pricing", "--json",
    )  # fmt: skip
    assert proposed.exit_code == 0, proposed.output
    pid = json.loads(proposed.stdout)["proposals"][0]["id"]
    approved = _client(lineage).post(f"/proposals/{pid}/approve", data={"note": "looks fine"}, headers=API)
    version = approved.json()["version"]
    gated = _hat(
        "evolve", "gate", version, "--harness", folder, "--model", "rule-reader", "--n", N, "--seed", SEED,
        "--target-intent", "after_sales", "--target-dimension", "tool_rationality", "--json",
    )  # fmt: skip
    assert gated.exit_code == 1, gated.output
    result = json.loads(gated.stdout)
    assert result["decision"] == "blocked"
    assert any("intent:discount" in r for r in result["reasons"])
    assert not any("did not improve" in r for r in result["reasons"])  # the target itself did improve
    assert lineage.get(version).status == "blocked" and lineage.head().hash == lineage.root_version().hash


# -- proposals ------------------------------------------------------------------------------------------
def _cluster(intent: str = "after_sales", tool: str = "handoff_to_service", skill: str = "after-sales-handoff") -> dict:
    key = {"dimension": "tool_rationality", "intent": intent, "part": f"skills/{skill}/SKILL.md"}
    return {"id": "c1", "key": key | {"tool": tool, "skill": skill}, "kind": "missing_tool_call", "n": 3}


def test_add_rule_without_a_reference_fixes_the_defect(tmp_path):
    harness = load_harness(_defective_copy(tmp_path))
    [(kind, why, new)] = rule_proposals(_cluster(), harness, references=[])
    assert kind == "add_rule" and "handoff_to_service" in why
    assert "`handoff_to_service`" in new.skill("after-sales-handoff").body
    episodes = [c.episode for c in build_cases("t1", n=N, seed=SEED) if c.episode.gold.intent == "after_sales"]
    scores = run_cases("t1", [Case(e, new) for e in episodes], "rule-reader", seed=SEED).dims()
    assert scores["tool_rationality"] == 100.0


def test_restore_rule_uses_the_current_tool_name(tmp_path):
    harness = load_harness(_defective_copy(tmp_path))
    renamed = harness.replace(
        tools=tuple(t.__class__(**{**t.__dict__, "name": "open_ticket"}) if t.name == "handoff_to_service" else t
                    for t in harness.tools)
    )  # fmt: skip
    [(kind, _, new)] = rule_proposals(_cluster(tool="open_ticket"), renamed, [load_harness("livestream")])
    assert kind == "restore_rule" and "Call `open_ticket`" in new.skill("after-sales-handoff").body


def test_restore_description_for_a_misleading_tool(tmp_path):
    harness = load_harness("livestream")
    misleading = harness.replace(
        tools=tuple(t.__class__(**{**t.__dict__, "description": "Do not use."}) if t.name == "get_price" else t
                    for t in harness.tools)
    )  # fmt: skip
    cluster = {"key": {"intent": "discount", "tool": "get_price", "skill": ""}, "kind": "irrelevant_tool", "n": 2}
    [(kind, _, new)] = rule_proposals(cluster, misleading, [harness])
    assert kind == "restore_description" and new.tool("get_price").description == harness.tool("get_price").description


class _StandIn:
    """A model that answers with fixed text (the LLM proposer's path without a server)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.seen: list = []

    def generate(self, messages, config=None, *, cache_key=None) -> Generation:
        self.seen.append(messages)
        return Generation(text=self.text, prompt_tokens=0, completion_tokens=0, ttft_s=0.0)


def test_llm_proposal_is_validated(tmp_path):
    folder = _defective_copy(tmp_path)
    skill = "skills/after-sales-handoff/SKILL.md"
    fixed = (resolve_harness_path("livestream") / skill).read_text()
    model = _StandIn("Here you go:\n" + json.dumps({"rationale": "restore it", "files": {skill: fixed}}))
    kind, why, new = llm_proposal(_cluster(), folder, model)
    assert kind == "llm" and why == "restore it" and HANDOFF_RULE in new.skill("after-sales-handoff").body
    assert "after-sales-handoff" in model.seen[0][1]["content"]
    with pytest.raises(HatError, match="no usable 'files'"):
        llm_proposal(_cluster(), folder, _StandIn("I think you should add a rule."))
    with pytest.raises(HarnessValidationError, match="not an editable"):
        llm_proposal(_cluster(), folder, _StandIn(json.dumps({"files": {"hooks.py": "import os"}})))
    with pytest.raises(HarnessValidationError, match="front matter"):
        llm_proposal(_cluster(), folder, _StandIn(json.dumps({"files": {skill: "no front matter"}})))


# -- review page: trust and decisions --------------------------------------------------------------------
@pytest.fixture()
def pending(tmp_path) -> tuple[Lineage, str]:
    folder = _defective_copy(tmp_path)
    lineage = Lineage(tmp_path / "lin")
    lineage.init(folder)
    cluster = _cluster() | {"examples": [{"episode_id": "e1", "comments": ["<script>alert(1)</script>"]}]}
    from hat.evolve.propose import propose

    proposals, _ = propose(lineage, cluster, references=[load_harness("livestream")])
    return lineage, proposals[0].id


def test_review_needs_the_token_and_a_csrf_token(pending):
    lineage, pid = pending
    client = _client(lineage)
    assert client.get("/").status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/login?token=wrong").status_code == 401
    assert client.post(f"/proposals/{pid}/approve", data={"note": "x"}).status_code == 401
    login = client.get(f"/login?token={TOKEN}", follow_redirects=False)
    assert login.status_code == 303 and "samesite=strict" in login.headers["set-cookie"].lower()
    assert "httponly" in login.headers["set-cookie"].lower()
    client.cookies.set(COOKIE, TOKEN)
    page = client.get(f"/proposals/{pid}")
    assert page.status_code == 200 and "script-src" not in page.headers["content-security-policy"]
    assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;" in page.text
    refused = client.post(f"/proposals/{pid}/approve", data={"note": "x"})  # cookie but no CSRF token
    assert refused.status_code == 403 and ProposalStore(lineage).status(pid) == "pending"
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)
    done = client.post(f"/proposals/{pid}/approve", data={"note": "x", "csrf": csrf})
    assert done.status_code == 200 and 'id="version"' in done.text and ProposalStore(lineage).status(pid) == "approved"
    other_host = TestClient(create_review_app(lineage, TOKEN), base_url="http://evil.example")
    assert other_host.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 400


def test_reject_then_approve_is_a_conflict(pending):
    lineage, pid = pending
    client = _client(lineage)
    rejected = client.post(f"/proposals/{pid}/reject", data={"note": "not now"}, headers=API)
    assert rejected.json()["decision"] == "rejected"
    assert client.post(f"/proposals/{pid}/approve", data={}, headers=API).status_code == 409
    assert len(lineage.versions()) == 1 and lineage.reviews()[pid]["note"] == "not now"
    assert client.get("/proposals/nope", headers=API).status_code == 404


def test_edit_and_approve_validates_the_edit(pending):
    lineage, pid = pending
    client = _client(lineage)
    path = "skills/after-sales-handoff/SKILL.md"
    broken = client.post(f"/proposals/{pid}/edit", data={f"file:{path}": "no front matter"}, headers=API)
    assert broken.status_code == 422 and "front matter" in broken.text
    code = client.post(f"/proposals/{pid}/edit", data={"file:hooks.py": "import os"}, headers=API)
    assert code.status_code == 422 and len(lineage.versions()) == 1
    text = (ProposalStore(lineage).folder(pid) / path).read_text().replace("Apologise briefly", "Apologise once")
    ok = client.post(f"/proposals/{pid}/edit", data={f"file:{path}": text, "reviewer": "bo"}, headers=API)
    assert ok.status_code == 200 and ok.json()["edited"]
    version = lineage.get(ok.json()["version"])
    assert (
        "edited by bo" in version.proposer
        and "Apologise once" in lineage.load(version.hash).skill("after-sales-handoff").body
    )


# -- lineage, statistics, text ---------------------------------------------------------------------------
def test_lineage_init_is_idempotent_and_refuses_another_root(tmp_path):
    folder = _defective_copy(tmp_path)
    lineage = Lineage(tmp_path / "lin")
    root = lineage.init(folder)
    assert lineage.init(folder) == root and len(lineage.events()) == 1
    with pytest.raises(HatError, match="already starts at"):
        lineage.init("livestream")
    assert lineage.load(root.hash).content_hash() == root.hash  # the snapshot is the version
    with pytest.raises(HatError, match="root of the lineage"):
        gate(lineage, root.hash, model="rule-reader", n=4)


def test_paired_bootstrap_interval():
    rng = random.Random(0)
    assert paired_bootstrap([0.0] * 50, rng) == (0.0, 0.0, 0.0)
    diffs = [1.0] * 30 + [0.0] * 70
    mean, lo, hi = paired_bootstrap(diffs, random.Random(1))
    assert mean == pytest.approx(0.3) and 0.18 < lo < 0.3 < hi < 0.42
    assert paired_bootstrap(diffs, random.Random(1)) == (mean, lo, hi)  # seeded
    _, lo, hi = paired_bootstrap([-1.0, 1.0] * 20, random.Random(2))
    assert lo < 0 < hi


def test_hand_rolled_tfidf_equals_scikit_learn():
    pytest.importorskip("sklearn")
    texts = ["handoff_to_service not called", "get_price not called", "none of [pricing] loaded", "reply too long"]
    (ours, vocab_a), (theirs, vocab_b) = tfidf(texts, use_sklearn=False), tfidf(texts)
    assert vocab_a == vocab_b
    flat = [(a, b) for ra, rb in zip(ours, theirs, strict=True) for a, b in zip(ra, rb, strict=True)]
    assert all(a == pytest.approx(b, abs=1e-12) for a, b in flat)


def test_text_clustering_groups_similar_reasons():
    texts = ["handoff_to_service not called", "handoff_to_service not called", "reply too long", "reply far too long"]
    rows, _ = tfidf(texts, use_sklearn=False)
    labels = threshold_clusters(rows, 0.5)
    assert labels[0] == labels[1] and labels[2] == labels[3] and labels[0] != labels[2]
    assert centroid_order(rows[:3])[0] in (0, 1)


def test_diagnose_from_traces_and_grouping_keys(tmp_path):
    folder = _defective_copy(tmp_path)
    cases = build_cases("t1", n=60, seed=SEED, harness=str(folder))
    result = run_cases("t1", cases, "rule-reader", seed=SEED)
    write_traces(tmp_path / "traces.jsonl", [c.trace for c in result.cases])
    from hat.env.episode import write_episodes

    write_episodes(tmp_path / "episodes.jsonl", [c.episode for c in cases])
    judged, source = load_traces(tmp_path / "traces.jsonl", tmp_path / "episodes.jsonl", folder)
    assert len(judged) == 60 and source["skipped"] == 0
    by_intent = diagnose(judged, by=["intent", "kind"], text_backend="tfidf")
    assert by_intent.backend == "tfidf" and len(by_intent.clusters) == 1
    assert by_intent.clusters[0].key == {"intent": "after_sales", "kind": "missing_tool_call"}
    same = diagnose(judged_from_results(result.cases, [c.episode for c in cases], load_harness(folder)))
    assert [c.key for c in same.clusters] == [c.key for c in diagnose(judged).clusters]
    with pytest.raises(HatError, match="cannot group by"):
        diagnose(judged, by=["colour"])


def test_proposing_the_same_edit_twice_keeps_the_first(pending):
    lineage, pid = pending
    store = ProposalStore(lineage)
    first = store.get(pid)
    from hat.evolve.propose import propose

    again, _ = propose(lineage, first.cluster, references=[load_harness("livestream")])
    assert [p.id for p in again] == [pid] and store.get(pid).created_at == first.created_at


def test_importing_evolve_needs_no_web_plotting_or_text_extras():
    import subprocess
    import sys

    heavy = ("fastapi", "matplotlib", "sklearn", "wordllama", "uvicorn")
    code = f"import sys, hat.evolve; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
