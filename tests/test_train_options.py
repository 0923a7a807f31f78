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
from hat.errors import HatError
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


# -- what hat train sft / opd / rl share ----------------------------------------------------------
def _stage_config(name: str) -> tuple[Any, str]:
    """An instance of the stage's config and the TRL config it extends (TRL imported only here)."""
    pytest.importorskip("trl")
    if name == "sft":
        from hat.train.sft_config import HatSFTConfig

        return HatSFTConfig(data="d"), "trl.SFTConfig"
    if name == "opd":
        from hat.train.opd_config import HatOPDConfig

        return HatOPDConfig(model="m"), "trl.DistillationConfig"
    from hat.train.rl_config import HatRLConfig

    return HatRLConfig(), "trl.GRPOConfig"


@pytest.mark.parametrize("stage", ["sft", "opd", "rl"])
def test_every_stage_config_round_trips_through_yaml_without_secrets(stage: str, tmp_path: Path) -> None:
    from hat.train.trl_configs import lora_config

    config, trl_name = _stage_config(stage)
    config.hub_token = "hf_secret"
    cls, kind = type(config), stage.upper()
    written = config.save_yaml(tmp_path / "c.yaml")
    text = written.read_text(encoding="utf-8")
    assert "hf_secret" not in text and "hub_token" not in text and "<" not in text  # no secret, no mask
    loaded = cls.from_yaml(written, seed=7, model=None)  # None: not given, the file's value stays
    assert loaded.to_yaml_dict() == {**config.to_yaml_dict(), "seed": 7}
    if stage == "sft":  # its template tokens are not secrets: written back, so the file reloads the same
        assert (loaded.eos_token, loaded.pad_token) == (config.eos_token, config.pad_token)
    unknown = rf"unknown {kind} config key\(s\) \['lora_rank'\]; see {cls.__name__} / {trl_name} for the fields"
    with pytest.raises(HatError, match=unknown):
        cls.from_dict({"lora_rank": 8})
    (tmp_path / "list.yaml").write_text("- 1\n", encoding="utf-8")
    with pytest.raises(HatError, match=f"an {kind} config is a YAML mapping"):
        cls.from_yaml(tmp_path / "list.yaml")
    pytest.importorskip("peft")
    lora = lora_config(config)
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (config.lora_r, config.lora_alpha, config.lora_dropout)


@dataclasses.dataclass(frozen=True)
class _Result:
    global_step: int
    output_dir: str


def test_run_training_prints_json_or_a_summary_and_reports_steps(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from hat.cli.train_cmd import run_training

    seen: dict[str, Any] = {}

    def make_config(extra: dict[str, Any]) -> Any:
        seen["extra"] = extra
        return SimpleNamespace(max_steps=2)

    def train(config: Any, *, callbacks: list[Any]) -> _Result:
        print("a library's own line")  # under --json it must not reach stdout
        for step in (1, 2):
            for callback in callbacks:
                callback.on_step_end(None, SimpleNamespace(global_step=step, max_steps=2), None)
        return _Result(2, "o")

    run_training("train x", train, make_config, as_json=True, summary=lambda r: f"did {r.global_step} steps")
    shown = capsys.readouterr()
    assert json.loads(shown.out) == {"global_step": 2, "output_dir": "o"}
    assert seen["extra"] == {"disable_tqdm": True}  # a log, not a terminal: plain step lines instead of tqdm
    assert "train x: 2/2 (100%)" in shown.err and "a library's own line" in shown.err and "did" not in shown.err
    run_training("train x", train, make_config, as_json=False, summary=lambda r: f"did {r.global_step} steps")
    shown = capsys.readouterr()
    assert "did 2 steps" in shown.err and "{" not in shown.out


def test_run_training_turns_a_bad_config_into_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    from hat.cli.train_cmd import run_training

    def bad_config(extra: dict[str, Any]) -> Any:
        raise HatError("give --out DIR")

    with pytest.raises(typer.Exit) as exited:
        run_training("train x", lambda *a, **k: None, bad_config, as_json=True, summary=str)
    assert exited.value.exit_code == 2
    shown = capsys.readouterr()
    assert shown.out == "" and shown.err.strip() == "error: give --out DIR"
