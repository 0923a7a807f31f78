"""What this CPU can do, read once from the operating system (no torch import)."""

from __future__ import annotations

import os

__all__ = ["cpu_supports_bf16", "usable_cores"]


def cpu_supports_bf16() -> bool:
    """True when this CPU has native bf16 dot products (AVX-512 BF16 or AMX), read from
    ``/proc/cpuinfo`` (Linux); elsewhere False, so callers stay in float32."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool({"avx512_bf16", "amx_bf16"} & flags)
    except OSError:
        return False
    return False


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
