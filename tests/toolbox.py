"""Python tools for the test harnesses (bound as python:toolbox:<fn>)."""

from __future__ import annotations

import threading
import time

CALLS: dict[str, int] = {}
_LOCK = threading.Lock()


def _count(name: str) -> int:
    with _LOCK:
        CALLS[name] = CALLS.get(name, 0) + 1
        return CALLS[name]


def get_price(product: str, *, context=None) -> dict:
    _count("get_price")
    if product != "p-1":
        raise LookupError(f"no product {product!r}; try p-1")
    return {
        "product": product,
        "price": 19.9,
        "on_display": (context.context.get("room", {}).get("on_display") if context else None),
    }


def boom(text: str = "") -> dict:
    _count("boom")
    raise RuntimeError("backend exploded")


def hang(seconds: float = 30.0) -> dict:
    _count("hang")
    time.sleep(seconds)
    return {"slept": seconds}


def flaky(key: str) -> dict:
    """Times out on its first call per key, answers afterwards (exercise the retry hook)."""
    if _count(f"flaky:{key}") == 1:
        time.sleep(2.0)
    return {"key": key, "ok": True}
