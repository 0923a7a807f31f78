"""The simulator runner: turn an :class:`~hat.env.episode.Episode` into a runtime request, run it, and
return the trace with what the simulated backends did to it.

Why the world travels in ``Request.resources`` and not in a global: episodes of different worlds
(and different fault specs) run side by side in one process (evaluation, RL rollouts in threads).
Each request carries its own ``catalog`` (the episode's world, :func:`~hat.env.world.world_catalog`)
and its own :class:`~hat.env.faults.FaultInjector`; the livestream tools read both from their
``context``. The injector's log goes into ``trace.context["faults"]`` so judges and training
filters can tell a model's slip from a backend's failure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hat.env.catalog import Catalog
from hat.env.context import MAX_FAQ
from hat.env.episode import Episode
from hat.env.faults import FaultInjector
from hat.env.livestream_tools import search_faq
from hat.env.world import world_catalog
from hat.harness.runtime import Agent, Request
from hat.harness.state import Harness
from hat.harness.tools import ToolContext
from hat.harness.trace import Trace

__all__ = ["episode_request", "retrieve_faq", "run_episode", "sim_context_provider", "simulate"]


def retrieve_faq(
    comments: tuple[str, ...] | list[str], catalog: Catalog, room: dict[str, Any]
) -> tuple[dict[str, Any], ...]:
    """Up to :data:`~hat.env.context.MAX_FAQ` FAQ entries for the comments (no fault injection: this
    is the prompt's retrieval step, not a tool call the model made)."""
    context = ToolContext(context={"room": room}, resources={"catalog": catalog})
    try:
        hits = search_faq(" ".join(comments), context=context)["results"][:MAX_FAQ]
    except ValueError:  # nothing searchable (emoji only)
        hits = []
    return tuple({"question": h["question"], "answer": h["answer"]} for h in hits)


def episode_request(episode: Episode) -> Request:
    """The runtime request for ``episode``: its room (missing keys from the world's room), the product
    on display and retrieved FAQ from its world, history, comments and mode; resources hold the
    world's catalog and a fresh fault injector (so every run of an episode draws the same faults)."""
    catalog = world_catalog(episode.world_seed)
    room = {**catalog.new_room(), **dict(episode.room)}
    product = catalog.product(str(room.get("on_display") or ""))
    return Request(
        turns=tuple(episode.comments),
        context={"room": room, "product": product, "faq": list(retrieve_faq(episode.comments, catalog, room))},
        history=tuple(dict(m) for m in episode.history),
        request_id=episode.episode_id,
        mode="multi" if episode.mode == "multi" else "single",
        resources={"catalog": catalog, "faults": FaultInjector(episode.faults, episode.episode_id)},
    )


def sim_context_provider(request: Request) -> Request:
    """An :class:`~hat.harness.runtime.Agent` context provider for simulator requests built by hand:
    fills room, product and FAQ from ``resources["catalog"]`` (default: the bundled world) where the
    caller left them empty."""
    catalog = request.resources.get("catalog")
    if not isinstance(catalog, Catalog):
        catalog = world_catalog(-1)
    context = dict(request.context)
    room = dict(context.get("room") or {}) or catalog.new_room()
    product = context.get("product") or catalog.product(str(room.get("on_display") or ""))
    faq = context.get("faq") or list(retrieve_faq(request.turns, catalog, room))
    return replace(request, context={**context, "room": room, "product": product, "faq": list(faq)})


def run_episode(agent: Agent, episode: Episode) -> Trace:
    """Run ``episode`` through ``agent``; the trace's context gains ``faults`` (the injector's log)
    and ``episode_id``. Never raises for model or tool trouble: that is in ``trace.status``."""
    request = episode_request(episode)
    trace = agent.respond(request).trace
    injector: FaultInjector = request.resources["faults"]
    context = {**trace.context, "faults": list(injector.log), "episode_id": episode.episode_id}
    return replace(trace, context=context)


def simulate(episode: Episode, harness: Harness, policy: str = "oracle", *, seed: int = 0) -> Trace:
    """Run one episode with a simulator policy (:data:`hat.env.policies.POLICIES`) on ``harness``."""
    from hat.env.policies import policy_model

    agent = Agent(harness, policy_model(policy, episode, harness, seed=seed))
    try:
        return run_episode(agent, episode)
    finally:
        agent.close()
