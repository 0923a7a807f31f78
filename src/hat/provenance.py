"""Which code produced a result: the ``hat`` version, the folder it was imported from, and that
folder's git commit (with a dirty flag) when it is a checkout. Written into evaluation summaries and
``sft_result.json``, so a figure can be traced to its code even when several checkouts share one
environment (an editable install imports whichever checkout it was installed from)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["code_version"]


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """``{"hat": version, "source": package folder, "commit": sha | None, "dirty": bool | None}``;
    ``commit``/``dirty`` are ``None`` outside a git checkout (an installed wheel) or without git."""
    import hat

    folder = Path(hat.__file__).resolve().parent
    commit = _git(folder, "rev-parse", "HEAD")
    status = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", ".") if commit else None
    return {
        "hat": hat.__version__,
        "source": str(folder),
        "commit": commit,
        "dirty": None if status is None else bool(status),
    }
