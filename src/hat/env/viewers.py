"""Viewer/episode generator: seeded viewer requests with the report's intent mix and gold labels.

Design choices:

- **Mix by quota per block of 100**: each block holds exactly the :data:`INTENT_MIX` counts,
  shuffled by a block seed; episode ``i`` depends only on ``(seed, i)`` (runs are prefix-stable).
- **Gold from the real tools**: builders call :mod:`hat.env.livestream_tools` on the world's
  catalog and the episode's room and quote the results (``"45.9"``). Each episode is re-run
  through :func:`gold_results`; a failing call or a fact missing from the results' JSON makes the
  generator redraw (same ``(seed, i)``, next attempt), and forbidden claims the results support
  are dropped, so gold is achievable by construction.
- **Gold arguments** use canonical names. Products are ids, or ``None`` for the one on display
  (omitting it is right). ``switch_product_link`` gets the target id also for "next" (``notes``:
  ``via=next``). Free text (``query``, ``reason``) is ``None``: any wording; :func:`gold_results`
  fills in the comments. ``region`` is the tool's code (``"CA"`` for "Canada").
- **References**: "this one" (display only), aliases, names, brand + alias, "the blue one",
  typos; each checked to resolve through :meth:`Catalog.find_product` to the intended product.
- **Clarification** has ``history`` (a question naming a product, the host's grounded reply) that
  the comment ("and in black?") needs; the product is mostly not on display. Some other episodes
  get a greeting as history, so history never gives the intent away.
- **Multi mode**: the main request among 1-3 chatter comments that need no tool and state no fact,
  so the main request's gold is the episode's gold (clarification: main comment last).
- Skills, optional tools and answerability come from one table per request kind (``_META``);
  ``notes`` ("kind=...; product=...; main=i; tpl=family#k") is for debugging and tests only.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from hat.env import phrasings as ph
from hat.env.catalog import Catalog
from hat.env.episode import INTENT_MIX, Episode, FaultSpec, Gold, GoldCall
from hat.env.livestream_tools import TOOL_FUNCTIONS
from hat.env.world import world_catalog
from hat.env.worldgen import FAQ_FACTS, World, generate_world
from hat.harness.state import canonical_json
from hat.harness.tools import ToolContext

_Rec = dict[str, Any]  # a JSON record: product, room, tool result
_Tpls = tuple[str, ...]  # a template table

__all__ = ["BLOCK", "FREE_TEXT_ARGS", "MODES", "generate_episodes", "gold_results", "intent_quota"]

BLOCK = 100
MODES = ("single", "multi")
FREE_TEXT_ARGS = {"search_faq": "query", "handoff_to_service": "reason"}
"""Free-text parameters: gold leaves them ``None``; :func:`gold_results` fills in the comments."""

_num = json.dumps  # a number exactly as the tool result's JSON prints it ("45.9", "49")
_ATTEMPTS = 12
_FOLLOW_UPS = ["color", "size", "other", "price", "region", "dispatch", "spec"]
_CLEAN_AFTER = 8  # attempts from this index on draw comments without noise

# request kind -> (relevant skills, acceptable extra tools, answerable)
_META: dict[str, tuple[_Tpls, _Tpls, bool]] = {
    "price": (("pricing-discounts", "product-qa"), ("get_discount_rules",), True),
    "stock": (("product-qa",), ("get_specs",), True),
    "spec": (("product-qa",), ("get_stock",), True),
    "shipping": (("product-qa",), (), True),
    "returns": (("product-qa", "after-sales-handoff"), ("search_faq",), True),
    "discount": (("pricing-discounts",), ("get_price",), True),
    "after_sales": (("after-sales-handoff",), ("search_faq", "get_shipping"), False),
    "order_change": (("presentation-order",), ("get_price", "get_specs"), True),
    "faq": (("faq-replies",), (), True),
    "casual_chat": (("casual-chat",), (), True),
    "other": ((), (), False),
}


def _derive(*parts: object) -> int:
    """A 64-bit seed from ``parts`` (SHA-256: the same on every run and platform)."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode("utf-8")).digest()[:8], "big")


