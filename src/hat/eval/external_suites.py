"""``hat eval --suite ifeval|rotbench|bfcl``: external data through the same CLI and JSON shape.

``score`` is the suite's headline number (IFEval: prompt-level strict accuracy, as the report's T4;
RoTBench: content filling averaged over noise levels; BFCL: micro accuracy over items) and
``dims`` the rest, flattened (``clean.tool_selection``, ``simple_python``, ``inst_level_loose`` …).
``--hsa`` shows RoTBench/BFCL tools under held-out HSA names (scoring maps them back).

Cheap checks first: :func:`check_external` refuses a simulator policy (it has no room to play
here), reads and validates every data file the suite will use and checks the scorer's own
dependencies, all before :func:`run_external` loads a model - a bad ``--data`` costs a second,
not a minute of loading weights.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hat.errors import HatError
from hat.models import load_model

__all__ = ["EXTERNAL_SUITES", "check_external", "run_external"]

DEFAULT_DATA = {
    "ifeval": "../shared/data/ifeval/input_data.jsonl",
    "rotbench": "../shared/data/rotbench",
    "bfcl": "../shared/data/bfcl",
}
EXTERNAL_SUITES = tuple(DEFAULT_DATA)


def _ifeval(
    model: Any, data: str, n: int | None, hsa: bool, progress: Callable[[int, int], None], max_new_tokens: int
) -> tuple[float, dict[str, float], dict[str, Any]]:
    from hat.eval.external.ifeval import run_ifeval

    res = run_ifeval(model, data, limit=n, progress=progress, max_new_tokens=max_new_tokens)
    dims = {k: res[k] for k in ("prompt_level_strict", "inst_level_strict", "prompt_level_loose", "inst_level_loose")}
    return res["prompt_level_strict"], dims, res


def _rotbench(
    model: Any, data: str, n: int | None, hsa: bool, progress: Callable[[int, int], None], max_new_tokens: int
) -> tuple[float, dict[str, float], dict[str, Any]]:
    from hat.augment.foreign import foreign_renamer
    from hat.eval.external.rotbench import run_rotbench

    res = run_rotbench(
        model,
        data,
        limit=n,
        rename=foreign_renamer() if hsa else None,
        progress=progress,
        max_new_tokens=max_new_tokens,
    )
    dims = {
        f"{lv}.{m}": v[m]
        for lv, v in res["levels"].items()
        for m in ("tool_selection", "parameter_identification", "content_filling")
    }
    score = sum(v["content_filling"] for v in res["levels"].values()) / max(1, len(res["levels"]))
    return round(score, 2), dims, res


def _bfcl(
    model: Any, data: str, n: int | None, hsa: bool, progress: Callable[[int, int], None], max_new_tokens: int
) -> tuple[float, dict[str, float], dict[str, Any]]:
    from hat.augment.foreign import foreign_renamer
    from hat.eval.external.bfcl import run_bfcl

    res = run_bfcl(
        model,
        data,
        limit=n,
        rename=foreign_renamer() if hsa else None,
        progress=progress,
        max_new_tokens=max_new_tokens,
    )
    dims = {c: v["accuracy"] for c, v in res["categories"].items()}
    return res["overall_micro"], dims, res


RUNNERS = {"ifeval": _ifeval, "rotbench": _rotbench, "bfcl": _bfcl}


def _check_data(suite: str, data: str) -> int:
    from hat.eval.external import check_bfcl, check_ifeval, check_rotbench

    checks: dict[str, Callable[[str], int]] = {"ifeval": check_ifeval, "rotbench": check_rotbench, "bfcl": check_bfcl}
    return checks[suite](data)


def _refuse_policy(suite: str, model_spec: str) -> None:
    from hat.env.policies import POLICIES

    spec = model_spec.strip()
    if spec in POLICIES or spec.partition(":")[0] in ("oracle", "policy"):
        raise HatError(
            f"--model {spec} is a simulator policy: it answers only simulated episodes (t1, t2, t3-tool, "
            f"t3-prompt), and {suite} is external data with no simulated room. Pick a model instead: "
            "smollm2-hat, smollm2, hf:<path>, llamacpp:<gguf>, openai:<base_url>#<model> or scripted:<file>"
        )


def check_external(suite: str, model_spec: str, data: str | None = None) -> int:
    """Everything about an external run that can be checked without a model: a known suite, a
    model rather than a simulator policy, readable and well-formed data. Raises :class:`HatError`
    saying what to change; returns the number of items the data holds."""
    if suite not in RUNNERS:
        raise HatError(f"unknown external suite {suite!r}; known: {', '.join(RUNNERS)}")
    _refuse_policy(suite, model_spec)
    return _check_data(suite, data or DEFAULT_DATA[suite])


def run_external(
    suite: str,
    model_spec: str,
    *,
    data: str | None = None,
    n: int | None = None,
    hsa: bool = False,
    out_dir: Path | None = None,
    progress: Callable[[int, int], None] = lambda done, total: None,
    max_new_tokens: int = 256,
    command: str = "",
    checked: bool = False,
    load_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one external suite; ``n`` limits items (per level/category for RoTBench/BFCL). The
    checks of :func:`check_external` run before the model is loaded (``checked``: the caller
    has just run them). ``load_options`` go to :func:`~hat.models.load_model` (a local model's
    ``dtype``, ``batch_invariant``) and into the summary."""
    if not checked:
        check_external(suite, model_spec, data)
    model = load_model(model_spec, **(load_options or {}))
    start = time.perf_counter()
    score, dims, raw = RUNNERS[suite](model, data or DEFAULT_DATA[suite], n, hsa, progress, max_new_tokens)
    summary = {
        "suite": suite + ("+hsa" if hsa else ""),
        "model": model_spec,
        "n": _count(raw),
        "score": score,
        "dims": dims,
        "wall_s": round(time.perf_counter() - start, 1),
        "max_new_tokens": max_new_tokens,
        "data": data or DEFAULT_DATA[suite],
        "command": command,
    }
    if load_options:
        summary["load_options"] = dict(load_options)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{summary['suite']}_{''.join(c if c.isalnum() or c in '-_.' else '_' for c in model_spec)}"
        (out_dir / f"{stem}.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
        with open(out_dir / f"{stem}_cases.jsonl", "w", encoding="utf-8") as fh:
            for record in raw.get("records", []):
                fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    return summary


def _count(raw: dict[str, Any]) -> int:
    return len(raw.get("records", []))
