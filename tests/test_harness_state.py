"""Harness state: stable hash, save/load round trip, structural diff."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from hat.harness import diff_harness, load_harness, save_harness


def test_hash_is_stable_across_processes(mini_harness_dir):
    h = load_harness(mini_harness_dir)
    code = f"from hat.harness import load_harness; print(load_harness({str(mini_harness_dir)!r}).content_hash())"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    other = other.stdout.strip()
    assert other == h.content_hash()
    assert len(h.content_hash()) == 64


def test_hash_ignores_location_but_not_content(mini_harness_dir, tmp_path):
    h = load_harness(mini_harness_dir)
    copy = save_harness(h, tmp_path / "copy")
    again = load_harness(copy)
    assert again == h
    assert again.content_hash() == h.content_hash()
    edited = h.replace(limits=dataclasses.replace(h.limits, reply_max_chars=61))
    assert edited.content_hash() != h.content_hash()


def test_save_refuses_non_empty_folder(mini_harness_dir, tmp_path):
    import pytest

    from hat.errors import HarnessError

    h = load_harness(mini_harness_dir)
    with pytest.raises(HarnessError, match="not empty"):
        save_harness(h, mini_harness_dir)


def test_diff_reports_added_removed_renamed_changed(mini_harness_dir):
    a = load_harness(mini_harness_dir)
    price = a.tool("get_price")
    boom = a.tool("boom")
    assert price is not None and boom is not None
    renamed = dataclasses.replace(price, name="price_lookup")
    changed = dataclasses.replace(boom, description="Fails, loudly.")
    new_tool = dataclasses.replace(boom, name="extra", description="A brand-new tool.")
    kept = [t for t in a.tools if t.name not in ("get_price", "boom", "hang")]
    tools = (*kept, renamed, changed, new_tool)
    skills = tuple(s for s in a.skills if s.name != "chit-chat")
    b = a.replace(tools=tools, skills=skills, pipeline=tuple(reversed(a.pipeline)))
    d = diff_harness(a, b)
    assert ("get_price", "price_lookup") in d.tools.renamed
    assert "boom" in d.tools.changed
    assert "extra" in d.tools.added
    assert "hang" in d.tools.removed
    assert d.skills.removed == ("chit-chat",)
    assert d.pipeline_changed
    assert not d.empty
    assert diff_harness(a, a).empty
