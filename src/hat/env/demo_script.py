"""The scripted demo session: a few host lines and a varied pool of viewer comments.

``hat demo`` (and the README walkthrough) replay this against the bundled catalog, so the comments
cover every skill of the default harness at least once - product questions by color and size,
specs, shipping, price and coupons, an after-sales complaint, small talk with emoji, a request for
the next product, store-policy FAQ - plus the noise a real room has (a typo'd comment, slang, a
mixed question). The simulator's viewer generator (``hat.env.viewers``) is the tool for volume and
for the report's intent mix; this module is a fixed, readable script.

Determinism: :func:`demo_stream` draws only from the ``random.Random(seed)`` it creates, so the same
``(n, seed)`` gives the same list on every machine and Python version.

:func:`demo_summary` is the closing line of a session - how many replies, with which statuses, the
median latency and the tool calls - so a user sees at a glance whether the model did the job, not
only the last reply.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["HOST_LINES", "VIEWER_COMMENTS", "demo_stream", "demo_summary", "format_summary"]

HOST_LINES: tuple[str, ...] = (
    "Hi everyone, welcome to the room! First up is our Floral Midi Wrap Dress.",
    "This dress is so light, perfect for summer evenings.",
    "Don't forget tonight's code LIVE10 on orders of $80 or more!",
    "Next I'll show you the Cloud Fleece Hoodie, super cozy.",
    "Drop your questions in the chat, I'm reading every one!",
    "Only a few minutes left on this link, so grab it while it's live.",
)

VIEWER_COMMENTS: tuple[str, ...] = (
    # product Q&A: price, stock by color/size, specs, shipping
    "how much is this dress?",
    "Is the blue one still available in M?",
    "do you have the red dress in size L",
    "what's the material? is it see-through?",
    "does the hoodie run big? I'm usually an L",
    "how long is the battery on the earbuds",
    "Do you ship to Canada? and how long does it take",
    "is shipping free for the air fryer?",
    # pricing and coupons
    "any coupon today?? 😍",
    "can I use LIVE10 and NEWFAN3 together?",
    "is the lipstick cheaper in the live room than in the shop?",
    # after-sales
    "my order #A1029 arrived with a torn sleeve, I want a refund NOW",
    "I returned the sneakers two weeks ago and still no money back 😡",
    # casual chat
    "hiii Mia 👋👋",
    "you look gorgeous today ❤️",
    "lol this stream is so fun 😂",
    # presentation order
    "show the next product pls",
    "can you show the yoga mat again?",
    # FAQ-type
    "do you take paypal?",
    "are these products authentic or fake?",
    "can I change my delivery address after ordering?",
    # noise: typos, slang, mixed questions
    "hw much 4 the snekers in navy sz 42",
    "is the vitamin c serum ok for sensitive skin and whats the price",
    "when will the teal yoga mat be back in stock",
)


def demo_stream(n: int, seed: int = 0) -> list[dict[str, str | None]]:
    """``n`` demo items ``{"host": line or None, "comment": viewer comment}``, the same per ``seed``.

    Comments are dealt from a seeded shuffle of :data:`VIEWER_COMMENTS` (reshuffled after each full
    pass, so the first ``len(VIEWER_COMMENTS)`` items never repeat); about one item in three also
    carries the next scripted host line, in script order.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    deck: list[str] = []
    host_index = 0
    items: list[dict[str, str | None]] = []
    for i in range(n):
        if not deck:
            deck = list(VIEWER_COMMENTS)
            rng.shuffle(deck)
        host: str | None = None
        if i == 0 or rng.random() < 1 / 3:
            host = HOST_LINES[host_index % len(HOST_LINES)]
            host_index += 1
        items.append({"host": host, "comment": deck.pop()})
    return items


def demo_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The session in numbers, from the reply records of :func:`hat.demo.demo_records`: replies,
    count per status, P50 and max latency (seconds), rounds, tool calls and how many failed."""
    latencies = [float(r["latency_ms"]) / 1000 for r in records]
    calls = [c for r in records for c in r["tool_calls"]]
    return {
        "replies": len(records),
        "statuses": dict(Counter(str(r["status"]) for r in records)),
        "p50_latency_s": round(statistics.median(latencies), 2) if latencies else None,
        "max_latency_s": round(max(latencies), 2) if latencies else None,
        "rounds": sum(int(r["rounds"]) for r in records),
        "tool_calls": len(calls),
        "tool_calls_failed": sum(1 for c in calls if c["status"] != "ok"),
    }


def format_summary(summary: Mapping[str, Any]) -> str:
    """One line: ``5 replies · ok 4, fallback 1 · P50 16.5 s (max 39.3 s) · 7 tool calls (0 failed)``."""
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items())) or "none"
    p50, slowest = summary["p50_latency_s"], summary["max_latency_s"]
    latency = "no latency" if p50 is None else f"P50 {p50:.1f} s (max {slowest:.1f} s)"
    return (
        f"{summary['replies']} replies · {statuses} · {latency} · "
        f"{summary['tool_calls']} tool calls ({summary['tool_calls_failed']} failed)"
    )
