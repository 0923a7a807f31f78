"""The review page in a real headless browser: Chromium (Debian's package) driven by Playwright.

The review server runs with uvicorn on an ephemeral port in a thread of this process; the browser
opens the login address, finds the proposal, takes a screenshot (into ``$HAT_EVOLVE_SCREENSHOT``
when set, e.g. ``reports/evolve/review.png``), clicks Approve, and the test checks that the lineage
recorded the new version. ``make test-browser`` installs Chromium and Playwright; Playwright uses
the installed Chromium (``executable_path``), so no browser is downloaded.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hat.evolve import Lineage, ProposalStore, evaluate_proposal
from hat.evolve.diagnose import diagnose, judged_from_results
from hat.evolve.propose import propose
from hat.evolve.review import create_review_app
from hat.harness.loader import load_harness, resolve_harness_path

pytestmark = pytest.mark.browser
TOKEN = "browser-test-token"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium installed (make test-browser installs it)")


@pytest.fixture()
def proposal(tmp_path: Path) -> tuple[Lineage, str]:
    """A lineage whose head lost the hand-off rule, and the evaluated proposal that restores it."""
    from hat.eval.runner import run_cases
    from hat.eval.suites import build_cases

    folder = tmp_path / "shop"
    shutil.copytree(resolve_harness_path("livestream"), folder)
    skill = folder / "skills/after-sales-handoff/SKILL.md"
    skill.write_text("\n".join(x for x in skill.read_text().splitlines() if "handoff_to_service" not in x) + "\n")
    lineage = Lineage(tmp_path / "shop.lineage")
    lineage.init(folder)
    cases = build_cases("t1", n=80, seed=3, harness=str(folder))
    result = run_cases("t1", cases, "rule-reader", seed=3)
    cluster = diagnose(judged_from_results(result.cases, [c.episode for c in cases], load_harness(folder)))
    proposals, _ = propose(lineage, cluster.clusters[0].to_dict(), references=[load_harness("livestream")])
    evaluate_proposal(lineage, proposals[0].id, model="rule-reader", n=80, seed=3)
    return lineage, proposals[0].id


@pytest.fixture()
def server(proposal: tuple[Lineage, str]) -> Iterator[str]:
    import uvicorn

    lineage, _ = proposal
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_review_app(lineage, TOKEN)
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started, "the review server did not start"
    try:
        yield f"http://localhost:{port}"
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_approve_in_headless_chromium_records_the_version(proposal, server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (make test-browser)")
    lineage, pid = proposal
    shot = Path(os.environ.get("HAT_EVOLVE_SCREENSHOT") or tmp_path / "review.png")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{server}/login?token={TOKEN}")
            page.click(f"a[href='/proposals/{pid}']")
            page.wait_for_selector("#evaluation")
            assert page.inner_text("#status") == "pending"
            assert "handoff_to_service" in page.inner_text("table.diff")
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
            page.fill("#approve-note", "restores the hand-off rule")
            page.click("#approve")
            page.wait_for_selector("#version")
            assert page.inner_text("#status") == "approved"
            shown = page.inner_text("#version")
        finally:
            browser.close()
    versions = [v for v in lineage.versions().values() if v.proposal_id == pid]
    assert len(versions) == 1 and versions[0].short == shown
    assert versions[0].note == "restores the hand-off rule" and versions[0].status == "approved"
    assert ProposalStore(lineage).status(pid) == "approved"
    assert shot.read_bytes()[:4] == b"\x89PNG"
