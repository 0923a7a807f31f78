"""Configuration of ``hat datagen-general``: which general prompts, which model answers them, how.

A :class:`ReplayConfig` round-trips through YAML like :class:`~hat.train.DatagenConfig`, and the
resolved config is written next to the dataset (``config.yaml``), where a resumed run checks it.

- ``prompts``: the general-instruction prompts (``id``, ``source``, ``prompt``, ``reference``); by
  default the project's ``../shared/data/general/prompts.jsonl``, the one *training-only* external
  set (never evaluated on). A relative path is tried against the current folder, then against the
  repository root, so the default works from either; the string is stored as given.
- ``n`` prompts are drawn with ``seed`` from those whose ``source`` is not in ``exclude_sources``.
- ``model`` answers them: the *base* model (``smollm2``) by default, because replay is
  self-distillation (see :mod:`hat.train.replay`).
- ``max_new_tokens`` bounds an answer; an answer cut by it is dropped unless ``keep_truncated``
  (kept, it is trained without its end-of-turn token).
- ``batch_size`` prompts go through ``generate_batch`` at once. It changes speed, not the data
  (up to the last float bits of padded matmuls), so a resumed run may use another batch size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from hat.errors import HatError

__all__ = ["DEFAULT_PROMPTS", "ReplayConfig", "resolve_prompts_path"]

DEFAULT_PROMPTS = "../shared/data/general/prompts.jsonl"
_REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass
class ReplayConfig:
    """Everything that decides a replay dataset (``out_dir`` aside); fields: see the module docstring."""

    prompts: str = DEFAULT_PROMPTS
    n: int = 600
    seed: int = 0
    model: str = "smollm2"
    dtype: str = "auto"
    max_new_tokens: int = 384
    batch_size: int = 16
    keep_truncated: bool = False
    exclude_sources: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.prompts = str(self.prompts)
        self.exclude_sources = list(self.exclude_sources or [])
        self.validate()

    def validate(self) -> None:
        """Raise :class:`HatError` naming each bad field and its valid range."""
        problems = [
            "n must be >= 1" if self.n < 1 else "",
            "seed must be >= 0" if self.seed < 0 else "",
            "max_new_tokens must be >= 1" if self.max_new_tokens < 1 else "",
            "batch_size must be >= 1" if self.batch_size < 1 else "",
            "model must be a model spec (e.g. smollm2)" if not self.model.strip() else "",
            "dtype must be auto, bfloat16 or float32" if self.dtype not in ("auto", "bfloat16", "float32") else "",
        ]
        problems = [p for p in problems if p]
        if problems:
            raise HatError("invalid replay config: " + "; ".join(problems))

    def same_data(self, other: ReplayConfig) -> list[str]:
        """The fields (``batch_size`` aside) where ``other`` would make different data."""
        mine, theirs = self.to_dict(), other.to_dict()
        return sorted(k for k in mine if k != "batch_size" and mine[k] != theirs[k])

    # -- YAML -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplayConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise HatError(f"unknown replay config key(s) {unknown}; known: {', '.join(sorted(known))}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> ReplayConfig:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise HatError(f"{path}: a replay config is a YAML mapping of field: value")
        return cls.from_dict(data)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=True), encoding="utf-8")
        return path

    def with_overrides(self, **changes: Any) -> ReplayConfig:
        """A copy with the given fields changed; ``None`` values are ignored (unset CLI options)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def resolve_prompts_path(prompts: str | Path) -> Path:
    """The prompts file: ``prompts`` as given, else (if relative) against the repository root."""
    path = Path(prompts).expanduser()
    candidates = [path] if path.is_absolute() else [path, _REPO_ROOT / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = ", ".join(str(c.resolve()) for c in candidates)
    raise HatError(
        f"no general prompts file at {prompts} (tried {tried}); pass --prompts FILE.jsonl "
        "(fields id, source, prompt), e.g. the project's ../shared/data/general/prompts.jsonl"
    )
