"""What HAT's three TRL config subclasses share: YAML files, the bf16 rule and the LoRA config.

:class:`~hat.train.sft_config.HatSFTConfig`, :class:`~hat.train.opd_config.HatOPDConfig` and
:class:`~hat.train.rl_config.HatRLConfig` subclass three different TRL configs (``SFTConfig``,
``DistillationConfig``, ``GRPOConfig``) and declare their own fields with their own defaults, so
what they share is behaviour only. It lives in :class:`YamlConfigMixin`, a plain class with no
fields (TRL's dataclass machinery sees nothing of it), listed first among the bases so that its
methods are found before TRL's.

The files: the resolved config is written next to every output so a run can be reproduced, and it
must reload into the same config. ``to_dict`` (transformers) masks every ``*_token`` field; the
non-secret ones (``eos_token``, ``pad_token``) are put back and the secrets (``hub_token``) left
out. A field a TRL config derives and refuses to be given as well (``yaml_derived``) is left out
too. Unknown keys are an error that names the classes listing the fields, so a typo never trains
silently with a default.

This module imports neither TRL nor torch at import time: the config modules do.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

import yaml

from hat.errors import HatError

__all__ = ["SECRETS", "LoraFields", "YamlConfigMixin", "bf16_supported", "lora_config"]

SECRETS = ("hub_token",)
"""Config fields never written to a file."""


def bf16_supported() -> bool:
    """Whether a CUDA device with bf16 is there: the training configs' ``bf16=None`` resolves to this
    (on CPU, bf16 autocast is slower and lossy)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


class YamlConfigMixin:
    """YAML files for a TRL config subclass (see the module docstring).

    ``config_kind``: how error messages name the config (``SFT``); ``yaml_derived``: fields left out
    of the file because TRL derives them and refuses a config that sets them too."""

    config_kind: ClassVar[str]
    yaml_derived: ClassVar[tuple[str, ...]] = ()

    if TYPE_CHECKING:

        def to_dict(self) -> dict[str, Any]: ...

    def to_yaml_dict(self) -> dict[str, Any]:
        """Every init field with its resolved value: masked ``*_token`` fields put back, secrets and
        ``yaml_derived`` fields left out, values made plain (JSON) types."""
        data = self.to_dict()
        for key in [k for k in data if k.endswith("_token")]:
            data[key] = getattr(self, key)
        for key in (*SECRETS, *self.yaml_derived):
            data.pop(key, None)
        plain: dict[str, Any] = json.loads(json.dumps(data, default=str))
        return plain

    def save_yaml(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(yaml.safe_dump(self.to_yaml_dict(), sort_keys=True), encoding="utf-8")
        return path

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> Self:
        """Load a config file; ``overrides`` (``None`` values ignored) win over the file."""
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise HatError(f"{path}: an {cls.config_kind} config is a YAML mapping of field: value")
        return cls.from_dict({**data, **{k: v for k, v in overrides.items() if v is not None}})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The config of ``data``; a key that is no init field is an error naming where the fields are."""
        known = {f.name for f in fields(cls) if f.init}  # type: ignore[arg-type]  # subclasses are dataclasses
        unknown = sorted(set(data) - known)
        if unknown:
            where = f"{cls.__name__} / {_trl_base(cls)}"
            raise HatError(f"unknown {cls.config_kind} config key(s) {unknown}; see {where} for the fields")
        return cls(**data)


def _trl_base(cls: type) -> str:
    """``trl.SFTConfig`` for :class:`~hat.train.sft_config.HatSFTConfig`: the TRL config it extends."""
    base = next((c for c in cls.__mro__ if c.__module__.partition(".")[0] == "trl"), None)
    return f"trl.{base.__name__}" if base is not None else "TRL's config"


class LoraFields(Protocol):
    """The LoRA fields every training config has."""

    @property
    def lora_r(self) -> int: ...

    @property
    def lora_alpha(self) -> int: ...

    @property
    def lora_dropout(self) -> float: ...

    @property
    def lora_target_modules(self) -> list[str] | str: ...


def lora_config(config: LoraFields) -> Any:
    """PEFT's ``LoraConfig`` for a new adapter on a causal LM, from the config's ``lora_*`` fields."""
    from peft import LoraConfig

    return LoraConfig(
        task_type="CAUSAL_LM",
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.lora_target_modules,
    )
