"""Stage 1's context provider for the live-commerce harness: fill a request's room, product on
display and retrieved FAQ from the catalog (the simulator's world replaces the catalog later).

Retrieval is capped at two FAQ entries: the rendered system prompt of the default harness is
~800 tokens without FAQ and ~40 more per entry, and prefill dominates latency on a CPU.
"""

from __future__ import annotations

from dataclasses import replace

from hat.env.catalog import load_catalog
from hat.env.livestream_tools import search_faq
from hat.harness.runtime import Request

__all__ = ["MAX_FAQ", "livestream_context"]

MAX_FAQ = 2


def livestream_context(request: Request) -> Request:
    """Return ``request`` with its context's ``room``, ``product`` and ``faq`` filled where the
    caller left them out (the livestream harness names this as its ``context_provider``)."""
    catalog = load_catalog()
    context = dict(request.context)
    room = dict(context.get("room") or {}) or catalog.new_room()
    product = context.get("product") or catalog.product(str(room.get("on_display", "")))
    faq = context.get("faq")
    if not faq:
        try:
            hits = search_faq(" ".join(request.turns))["results"][:MAX_FAQ]
        except ValueError:  # nothing searchable in the comment (emoji, empty)
            hits = []
        faq = [{"question": h["question"], "answer": h["answer"]} for h in hits]
    return replace(request, context={**context, "room": room, "product": product, "faq": list(faq)})
