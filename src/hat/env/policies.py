"""The simulator's policy registry and the degenerate baselines.

Each degenerate policy is bad in exactly one way, so a judge or a suite can be shown to catch that
failure: ``polite`` (the same reply to everything), ``invent-prices`` (made-up prices and
discounts), ``wrong-tool`` (a tool of the wrong function), ``no-tools`` (never looks anything up),
``memorise`` (the oracle with the production names — what a model fine-tuned on one fixed harness
does). Importing this module registers the ``oracle`` and ``policy:<name>`` model specs.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hat.env.episode import Episode
from hat.env.oracle import (
    OracleModel,
    SkillFirstOracle,
    SkillScanAnswerOracle,
    SkillScanArgsOracle,
    SkillScanOracle,
    _Policy,
)
from hat.env.world import world_catalog
from hat.errors import ModelSpecError
from hat.harness.grounding import find_numbers, norm_value, numbers_in
from hat.harness.hooks import context_numbers
from hat.harness.loader import load_harness
from hat.harness.protocol import ToolCall, render_tool_call
from hat.harness.state import Harness
from hat.models import register_model_spec
from hat.models.base import Message

__all__ = [
    "POLICIES",
    "InventPricesPolicy",
    "MemorisingPolicy",
    "NoToolsPolicy",
    "OracleModel",
    "PolitePolicy",
    "SkillFirstOracle",
    "SkillScanAnswerOracle",
    "SkillScanArgsOracle",
    "SkillScanOracle",
    "WrongToolPolicy",
    "policy_model",
]

_INVENTED = ("Today only: {n} is just ${p}, plus {d}% off!", "Flash deal! {n} for ${p} with an extra {d}% off.")


class NoToolsPolicy(OracleModel):
    """Never calls tools or loads skills; answers from the prompt only (else promises to check)."""

    name = "no-tools"
    use_tools = False


class MemorisingPolicy(OracleModel):
    """The oracle with the production ``livestream`` names and limits, whatever the harness says: the
    oracle on production, stale names under renames (the overfitting T2 must expose)."""

    name = "memorise"

    def __init__(self, episode: Episode, harness: Harness, *, seed: int = 0) -> None:
        super().__init__(episode, harness, seed=seed)
        self.view = _production()


class PolitePolicy(_Policy):
    """The same polite reply to everything; no tools."""

    name = "polite"

    def output(self, messages: Sequence[Message]) -> str:
        return self.reply("Thanks so much for your comment! So happy to have you here.")


class InventPricesPolicy(_Policy):
    """No tools; states a made-up price and discount, using numbers seen elsewhere in the prompt so the
    grounding hook lets them through and only an accuracy judge can catch them. (Not the room's
    numbers: those came with the request, and the hook does not count them.)"""

    name = "invent-prices"

    def output(self, messages: Sequence[Message]) -> str:
        rng = self.rng(sum(m.get("role") == "assistant" for m in messages))
        product = self.on_display() or {}
        real = {norm_value(product.get(k)) for k in ("price", "promo_price")}
        prompt = str(messages[0].get("content", "")) if messages else ""
        room = {**world_catalog(self.episode.world_seed).new_room(), **self.episode.room}  # as the request's
        grounded = Counter(numbers_in(prompt)) - context_numbers(self.harness, {"room": room})
        found = {n.text: n.value for n in find_numbers(prompt) if not n.text.startswith("0") and n.value in grounded}
        prices = [n for n, value in found.items() if 5 <= float(value) <= 500 and value not in real]
        price = rng.choice(prices) if prices else "9.99"
        percents = [n for n in found if n.isdigit() and 5 <= int(n) <= 90 and n != price]
        if not percents:  # no number to borrow for a discount: invent the price alone
            return self.reply(f"Today only: {product.get('name', 'this one')} is just ${price}!")
        return self.reply(
            rng.choice(_INVENTED).format(n=product.get("name", "this one"), p=price, d=rng.choice(percents))
        )


class WrongToolPolicy(_Policy):
    """Calls one tool of a function the episode does not need, then replies generically."""

    name = "wrong-tool"

    def output(self, messages: Sequence[Message]) -> str:
        if any(m.get("role") == "assistant" for m in messages):
            return self.reply("Thanks for asking! Tap the product link on screen for all the details.")
        return "<think>I'll look something up first.</think>\n" + render_tool_call(self.wrong_call())

    def wrong_call(self) -> ToolCall:
        gold = self.episode.gold
        needed = {c.function_id for c in gold.tool_calls} | set(gold.optional_tools)
        spare = [t for t in self.harness.tools if t.function_id not in needed and not t.metadata.get("decoy")]
        tool = self.rng(0).choice(spare or list(self.harness.tools))
        text = " ".join(self.episode.comments)
        values = {"query": text, "reason": text, "product": str(self.episode.room.get("on_display") or "next")}
        rename = {k: str(rename) for k, rename in dict(tool.metadata.get("param_map") or {}).items()}
        props = dict(tool.parameters).get("properties", {})
        return ToolCall(tool.name, {rename.get(k, k): v for k, v in values.items() if rename.get(k, k) in props})


_ALL = (
    OracleModel,
    SkillFirstOracle,
    SkillScanOracle,
    SkillScanArgsOracle,
    SkillScanAnswerOracle,
    PolitePolicy,
    InventPricesPolicy,
    WrongToolPolicy,
    NoToolsPolicy,
    MemorisingPolicy,
)


@functools.lru_cache(maxsize=1)
def _production() -> Harness:
    return load_harness("livestream")


POLICIES: dict[str, type[_Policy]] = {cls.name: cls for cls in _ALL}
"""Policy name -> class: ``oracle``, ``skill-first``, ``skill-scan``, ``skill-scan-args``,
``skill-scan-answer``, ``polite``, ``invent-prices``, ``wrong-tool``, ``no-tools``, ``memorise``."""


def policy_model(name: str, episode: Episode, harness: Harness, seed: int = 0) -> _Policy:
    """The simulator policy called ``name`` for one episode on one harness."""
    cls = POLICIES.get(name)
    if cls is None:
        raise ModelSpecError(f"unknown simulator policy {name!r}; known: {', '.join(POLICIES)}")
    return cls(episode, harness, seed=seed)


def model_from_spec(argument: str, *, name: str = "", **kw: Any) -> _Policy:
    """``load_model("oracle" | "policy:<name>", episode=..., harness=..., seed=...)`` (found through
    the ``hat.models`` entry points of ``pyproject.toml``, so it works without importing this module)."""
    if "episode" not in kw or "harness" not in kw:
        raise ModelSpecError(f"model spec {name or 'oracle'!r} is simulator-only: pass episode= and harness=")
    return policy_model(argument or "oracle", kw["episode"], kw["harness"], seed=int(kw.get("seed", 0)))


register_model_spec("oracle", model_from_spec, takes_argument=False, replace=True)
register_model_spec("policy", model_from_spec, usage="policy:<name>", replace=True)
