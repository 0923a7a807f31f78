"""hat.allocator: when the long commands re-execute themselves under jemalloc, and that they do."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hat.allocator import MALLOC_CONF, ON_POLICY_MALLOC_CONF, allocator_name, find_jemalloc, is_hat_process, preload_env

LIB = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def test_preload_env_prepends_the_library_and_sets_the_config() -> None:
    env = preload_env({"PATH": "/bin", "LD_PRELOAD": "/x/libfoo.so"}, LIB, loaded=False)
    assert env is not None
    assert env["LD_PRELOAD"] == f"{LIB}:/x/libfoo.so"
    assert env["MALLOC_CONF"] == MALLOC_CONF
    assert env["PATH"] == "/bin"
    assert env["HAT_MALLOC_REEXEC"] == "1"


def test_preload_env_keeps_a_users_malloc_conf() -> None:
    env = preload_env({"MALLOC_CONF": "narenas:1"}, LIB, loaded=False)
    assert env is not None and env["MALLOC_CONF"] == "narenas:1" and env["LD_PRELOAD"] == LIB


@pytest.mark.parametrize(
    ("env", "lib", "loaded"),
    [
        ({}, None, False),  # not installed
        ({}, LIB, True),  # already loaded
        ({"HAT_MALLOC": "system"}, LIB, False),  # opted out
        ({"HAT_MALLOC": "SYSTEM"}, LIB, False),
        ({"HAT_MALLOC_REEXEC": "1"}, LIB, False),  # re-executed once already: never loop
    ],
)
def test_preload_env_leaves_the_process_alone(env: dict[str, str], lib: str | None, loaded: bool) -> None:
    assert preload_env(env, lib, loaded=loaded) is None


@pytest.mark.parametrize(
    ("argv0", "expected"),
    [
        ("/work/.venv/bin/hat", True),
        ("/site-packages/hat/cli/main.py", True),
        ("/site-packages/hat/__main__.py", True),
        ("/work/.venv/bin/pytest", False),
        ("-c", False),
        ("", False),
    ],
)
def test_only_the_hat_process_is_re_executed(argv0: str, expected: bool) -> None:
    assert is_hat_process(argv0) is expected


def test_find_jemalloc_honours_the_override_and_the_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAT_JEMALLOC", raising=False)
    assert find_jemalloc(dirs=[str(tmp_path)]) is None
    lib = tmp_path / "libjemalloc.so.2"
    lib.write_bytes(b"")
    assert find_jemalloc(dirs=[str(tmp_path)]) == str(lib)
    other = tmp_path / "custom.so"
    other.write_bytes(b"")
    monkeypatch.setenv("HAT_JEMALLOC", str(other))
    assert find_jemalloc(dirs=[]) == str(other)


def test_allocator_name_reads_the_memory_map(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n")
    assert allocator_name(str(maps)) == "jemalloc"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert allocator_name(str(maps)) == "system"
    assert allocator_name(str(tmp_path / "missing")) == "system"


@pytest.mark.skipif(not sys.platform.startswith("linux") or find_jemalloc() is None, reason="needs libjemalloc2")
@pytest.mark.parametrize(("opt_out", "expected"), [(None, "jemalloc"), ("system", "system")])
def test_a_hat_process_runs_itself_again_under_jemalloc(tmp_path: Path, opt_out: str | None, expected: str) -> None:
    """A stand-in ``hat`` script (argv[0] named ``hat``) calls prefer_jemalloc and prints the
    allocator it ends up on, and its arguments, which survive the re-execution."""
    script = tmp_path / "hat"
    script.write_text(
        textwrap.dedent("""\
        import sys
        from hat.allocator import allocator_name, prefer_jemalloc
        prefer_jemalloc()
        print(allocator_name(), sys.argv[1:])
        """)
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "HAT_MALLOC", "HAT_MALLOC_REEXEC")}
    if opt_out:
        env["HAT_MALLOC"] = opt_out
    done = subprocess.run(
        [sys.executable, str(script), "train", "--x", "a b"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{expected} ['train', '--x', 'a b']"


def test_preload_env_takes_a_commands_own_config() -> None:
    env = preload_env({}, LIB, loaded=False, conf=ON_POLICY_MALLOC_CONF)
    assert env is not None and env["MALLOC_CONF"] == ON_POLICY_MALLOC_CONF != MALLOC_CONF
    kept = preload_env({"MALLOC_CONF": "narenas:1"}, LIB, loaded=False, conf=ON_POLICY_MALLOC_CONF)
    assert kept is not None and kept["MALLOC_CONF"] == "narenas:1"