def _key_fact(value: str) -> str:
    """The head of a spec value ("80% cotton" of "80% cotton, 20% polyester"): short enough for a
    spoken reply to quote, and a verbatim substring of the tool result."""
    return re.split(r",|;| \(", str(value))[0].strip()


# -- quotas -----------------------------------------------------------------------------------------
def intent_quota(n: int, mix: dict[str, float] | None = None) -> dict[str, int]:
    """Integer counts per intent summing to ``n`` (largest remainder; ties in mix order)."""
    mix = mix or INTENT_MIX
    raw = {k: n * v / sum(mix.values()) for k, v in mix.items()}
    counts = {k: math.floor(v + 1e-9) for k, v in raw.items()}
    order = sorted(raw, key=lambda k: (-(raw[k] - counts[k]), list(mix).index(k)))
    for k in order[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def _intents(n: int, seed: int, mix: dict[str, float] | None = None) -> list[str]:
    intents: list[str] = []
    quota = intent_quota(BLOCK, mix)
    for block in range(math.ceil(n / BLOCK)):
        pool = [k for k, count in quota.items() for _ in range(count)]
        random.Random(_derive(seed, "block", block)).shuffle(pool)
        intents.extend(pool)
    return intents[:n]


# -- running gold calls -----------------------------------------------------------------------------
def _invoke(call: GoldCall, context: ToolContext, free_text: str) -> _Rec:
    args = {k: v for k, v in call.arguments.items() if v is not None}
    param = FREE_TEXT_ARGS.get(call.function_id)
    if param is not None and param not in args:
        args[param] = free_text
    try:
        return TOOL_FUNCTIONS[call.function_id](**args, context=context)
    except (LookupError, ValueError) as exc:  # tool failures are observations, as in the runtime
        return {"error": str(exc)}


def gold_results(episode: Episode, catalog: Catalog | None = None) -> list[_Rec]:
    """Run the episode's gold calls (in order, sharing one context) against its world and room.
    ``None`` arguments are omitted, except free-text ones, which get the joined comments."""
    catalog = catalog or world_catalog(episode.world_seed)
    room = copy.deepcopy(episode.room)
    context = ToolContext(request_id=episode.episode_id, context={"room": room}, resources={"catalog": catalog})
    text = " ".join(episode.comments)
    return [_invoke(call, context, text) for call in episode.gold.tool_calls]


# -- scene and parts --------------------------------------------------------------------------------
@dataclass
class _Scene:
    """One draw: its RNG, the world's catalog, and the room state the episode happens in."""

    rng: random.Random
    catalog: Catalog
    room: _Rec
    noise: bool

    @property
    def display(self) -> _Rec:
        return self.catalog.product(self.room["on_display"]) or {}

    def call(self, function_id: str, arguments: _Rec) -> _Rec:
        context = ToolContext(context={"room": copy.deepcopy(self.room)}, resources={"catalog": self.catalog})
        return _invoke(GoldCall(function_id, arguments), context, "")

    def say(self, template: str, **slots: str) -> str:
        base = {"host": self.room["host"], "city": self.rng.choice(ph.CITIES)}
        return ph.noisy(self.rng, template, {**base, **slots}, enabled=self.noise)

    def parg(self, product: _Rec) -> str | None:
        """The gold product argument: ``None`` (may be omitted) for the product on display."""
        return None if product["id"] == self.room["on_display"] else product["id"]


@dataclass
class _Part:
    """A request (or half of a two-question comment) and what its gold needs. ``kind`` starts
    with a :data:`_META` key ("stock/color"); ``+`` joins the kinds of a two-question comment."""

    text: str
    tpl: list[str]
    calls: list[GoldCall]
    facts: list[str]
    forbidden: list[str]
    kind: str
    product: str | None = None
    history: list[dict[str, str]] = field(default_factory=list)

    def meta(self) -> tuple[list[str], list[str], bool]:
        """Skills, optional tools and answerability, merged over the kinds in ``kind``."""
        rows = [_META[k.split(":")[-1].split("/")[0]] for k in self.kind.split("+")]
        skills = [s for row in rows for s in row[0]]
        optional = [t for row in rows for t in row[1]]
        return list(dict.fromkeys(skills)), list(dict.fromkeys(optional)), all(row[2] for row in rows)


# -- products and references ------------------------------------------------------------------------
def _pick_product(sc: _Scene, need: Callable[[_Rec], bool] = lambda p: True, display_p: float = 0.5) -> _Rec | None:
    """The display product with probability ``display_p``, else another room product (sometimes
    any catalog product), among those satisfying ``need``."""
    display = sc.display
    in_room = [sc.catalog.product(pid) or {} for pid in sc.room["order"]]
    others = [p for p in in_room if p["id"] != display["id"] and need(p)]
    if not others or sc.rng.random() < 0.15:
        others = [p for p in sc.catalog.products if p["id"] != display["id"] and need(p)] or others
    if need(display) and (not others or sc.rng.random() < display_p):
        return display
    return sc.rng.choice(others) if others else None


def _ref(sc: _Scene, product: _Rec, *, deictic: bool = True, by_color: bool = True) -> str:
    """A viewer's reference to ``product`` that the catalog resolves back to it."""
    display = sc.room["on_display"]
    resolves = lambda t: (sc.catalog.find_product(t, prefer=display) or {}).get("id") == product["id"]  # noqa: E731
    return ph.reference(sc.rng, product, resolves, on_display=deictic and product["id"] == display, by_color=by_color)


def _options(product: _Rec, key: str) -> list[str]:
    return list(dict.fromkeys(v[key] for v in product["stock"] if v[key] is not None))


# -- product Q&A parts ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Say:
    """Where a question's words come from: a template table, its family (for the template id),
    and a fixed reference ("it" in follow-ups, an explicit name in history) or ``None`` to draw one."""

    templates: _Tpls
    family: str = "product_qa"
    ref: str | None = None


def _part(
    sc: _Scene, p: _Rec, say: _Say, call: GoldCall, facts: list[str], bad: list[str], kind: str, **slots: str
) -> _Part:
    """Word the request (template, reference, noise) and wrap it with its gold."""
    tpl = ph.pick_template(sc.rng, say.templates, on_display=p["id"] == sc.room["on_display"])
    ref = say.ref or _ref(sc, p, by_color=not kind.startswith("stock"))
    text = sc.say(tpl, ref=ref, **slots)
    return _Part(text, [ph.template_id(say.family, tpl)], [call], facts, bad, kind, p["id"])


def _ask_price(sc: _Scene, p: _Rec, say: _Say) -> _Part:
    result = sc.call("get_price", {"product": p["id"]})
    value = result["promo_price"] if result["promo_active"] else result["price"]
    decoy = sc.rng.choice([q for q in sc.catalog.products if q["id"] != p["id"]])
    forbidden = [_num(decoy["promo_price"] or decoy["price"])]  # another product's price
    if result["promo_price"] is None or abs(result["promo_price"] / result["price"] - 0.5) > 0.02:
        forbidden.append("50% off")
    call = GoldCall("get_price", {"product": sc.parg(p)})
    return _part(sc, p, say, call, [_num(value)], forbidden, "price")


def _variant(sc: _Scene, p: _Rec, color: str | None = None) -> _Rec:
    """A stock variant; sold-out ones drawn often enough that "sold out" replies get practised."""
    variants = [v for v in p["stock"] if color in (None, v["color"])]
    empty = [v for v in variants if v["qty"] == 0]
    return sc.rng.choice(empty if empty and sc.rng.random() < 0.35 else variants)


def _ask_stock(
    sc: _Scene, p: _Rec, mode: str, say: _Say, *, keep: str | None = None, avoid: str | None = None
) -> _Part | None:
    """Stock for ``mode`` in any / color / size / color_size; ``keep`` carries a colour over from
    the history, ``avoid`` asks about a colour other than the history's."""
    colors = [c for c in _options(p, "color") if c != avoid]
    if ("color" in mode and not colors) or ("size" in mode and not _options(p, "size")):
        return None
    variant = _variant(sc, p, keep or (sc.rng.choice(colors) if "color" in mode else None))
    color = keep or (variant["color"] if "color" in mode else None)
    size = variant["size"] if "size" in mode else None
    args = {"product": sc.parg(p), **({"color": color} if color else {}), **({"size": size} if size else {})}
    result = sc.call("get_stock", {**args, "product": p["id"]})
    label = " ".join(x for x in (color, size) if x)
    facts = [x for x in (color, size) if x and (x == color or len(x) >= 2)]  # "M" is no checkable fact
    forbidden = ["plenty left"] if result["qty"] == 0 else ([f"{label} is sold out"] if label else [])
    call = GoldCall("get_stock", args)
    return _part(sc, p, say, call, facts, forbidden, f"stock/{mode}", color=color or "", size=size or "")


def _spec_keys(p: _Rec, table: dict[str, _Tpls] | None = None) -> list[str]:
    return [k for k in p["specs"] if k in ph.SPEC_TOPIC and (table is None or k in table)]


def _ask_spec(sc: _Scene, p: _Rec, say: _Say | None, *, key: str | None = None, ref: str | None = None) -> _Part:
    """Specs: with ``say=None`` a key-specific template from :data:`SPEC` or a generic one with
    ``{topic}``; else ``say`` (follow-ups)."""
    if say is None:
        specific = _spec_keys(p, ph.SPEC)
        key = key or sc.rng.choice(specific if specific and sc.rng.random() < 0.75 else _spec_keys(p))
        say = _Say(ph.SPEC.get(key, ph.SPEC_GENERIC) if sc.rng.random() < 0.8 else ph.SPEC_GENERIC, ref=ref)
    key = key or sc.rng.choice(_spec_keys(p))
    forbidden = list(ph.CLAIMS["medical" if p["category"] in ("beauty", "skincare") else "warranty"])
    call = GoldCall("get_specs", {"product": sc.parg(p)})
    fact = _key_fact(p["specs"][key])
    return _part(sc, p, say, call, [fact], forbidden, f"spec/{key}", topic=ph.SPEC_TOPIC[key])


def _ask_ship(sc: _Scene, p: _Rec, sub: str, say: _Say) -> _Part:
    """Shipping: dispatch time, fee, a region, or the return policy (all from ``get_shipping``)."""
    word = sc.rng.choice(list(ph.REGION_WORDS))
    args: _Rec = {"product": sc.parg(p), **({"region": ph.REGION_WORDS[word]} if sub == "region" else {})}
    result = sc.call("get_shipping", {**args, "product": p["id"]})
    forbidden, facts = list(ph.CLAIMS["promises"]), []
    if sub == "dispatch":
        facts = [_num(result["ships_in_days"])]
    elif sub == "fee" and result["fee"]:
        facts = [_num(result["fee"])] + ([_num(result["free_over"])] if result["free_over"] else [])
    elif sub == "region" and not result["ships_to_region"]:
        forbidden += [f"we ship to {word}", f"ships to {word}"]
    elif sub == "returns":
        facts = [_key_fact(result["return_policy"])]
    kind = "returns" if sub == "returns" else f"shipping/{sub}"
    return _part(sc, p, say, GoldCall("get_shipping", args), facts, forbidden, kind, region=word)


def _ask(
    sc: _Scene, kind: str, p: _Rec, *, follow: bool = False, ref: str | None = None, mode: str = ""
) -> _Part | None:
    """A question of ``kind`` (price / stock / spec / ship / dispatch) about ``p``. ``follow``: the
    "it" half of a two-question comment; ``ref``: an explicit reference; ``mode``: a stock mode."""
    it = "it" if follow else ref
    if kind == "price":
        return _ask_price(sc, p, _Say(ph.FOLLOW["price"] if follow else ph.PRICE, ref=it))
    if kind == "stock":
        feasible = [m for m in ph.STOCK if all(_options(p, x) for x in ("color", "size") if x in m)]
        mode = mode or sc.rng.choice(["color", "size"] if follow else feasible)
        return _ask_stock(sc, p, mode, _Say(ph.FOLLOW[f"stock_{mode}"] if follow else ph.STOCK[mode], ref=it))
    if kind == "spec":
        return _ask_spec(sc, p, _Say(ph.FOLLOW["spec"], ref=it) if follow else None, ref=ref)
    sub = kind if kind != "ship" else sc.rng.choice(["region", "dispatch"] if follow else list(ph.SHIPPING))
    return _ask_ship(sc, p, sub, _Say((ph.FOLLOW if follow else ph.SHIPPING)[sub], ref=it))


def _product_qa(sc: _Scene) -> _Part | None:
    p = _pick_product(sc)
    if p is None:
        return None
    kinds = ["price", "stock", "spec", "ship"]
    kind = sc.rng.choices([*kinds, "combo"], weights=[28, 30, 20, 14, 8])[0]
    if kind != "combo":
        return _ask(sc, kind, p)
    first_kind, second_kind = sc.rng.sample(kinds, 2)
    first, second = _ask(sc, first_kind, p), _ask(sc, second_kind, p, follow=True)
    if first is None or second is None:
        return None
    text = first.text.rstrip("?!. ") + sc.rng.choice(ph.JOINERS) + second.text
    tpl, calls, facts, bad = (getattr(first, f) + getattr(second, f) for f in ("tpl", "calls", "facts", "forbidden"))
    return _Part(text, tpl, calls, facts, bad, f"{first.kind}+{second.kind}", p["id"])


# -- clarification ----------------------------------------------------------------------------------
def _history_reply(sc: _Scene, first: _Part, p: _Rec) -> str:
    """The host's earlier answer, grounded in the same tools."""
    kind = first.kind.split("/")[0]
    if kind == "stock":
        result = sc.call("get_stock", {"product": p["id"], "color": first.facts[0]})
        slots = {"color": first.facts[0], "qty": _num(result["qty"])}
        return ph.HISTORY_REPLY["stock"][0 if result["qty"] else 1].format(**slots)
    if kind == "price":
        result = sc.call("get_price", {"product": p["id"]})
        slots = {"name": p["name"], "price": _num(result["promo_price"] or result["price"])}
    elif kind == "spec":
        key = first.kind.split("/")[1]
        slots = {"topic": ph.SPEC_TOPIC[key], "value": p["specs"][key]}
    else:
        days = p["shipping"]["ships_in_days"]
        slots = {"days": f"{days} day" + ("s" if days != 1 else ""), "name": p["name"]}
        kind = "dispatch"
    return sc.rng.choice(ph.HISTORY_REPLY[kind]).format(**slots)


def _follow_up(sc: _Scene, kind: str, first: _Part, p: _Rec) -> _Part | None:
    """The clarification comment: its meaning (product, carried colour) comes from the history."""
    prev = first.kind.split("/")[0]
    color = first.facts[0] if prev == "stock" else None

    def say(key: str, ref: str | None = "it") -> _Say:
        return _Say(ph.CLARIFY[key], "clarification", ref)

    if kind == "color":
        return _ask_stock(sc, p, "color", say("color"), avoid=color)
    if kind == "size":
        return _ask_stock(sc, p, "color_size" if color else "size", say("size"), keep=color)
    if kind == "price" and prev != "price":
        return _ask_price(sc, p, say("price"))
    if kind in ("region", "dispatch") and prev != "shipping":
        return _ask_ship(sc, p, kind, say(kind))
    if kind == "spec" and prev != "spec" and _spec_keys(p, ph.CLARIFY_SPEC):
        key = sc.rng.choice(_spec_keys(p, ph.CLARIFY_SPEC))
        return _ask_spec(sc, p, _Say(ph.CLARIFY_SPEC[key], "clarification", "it"), key=key)
    other = _pick_product(sc, lambda x: x["id"] != p["id"], display_p=0.3) if kind == "other" else None
    if other is None or prev not in ("price", "shipping"):
        return None
    if prev == "price":  # "and the hoodie?": the same question about another product
        return _ask_price(sc, other, say("other", _ref(sc, other)))
    return _ask_ship(sc, other, "dispatch", say("other", _ref(sc, other)))


def _clarification(sc: _Scene) -> _Part | None:
    p = _pick_product(sc, display_p=0.2)
    if p is None:
        return None
    kind = sc.rng.choice(["price", "stock", "spec", "dispatch"])  # the history's question names p
    first = _ask(sc, kind, p, ref=_ref(sc, p, deictic=False, by_color=kind != "stock"), mode="color")
    if first is None:
        return None
    tries = ((k, _follow_up(sc, k, first, p)) for k in sc.rng.sample(_FOLLOW_UPS, len(_FOLLOW_UPS)))
    kind, second = next(((k, part) for k, part in tries if part is not None), (kind, None))  # first that fits
    if second is None:
        return None
    second.kind = f"followup/{kind}:{second.kind}"
    reply = _history_reply(sc, first, p)
    second.history = [{"role": "user", "content": first.text}, {"role": "assistant", "content": reply}]
    return second


# -- discount, after-sales, order change, FAQ, chat, other -------------------------------------------
def _discount(sc: _Scene) -> _Part | None:
    """Coupons (best code), stacking (one per order), a code's threshold or expiry, a product deal."""
    sub = sc.rng.choices(list(ph.DISCOUNT), weights=[35, 15, 15, 15, 20])[0]
    p = sc.display if sub in ("stack", "threshold", "expiry") else _pick_product(sc, display_p=0.6)
    if not p:
        return None
    result = sc.call("get_discount_rules", {"product": p["id"]})
    coupons, promo, codes = result["coupons"], result["promo_price"], {}
    forbidden = list(ph.CLAIMS["deals"])
    if sub in ("any", "deal"):
        best = max(coupons, key=lambda c: (c["discount"], c["code"]))["code"]
        facts = [_num(promo)] if sub == "deal" and promo is not None else [best]
        if promo is None or abs(promo / result["price"] - 0.5) > 0.02:
            forbidden.append("50% off")
    elif sub == "stack":
        first, second = sc.rng.sample([c["code"] for c in sc.catalog.campaigns], 2)
        facts, codes = ["one coupon per order"], {"code": first, "code2": second}
        forbidden += ph.CLAIMS["stacking"]
    else:
        usable = [c for c in coupons if sub == "expiry" or c["threshold"] > 0]
        if not usable:
            return None
        coupon = sc.rng.choice(usable)
        facts = [_num(coupon["threshold"]) if sub == "threshold" else coupon["expires"]]
        codes = {"code": coupon["code"]}
    call = GoldCall("get_discount_rules", {"product": sc.parg(p)})
    return _part(sc, p, _Say(ph.DISCOUNT[sub], "discount"), call, facts, forbidden, f"discount/{sub}", **codes)


def _after_sales(sc: _Scene) -> _Part:
    """A complaint handed to customer service; the order id (if given) is a gold argument."""
    tpl = sc.rng.choice(ph.AFTER_SALES)
    order_id = str(sc.rng.randint(10**7, 10**8 - 1))
    shown = sc.rng.choice(("#{}", "{}", "no. {}", "#{}")).format(order_id)
    item = sc.rng.choice(sc.catalog.products)
    text = sc.say(tpl, order=shown, item=(item["aliases"] or [item["name"]])[0])
    call = GoldCall("handoff_to_service", {"reason": None, "order_id": order_id if "{order}" in tpl else None})
    return _Part(text, [ph.template_id("after_sales", tpl)], [call], [], list(ph.CLAIMS["refunds"]), "after_sales")


def _order_change(sc: _Scene) -> _Part | None:
    """Switch to a named product, or step next / previous / first through the room order."""
    order, current = sc.room["order"], sc.room["on_display"]
    at = order.index(current)
    sub = sc.rng.choice(["ref"] * 3 + ["next"] * (at < len(order) - 1) + ["previous", "first"] * (at > 0))
    if sub == "ref":
        target = _pick_product(sc, lambda x: x["id"] != current, display_p=0.0)
    else:
        steps = {"next": order[min(at + 1, len(order) - 1)], "previous": order[at - 1], "first": order[0]}
        target = sc.catalog.product(steps[sub])
    if target is None:
        return None
    call = GoldCall("switch_product_link", {"product": target["id"]})
    name = sc.call("switch_product_link", {"product": target["id"]})["name"]
    return _part(sc, target, _Say(ph.ORDER_CHANGE[sub], "order_change"), call, [name], [], f"order_change/via={sub}")


def _faq(sc: _Scene) -> _Part | None:
    """A store-policy question whose own words retrieve its FAQ entry first."""
    entry = sc.rng.choice([e for e in sc.catalog.faq if e["id"] in ph.FAQ])
    tpl = sc.rng.choice(ph.FAQ[entry["id"]])
    text = sc.say(tpl)
    hits = sc.call("search_faq", {"query": text}).get("results", [])
    if not hits or hits[0]["id"] != entry["id"]:
        return None
    call = GoldCall("search_faq", {"query": None})
    facts, forbidden = [FAQ_FACTS[entry["id"]]], list(ph.CLAIMS["promises"])
    return _Part(text, [ph.template_id("faq", tpl)], [call], facts, forbidden, f"faq/{entry['id']}")


def _casual(sc: _Scene) -> _Part:
    tpl = sc.rng.choice(ph.CASUAL)
    return _Part(sc.say(tpl), [ph.template_id("casual_chat", tpl)], [], [], list(ph.CLAIMS["chat"]), "casual_chat")


def _other(sc: _Scene) -> _Part:
    """Off-topic or unanswerable (medical, personal data, politics, ...): a polite refusal, no tool."""
    sub = sc.rng.choice(list(ph.OTHER))
    tpl = sc.rng.choice(ph.OTHER[sub])
    return _Part(sc.say(tpl), [ph.template_id("other", tpl)], [], [], list(ph.CLAIMS[sub]), f"other/{sub}")


_BUILDERS: dict[str, Callable[[_Scene], _Part | None]] = {
    "product_qa": _product_qa,
    "casual_chat": _casual,
    "clarification": _clarification,
    "after_sales": _after_sales,
    "discount": _discount,
    "order_change": _order_change,
    "faq": _faq,
    "other": _other,
}


# -- assembling episodes ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Run:
    seed: int
    world_seed: int
    mode: str
    fault_rate: float
    world: World
    catalog: Catalog
    per_snapshot: int = 1

    def room(self, i: int, rng: random.Random) -> _Rec:
        """Episode ``i``'s room: its own moment, or with ``per_snapshot`` > 1 the moment shared by
        episodes ``k·per_snapshot … (k+1)·per_snapshot − 1`` (many viewers, one product on display)."""
        if self.per_snapshot <= 1:
            return self.world.moment(rng)
        return self.world.moment(random.Random(_derive(self.seed, "snapshot", i // self.per_snapshot)))


def _gold(intent: str, part: _Part, main: int) -> Gold:
    skills, optional, answerable = part.meta()
    required = {c.function_id for c in part.calls}
    return Gold(
        intent=intent,
        tool_calls=tuple(part.calls),
        optional_tools=tuple(t for t in optional if t not in required),
        skills=tuple(skills),
        facts=tuple(dict.fromkeys(part.facts)),
        answerable=answerable,
        notes=f"kind={part.kind}; product={part.product}; main={main}; tpl={','.join(part.tpl)}",
    )


def _checked(episode: Episode, part: _Part, catalog: Catalog) -> Episode | None:
    """``episode`` with forbidden claims that the gold results support removed, or ``None`` if a
    gold call fails or a fact is not in its results (the caller redraws)."""
    results = gold_results(episode, catalog)
    blob = canonical_json(results)
    if any("error" in r for r in results) or not all(fact in blob for fact in episode.gold.facts):
        return None
    facts = [f.lower() for f in episode.gold.facts]
    forbidden = [
        claim
        for claim in dict.fromkeys(part.forbidden)
        if claim.lower() not in blob.lower() and not any(claim.lower() in f or f in claim.lower() for f in facts)
    ]
    return replace(episode, gold=replace(episode.gold, forbidden=tuple(forbidden)))


def _draw(run: _Run, i: int, intent: str, attempt: int) -> Episode | None:
    rng = random.Random(_derive(run.seed, i, attempt))
    sc = _Scene(rng, run.catalog, run.room(i, rng), noise=attempt < _CLEAN_AFTER)
    part = _BUILDERS[intent](sc)
    if part is None:
        return None
    single = run.mode == "single"
    comments = [part.text] if single else ph.with_chatter(sc.rng, part.text, sc.say, last=intent == "clarification")
    episode = Episode(
        episode_id=f"{run.seed}-{i:05d}",
        world_seed=run.world_seed,
        room=sc.room,
        comments=tuple(comments),
        gold=_gold(intent, part, comments.index(part.text)),
        history=tuple(part.history or (ph.greeting(sc.rng, sc.say) if sc.rng.random() < 0.12 else [])),
        mode=run.mode,
        faults=FaultSpec(rate=run.fault_rate, seed=_derive(run.seed, i, "faults") % 2**31),
    )
    return _checked(episode, part, run.catalog)


def _episode(run: _Run, i: int, intent: str) -> Episode:
    for attempt in range(_ATTEMPTS):
        episode = _draw(run, i, intent, attempt)
        if episode is not None:
            return episode
    raise RuntimeError(f"no valid {intent} episode {i} for seed {run.seed} after {_ATTEMPTS} draws; this is a bug")


_world = lru_cache(maxsize=8)(generate_world)


def generate_episodes(
    n: int,
    seed: int,
    *,
    mode: str = "single",
    fault_rate: float = 0.0,
    world_seed: int | None = None,
    comments_per_snapshot: int = 1,
    intent_mix: dict[str, float] | None = None,
) -> list[Episode]:
    """``n`` episodes with the report's intent mix (or ``intent_mix``: shares per intent, for
    training data only — evaluation keeps the report's mix), deterministic in all arguments.

    ``mode``: ``"single"`` (one comment) or ``"multi"`` (2-4 comments, gold for the main one);
    ``fault_rate``: per-call fault probability for each episode's :class:`FaultSpec`;
    ``world_seed``: the generated world (default ``seed``; must be >= 0: negative seeds name the
    bundled catalog, which has no generated rooms); ``comments_per_snapshot``: consecutive episodes
    that share one room moment (1 = every episode its own, the evaluation setting)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not 0.0 <= fault_rate <= 1.0:
        raise ValueError(f"fault_rate is a probability; pass a value in [0, 1], not {fault_rate}")
    world_seed = seed if world_seed is None else world_seed
    if world_seed < 0 or n < 0:
        raise ValueError(f"n and world_seed must be >= 0, got n={n}, world_seed={world_seed}")
    if comments_per_snapshot < 1:
        raise ValueError(f"comments_per_snapshot must be >= 1, got {comments_per_snapshot}")
    if intent_mix is not None and (set(intent_mix) - set(INTENT_MIX) or min(intent_mix.values(), default=0) < 0):
        raise ValueError(f"intent_mix takes shares >= 0 of the intents {', '.join(INTENT_MIX)}, not {intent_mix}")
    run = _Run(seed, world_seed, mode, fault_rate, _world(world_seed), world_catalog(world_seed), comments_per_snapshot)
    return [_episode(run, i, intent) for i, intent in enumerate(_intents(n, seed, intent_mix))]
