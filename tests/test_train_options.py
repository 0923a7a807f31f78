"""The options of ``hat train sft``, ``hat datagen`` and ``hat datagen-general`` against their configs.

Each option that sets a config field must name a real field and end its help with that field's real
default, read here from the dataclass itself (``HatSFTConfig``, ``DatagenConfig``, ``ReplayConfig``)
and parsed back from the help text, so a default typed by hand into a help string, or a default
changed in one place only, fails here. ``hat --help`` must not import TRL to say so.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from hat.cli.main import app
from hat.cli.train_cmd import DATAGEN_OPTIONS, REPLAY_OPTIONS, SFT_OPTIONS, OptionTable
from hat.train.datagen_config import DatagenConfig
from hat.train.defaults import SFT
from hat.train.replay_config import ReplayConfig

NOT_CONFIG = {"config", "as_json"}  # options every command has that set no config field
STATED = re.compile(r"\((?:default: (?P<value>[^()]+)|required, or (?P<field>\w+) in --config)\)$")


def _defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.init and f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.init and f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _command(*path: str) -> Any:
    """A command of ``hat`` as click builds it (typer ships its own copy of click)."""
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


@pytest.fixture(scope="module")
def sft_config() -> type:
    pytest.importorskip("trl")
    from hat.train.sft_config import HatSFTConfig

    return HatSFTConfig


@pytest.fixture(scope="module")
def commands(sft_config: type) -> list[tuple[Any, OptionTable, type, set[str]]]:
    """``(command, its option table, its config class, its options that set no field)``."""
    return [
        (_command("train", "sft"), SFT_OPTIONS, sft_config, NOT_CONFIG),
        (_command("datagen"), DATAGEN_OPTIONS, DatagenConfig, NOT_CONFIG | {"out_dir"}),
        (_command("datagen-general"), REPLAY_OPTIONS, ReplayConfig, NOT_CONFIG | {"out_dir"}),
    ]


def test_every_option_sets_a_real_field_of_its_config(commands: list) -> None:
    for command, table, config, not_config in commands:
        names = {p.name for p in command.params}
        assert names - not_config == set(table.options), command.name
        init_fields = {f.name for f in dataclasses.fields(config) if f.init}
        assert {spec.field for spec in table.options.values()} <= init_fields, command.name


def test_help_states_the_dataclass_default(commands: list, sft_config: type) -> None:
    from trl import SFTConfig

    trl_defaults = _defaults(SFTConfig)
    checked = 0
    for command, table, config, _ in commands:
        defaults = _defaults(config)
        for param in command.params:
            if param.name not in table.options:
                continue
            spec = table.options[param.name]
            help_text = param.help or ""
            assert help_text.count("(default") + help_text.count("(required") == 1, help_text
            stated = STATED.search(help_text)
            assert stated, f"{command.name} --{param.name}: help does not end with its default: {help_text!r}"
            if stated["field"]:
                assert stated["field"] == spec.field
                continue
            value, default = stated["value"], defaults[spec.field]
            if value == "TRL's":  # inherited unchanged, not copied
                assert config is sft_config and spec.field not in dataclasses.asdict(SFT)
                assert default == trl_defaults[spec.field], spec.field
            else:
                _assert_states(value, default, param, spec.unset)
            checked += 1
    assert checked >= 40


def _assert_states(value: str, default: Any, param: Any, unset: str) -> None:
    """``value`` (as the help words it) is ``default`` (the dataclass's)."""
    where = f"{param.name}: help says {value!r}, the config's default is {default!r}"
    if param.is_flag and not param.secondary_opts:
        assert value == "off" and not default, where  # a lone on-flag
    elif default is None or (isinstance(default, str | list | dict) and not default):
        assert value == unset, where
    elif param.is_flag:
        assert value in param.opts + param.secondary_opts and (value in param.opts) is default, where
    elif isinstance(default, dict):
        assert {k: float(v) for k, v in (item.split("=") for item in value.split(", "))} == default, where
    elif isinstance(default, list):
        assert value.split(", ") == default, where
    elif isinstance(default, int | float):
        assert float(value) == default, where
    else:
        assert value == default, where


def test_the_defaults_module_holds_every_default_hat_changes(sft_config: type) -> None:
    from trl import SFTConfig

    ours, trl_defaults = _defaults(sft_config), _defaults(SFTConfig)
    changed = {k for k, v in ours.items() if k not in trl_defaults or trl_defaults[k] != v}
    assert changed <= set(dataclasses.asdict(SFT)), "a HatSFTConfig default is not in hat.train.defaults"
    assert {k: ours[k] for k in dataclasses.asdict(SFT)} == dataclasses.asdict(SFT)


def test_options_become_config_fields(tmp_path: Path, sft_config: type) -> None:
    from hat.cli.train_cmd import _sft_config

    params = {name: None for name in SFT_OPTIONS.options} | {"resume": False, "fixed_harness": False}
    params |= {"data": tmp_path / "d", "out_dir": tmp_path / "o", "lr": 1e-3, "lora": False, "resume": True}
    overrides = SFT_OPTIONS.overrides(params)
    assert overrides == {
        "data": str(tmp_path / "d"), "output_dir": str(tmp_path / "o"), "learning_rate": 1e-3,
        "use_lora": False, "resume_from_checkpoint": "latest",
    }  # fmt: skip
    config = _sft_config(None, overrides)
    assert (config.learning_rate, config.use_lora, config.max_length) == (1e-3, False, SFT.max_length)

    given = {name: None for name in DATAGEN_OPTIONS.options} | {"n": 7, "threshold": ["accuracy=0.5"], "fmt": []}
    assert DATAGEN_OPTIONS.overrides(given) == {"n_episodes": 7, "thresholds": {"accuracy": 0.5}}


HELP_ONLY = """
import json, sys
from typer.testing import CliRunner
from hat.cli.main import app
result = CliRunner().invoke(app, ["train", "sft", "--help"], env={"COLUMNS": "500"})
heavy = [m for m in ("trl", "transformers", "torch", "peft", "hat.env", "hat.train.datagen") if m in sys.modules]
print(json.dumps({"code": result.exit_code, "help": result.stdout, "heavy": heavy}))
"""


def test_sft_help_shows_defaults_without_importing_trl() -> None:
    proc = subprocess.run([sys.executable, "-c", HELP_ONLY], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["code"] == 0 and shown["heavy"] == []
    assert f"(default: {SFT.learning_rate:g})" in shown["help"] and f"(default: {SFT.max_length})" in shown["help"]
