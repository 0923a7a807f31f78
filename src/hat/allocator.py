"""jemalloc for the long CPU commands (``hat train …``, ``hat eval``, ``hat datagen-general``).

A training under glibc's ``malloc`` slows as the process ages: on an AMX Xeon the same steps,
recomputed from the same checkpoint with equal losses, took 101 s in a process ~100 steps old, 73 s
in a fresh one and 55 s in a fresh one under jemalloc, which kept 323 tokens/s over 120 steps at
5.2 GB where glibc grew to 15 GB; on an AMD EPYC a fresh process ran within ±5 % on either, in half
the memory under jemalloc (``reports/stage1m/allocator/``, ``reports/stage1b.md`` §1). The allocator is chosen
when a process starts, so :func:`prefer_jemalloc` re-executes the command once with
``LD_PRELOAD=libjemalloc.so.2`` (and :data:`MALLOC_CONF` unless one is set), the way PyTorch's
CPU performance guide and ``torch.backends.xeon.run_cpu`` use it.

Nothing changes where jemalloc is not installed (Debian/Ubuntu: ``apt-get install libjemalloc2``),
where it is already loaded, off Linux, or with ``HAT_MALLOC=system``; :func:`allocator_name` says
which allocator a process runs on, for the run's record.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "MALLOC_CONF",
    "ON_POLICY_MALLOC_CONF",
    "allocator_name",
    "find_jemalloc",
    "is_hat_process",
    "prefer_jemalloc",
    "preload_env",
]

#: Keep freed pages (no decay: a training reuses the same sizes every step), return huge blocks
#: straight to the OS, purge in a background thread — PyTorch's recommended CPU settings.
MALLOC_CONF = (
    "oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:9000000000,muzzy_decay_ms:9000000000"
)
#: For the on-policy trainings (``hat train opd``/``rl``): never return freed pages. Each step
#: samples (small buffers) and then runs a forward with autograd over a batch whose shapes differ
#: from the last step's; with pages returned in between, that forward re-faults gigabytes of
#: memory every step. On an AMD EPYC (2 cores) an OPD step of 8 prompts took 181 s under
#: :data:`MALLOC_CONF`, ~120 s with pages returned after 60–300 s, and 70 s under this. The price:
#: resident memory grows ~0.5 GB a step (13 GB at step 3, 24 GB by step 25), so a long run must be
#: restarted from its checkpoint before it fills the machine (``reports/stage23/pipeline.sh``
#: does it at a memory limit; reports/hat.md § Sizing).
ON_POLICY_MALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
#: ``system``: keep the C library's allocator (no re-execution).
OPT_OUT_VAR = "HAT_MALLOC"
#: Set in the re-executed process, so a failed preload never loops.
_REEXEC_VAR = "HAT_MALLOC_REEXEC"
_LIB = "libjemalloc.so.2"
_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)


def find_jemalloc(dirs: Sequence[str] = _LIB_DIRS) -> str | None:
    """Path of ``libjemalloc.so.2`` in the usual library folders (``$HAT_JEMALLOC`` first), or None."""
    override = os.environ.get("HAT_JEMALLOC")
    candidates = [override] if override else []
    candidates += [str(Path(d) / _LIB) for d in dirs]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def allocator_name(maps: str = "/proc/self/maps") -> str:
    """``"jemalloc"`` when this process has jemalloc mapped, else ``"system"`` (also where the
    memory map cannot be read)."""
    try:
        text = Path(maps).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "system"
    return "jemalloc" if "libjemalloc" in text else "system"


def preload_env(
    env: Mapping[str, str], lib: str | None, *, loaded: bool, conf: str = MALLOC_CONF
) -> dict[str, str] | None:
    """The environment to re-execute with so that ``lib`` is preloaded (with ``MALLOC_CONF=conf``
    unless the environment sets one), or None to run as is: no library, already loaded, opted out
    (``HAT_MALLOC=system``) or already re-executed once."""
    if lib is None or loaded or env.get(OPT_OUT_VAR, "").lower() == "system" or env.get(_REEXEC_VAR):
        return None
    new = dict(env)
    preload = env.get("LD_PRELOAD", "")
    new["LD_PRELOAD"] = f"{lib}:{preload}" if preload else lib
    new.setdefault("MALLOC_CONF", conf)
    new[_REEXEC_VAR] = "1"
    return new


def is_hat_process(argv0: str) -> bool:
    """True when ``argv0`` (``sys.argv[0]``) is the ``hat`` command (the console script, ``python -m
    hat`` or ``python -m hat.cli.main``) — not a program that calls hat's CLI in-process (a test
    runner, a notebook), which must never be re-executed."""
    path = Path(argv0)
    return path.name == "hat" or path.parts[-2:] in {("hat", "__main__.py"), ("cli", "main.py")}


def prefer_jemalloc(argv: Sequence[str] | None = None, *, conf: str = MALLOC_CONF) -> None:
    """Re-execute this command under jemalloc when :func:`preload_env` says so (Linux, the ``hat``
    process only); call it first thing in a long-running command, before torch allocates. Returns
    when nothing is to be done; otherwise never returns (``os.execve``). ``argv``: the command line
    to run again (default: ``sys.orig_argv``, the interpreter's own, so ``python -m hat`` and the
    ``hat`` script both work); ``conf``: jemalloc's options unless ``MALLOC_CONF`` is set."""
    if not sys.platform.startswith("linux") or not is_hat_process(sys.argv[0] if sys.argv else ""):
        return
    env = preload_env(os.environ, find_jemalloc(), loaded=allocator_name() == "jemalloc", conf=conf)
    if env is None:
        return
    args = list(argv if argv is not None else getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *args[1:]], env)
