"""Results name the code that produced them (``hat.provenance``): evaluation summaries and
``sft_result.json`` carry the hat version, the imported package folder and its git commit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from typer.testing import CliRunner

import hat
from hat import provenance
from hat.cli.main import app


def test_code_version_names_the_imported_checkout() -> None:
    code = provenance.code_version()
    folder = Path(hat.__file__).resolve().parent
    assert code["hat"] == hat.__version__ and code["source"] == str(folder)
    git = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if git.returncode == 0:  # a checkout (CI clones one): the commit and a dirty flag
        assert code["commit"] == git.stdout.strip() and isinstance(code["dirty"], bool)
    else:  # an installed wheel
        assert code["commit"] is None and code["dirty"] is None


def test_code_version_without_git(monkeypatch) -> None:
    monkeypatch.setattr(provenance, "_git", lambda folder, *args: None)
    provenance.code_version.cache_clear()
    try:
        code = provenance.code_version()
        assert code["commit"] is None and code["dirty"] is None and code["hat"] == hat.__version__
    finally:
        provenance.code_version.cache_clear()


def test_eval_summary_records_the_code(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", "--suite", "t1", "--model", "oracle", "--n", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (summary,) = tmp_path.glob("t1_*[!n].json")  # the summary, not <stem>.run.json
    assert json.loads(summary.read_text())["code"] == provenance.code_version()
