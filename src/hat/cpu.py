"""What this CPU can do, read once from the operating system (no torch import)."""

from __future__ import annotations

import os

__all__ = ["cpu_description", "cpu_supports_bf16", "usable_cores"]


def _cpuinfo(path: str = "/proc/cpuinfo") -> tuple[str | None, set[str]]:
    """``(model name, flags)`` of the first CPU listed in ``path`` (Linux); ``(None, set())`` where
    it cannot be read."""
    name: str | None = None
    flags: set[str] = set()
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and name is None:
                    name = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
                if name is not None and flags:
                    break
    except OSError:
        pass
    return name, flags


def cpu_supports_bf16() -> bool:
    """True when this CPU has native bf16 dot products (AVX-512 BF16 or AMX), read from
    ``/proc/cpuinfo`` (Linux); elsewhere False, so callers stay in float32."""
    return bool({"avx512_bf16", "amx_bf16"} & _cpuinfo()[1])


def cpu_description(cpuinfo: str = "/proc/cpuinfo") -> str:
    """This CPU for a benchmark's record: model name, usable cores and the matrix extensions that
    decide bf16 speed (``"Intel(R) Xeon(R) Processor, 2 cores, AVX-512 BF16, AMX"``); ``"unknown
    CPU"`` with the core count where ``cpuinfo`` cannot be read. Figures from CPUs with and without
    AMX (bf16 tiles) differ by ~1.7x in bf16 training, so every figure names its CPU."""
    name, flags = _cpuinfo(cpuinfo)
    named = (("avx512_bf16", "AVX-512 BF16"), ("avx512_vnni", "VNNI"), ("amx_bf16", "AMX"))
    extensions = [label for flag, label in named if flag in flags]
    return ", ".join([name or "unknown CPU", f"{usable_cores()} cores", *extensions])


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
