"""The Python tools of the default ``livestream`` harness (bound from ``tools/*.yaml``).

Each tool is a plain function: keyword arguments exactly as its JSON Schema declares, a
JSON-serialisable ``dict`` back. Bad input raises ``LookupError`` (no such product) or
``ValueError`` (an argument that cannot be used) with a message that says what to pass instead;
the runtime turns the exception into an observation for the model, so the message is written for
the model to read.

Every tool takes an optional keyword-only ``context`` (see :class:`ToolContext`): the current room
and a per-request scratch dict. With a context, a product argument may be omitted and means the
product on display; ``switch_product_link`` records the new on-display product in
``context.state["on_display"]`` so later calls in the same request follow it. A context may also
carry ``catalog`` (a :class:`~hat.env.catalog.Catalog`): that is how the simulator points these
tools at its generated world instead of the bundled catalog.

Simulated backends: every tool is wrapped by :func:`backend` (``functools.wraps``, so
``inspect.signature`` and ``__name__`` - the function id - are the plain function's). When the
context carries a ``faults`` injector (:class:`~hat.env.faults.FaultInjector`, put there by the
simulator through request resources) the wrapper consults it before the real function: it may
raise a timeout or a backend error, answer emptily, or answer late. Without one the wrapper only
forwards. (Parameters a harness renamed reach these functions under their own names: the tool
registry maps them back through ``metadata.param_map``.)

Results quote world data verbatim (ids, prices, dates) because hooks and judges check the reply's
numbers against tool results; a tool that rounded or paraphrased would make grounded replies look
invented.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from hat.env.catalog import Catalog, catalog_for, tokens
from hat.env.faults import empty_result

__all__ = [
    "TOOL_FUNCTIONS",
    "ToolContext",
    "backend",
    "get_discount_rules",
    "get_price",
    "get_shipping",
    "get_specs",
    "get_stock",
    "handoff_to_service",
    "resolve_reference",
    "search_faq",
    "step_in_order",
    "switch_product_link",
]


class ToolContext(Protocol):
    """What the runtime passes as ``context`` (:class:`hat.harness.tools.ToolContext`): the request's
    ``context`` with the live ``room`` (room_id, host, on_display, order, turns_left, time_left_s,
    campaign), ``state`` (per-request scratch, mutable) and ``resources`` (the simulator's world
    ``catalog`` and ``faults`` injector, when it runs the tools)."""

    context: dict[str, Any]
    state: dict[str, Any]
    resources: dict[str, Any]


_SIZE_WORDS = {"small": "s", "medium": "m", "large": "l", "extra large": "xl", "xlarge": "xl"}
_REGION_WORDS = {
    "us": "US", "usa": "US", "united states": "US", "america": "US",
    "ca": "CA", "canada": "CA",
    "uk": "UK", "united kingdom": "UK", "britain": "UK", "england": "UK", "gb": "UK",
    "eu": "EU", "europe": "EU", "germany": "EU", "france": "EU", "spain": "EU", "italy": "EU",
    "au": "AU", "australia": "AU",
}  # fmt: skip
_NEXT_WORDS = {"next": 1, "previous": -1, "prev": -1, "back": -1, "first": 0, "last": 0}
_FAQ_STOPWORDS = frozenset(
    "a an and are be can do does for from get have how i if in is it me my not of on or the there this "  # noqa: SIM905
    "to what when where will with you your".split()
)


_Tool = TypeVar("_Tool", bound=Callable[..., dict[str, Any]])


# -- simulated backend ------------------------------------------------------------------------------
def backend(fn: _Tool) -> _Tool:
    """Wrap a tool function so that a context's fault injector runs before it (module docstring)."""
    function_id = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> dict[str, Any]:
        faults = (getattr(kwargs.get("context"), "resources", None) or {}).get("faults")
        if faults is not None and faults.before_call(function_id) == "empty":
            named = dict(zip(("query",), args, strict=False)) if function_id == "search_faq" else {}
            return empty_result(function_id, {**named, **kwargs})
        return fn(*args, **kwargs)

    return cast(_Tool, wrapper)


# -- shared helpers ---------------------------------------------------------------------------------
def _room(context: ToolContext) -> dict[str, Any]:
    """The live room of the request (the livestream context provider puts it in the context)."""
    room = context.context.get("room")
    return room if isinstance(room, dict) else {}


def _on_display(context: ToolContext | None) -> str | None:
    if context is None:
        return None
    return context.state.get("on_display") or _room(context).get("on_display")


def _resolve(product: str | None, context: ToolContext | None) -> dict[str, Any]:
    """The product a call is about: ``product`` resolved fuzzily, or the one on display."""
    catalog = catalog_for(context)
    display = _on_display(context)
    if product is None or not product.strip():
        found = catalog.product(display) if display else None
        if found is None:
            raise ValueError("no product given and nothing is on display; pass an id like 'p-dress-01'")
        return found
    found = catalog.find_product(product, prefer=display)
    if found is None:
        raise LookupError(catalog.explain_miss(product))
    return found


def _head(product: dict[str, Any]) -> dict[str, Any]:
    return {"product": product["id"], "name": product["name"]}


def _squash(text: str) -> str:
    return "".join(text.lower().split())


def _pick_option(value: str, options: list[str], kind: str, product: dict[str, Any]) -> str:
    """Match a viewer's color/size to one of the product's options (case/space-insensitive)."""
    if not options:
        raise ValueError(f"{product['id']} has no {kind} options; call again without {kind}")
    wanted = _squash(value)
    wanted = _SIZE_WORDS.get(value.strip().lower(), wanted)
    for option in options:
        if _squash(option) == wanted:
            return option
    raise ValueError(f"{product['id']} comes in {kind}s {', '.join(options)}; there is no {value!r}")


def _options(product: dict[str, Any], field: str) -> list[str]:
    return list(dict.fromkeys(v[field] for v in product["stock"] if v[field] is not None))


# -- product facts ----------------------------------------------------------------------------------
@backend
def get_price(product: str | None = None, *, context: ToolContext | None = None) -> dict[str, Any]:
    """List price and, when a live promotion runs, the promo price."""
    item = _resolve(product, context)
    return {
        **_head(item),
        "currency": catalog_for(context).currency,
        "price": item["price"],
        "promo_price": item["promo_price"],
        "promo_active": item["promo_price"] is not None,
    }


@backend
def get_stock(
    product: str | None = None,
    color: str | None = None,
    size: str | None = None,
    *,
    context: ToolContext | None = None,
) -> dict[str, Any]:
    """Units in stock, in total or for one color and/or size."""
    item = _resolve(product, context)
    chosen_color = _pick_option(color, _options(item, "color"), "color", item) if color else None
    chosen_size = _pick_option(size, _options(item, "size"), "size", item) if size else None
    variants = [
        dict(v) for v in item["stock"] if chosen_color in (None, v["color"]) and chosen_size in (None, v["size"])
    ]
    qty = sum(v["qty"] for v in variants)
    return {
        **_head(item),
        "color": chosen_color,
        "size": chosen_size,
        "qty": qty,
        "in_stock": qty > 0,
        "variants": variants,
    }


@backend
def get_specs(product: str | None = None, *, context: ToolContext | None = None) -> dict[str, Any]:
    """Brand, category and the specification sheet (colors, sizes, material, ...)."""
    item = _resolve(product, context)
    specs = copy.deepcopy(item["specs"])
    return {**_head(item), "brand": item["brand"], "category": item["category"], "specs": specs}


@backend
def get_discount_rules(product: str | None = None, *, context: ToolContext | None = None) -> dict[str, Any]:
    """Coupons and promotion rules. For a product (or the one on display): its promo price and the
    coupons that apply to its category. With neither: every coupon in the room."""
    catalog = catalog_for(context)
    if product is None and _on_display(context) is None:
        coupons = [dict(c) for c in catalog.campaigns]
        return {"product": None, "coupons": coupons, "rules": list(catalog.discount_rules)}
    item = _resolve(product, context)
    unit_price = item["promo_price"] if item["promo_price"] is not None else item["price"]
    coupons = [
        {**c, "reached_with_one_unit": unit_price >= c["threshold"]}
        for c in catalog.campaigns
        if not c.get("categories") or item["category"] in c["categories"]
    ]
    return {
        **_head(item),
        "price": item["price"],
        "promo_price": item["promo_price"],
        "coupons": coupons,
        "rules": list(catalog.discount_rules),
    }


@backend
def get_shipping(
    product: str | None = None, region: str | None = None, *, context: ToolContext | None = None
) -> dict[str, Any]:
    """Dispatch time, fee, free-shipping threshold, regions and the return policy."""
    item = _resolve(product, context)
    shipping = item["shipping"]
    result = {**_head(item), **copy.deepcopy(shipping), "return_policy": item.get("return_policy")}
    if region is not None:
        if not region.strip():
            raise ValueError("region is empty; pass a region such as 'US' or 'UK', or leave it out")
        code = _REGION_WORDS.get(region.strip().lower(), region.strip().upper())
        result.update(region=code, ships_to_region=code in shipping["regions"])
    return result


# -- room actions -----------------------------------------------------------------------------------
@backend
def search_faq(query: str, *, context: ToolContext | None = None) -> dict[str, Any]:
    """The (up to) three FAQ entries sharing the most words with ``query``; tags count double."""
    query_tokens = set(tokens(query)) - _FAQ_STOPWORDS
    if not query_tokens:
        raise ValueError("query has no searchable words; pass the viewer's question, e.g. 'return policy'")
    scored = []
    for entry in catalog_for(context).faq:
        tag_tokens = {t for tag in entry.get("tags", []) for t in tokens(tag)}
        score = 2 * len(query_tokens & tag_tokens) + len(query_tokens & set(tokens(entry["question"])))
        if score:
            scored.append((score, entry))
    scored.sort(key=lambda item: -item[0])  # stable: catalog order breaks ties
    results = [
        {"id": e["id"], "question": e["question"], "answer": e["answer"], "score": score} for score, e in scored[:3]
    ]
    return {"query": query, "results": results}


def _step_in_order(product: str, catalog: Catalog, context: ToolContext | None) -> str | None:
    """Resolve "next" / "previous" / "first" / "last" against the room's product order."""
    room = _room(context) if context is not None else catalog.room
    return step_in_order(product, list(room.get("order", [])), _on_display(context))


def step_in_order(text: str, order: list[str], current: str | None) -> str | None:
    """The product id that "next" / "previous" / "first" / "last" in ``text`` names in the room
    ``order`` seen from ``current``; ``None`` when ``text`` has no such word; ``ValueError`` (with
    what to do instead) when the step leads nowhere."""
    words = [w for w in re.findall(r"[a-z]+", text.lower()) if w in _NEXT_WORDS]
    if not words:
        return None
    word = words[0]
    if not order:
        raise ValueError(f"cannot go {word!r}: the room has no product order; pass a product id")
    if word in ("first", "last"):
        return order[0] if word == "first" else order[-1]
    if current not in order:
        raise ValueError(f"cannot go {word!r}: nothing on display is in the room order; pass a product id")
    index = order.index(current) + _NEXT_WORDS[word]
    if not 0 <= index < len(order):
        end = "last" if index >= len(order) else "first"
        raise ValueError(f"{current} is the {end} product in the order; pass a product id instead")
    return order[index]


def resolve_reference(text: str, catalog: Catalog, room: dict[str, Any], *, steps: bool = False) -> str | None:
    """The product id a tool would take ``text`` to mean in ``room`` (fuzzy name, alias or id, the
    display winning ties; with ``steps``, also "next"/"previous"/... as ``switch_product_link``
    reads them); ``None`` when it would fail. For judges that check a written argument whose call
    returned nothing to compare with."""
    display = room.get("on_display")
    if steps:
        try:
            stepped = step_in_order(text, [str(p) for p in room.get("order", [])], display)
        except ValueError:
            return None
        if stepped is not None:
            return stepped
    found = catalog.find_product(text, prefer=display)
    return None if found is None else str(found["id"])


@backend
def switch_product_link(product: str, *, context: ToolContext | None = None) -> dict[str, Any]:
    """Put ``product`` (an id, a name, or "next"/"previous"/"first"/"last") on screen."""
    catalog = catalog_for(context)
    stepped = _step_in_order(product, catalog, context)
    item = catalog.product(stepped) if stepped else _resolve(product, context)
    if item is None:  # only if the room order names a product the catalog lacks
        raise LookupError(f"the room order names {stepped!r}, which is not in the catalog")
    previous = _on_display(context)
    if context is not None:
        context.state["on_display"] = item["id"]
    order = list((_room(context) if context is not None else catalog.room).get("order", []))
    return {
        "on_display": item["id"],
        "name": item["name"],
        "previous": previous,
        "changed": previous != item["id"],
        "position": order.index(item["id"]) + 1 if item["id"] in order else None,
        "of": len(order),
    }


@backend
def handoff_to_service(
    reason: str, order_id: str | None = None, *, context: ToolContext | None = None
) -> dict[str, Any]:
    """Open a customer-service ticket. The id is a hash of the normalised reason, so the same
    complaint always yields the same ticket (replays and judges can compare it)."""
    text = " ".join(reason.split())
    if not text:
        raise ValueError("reason is empty; describe the viewer's problem, e.g. 'refund for a torn dress'")
    order = (order_id or "").strip().lstrip("#") or None
    ticket = "CS-" + hashlib.sha256(text.lower().encode("utf-8")).hexdigest()[:8].upper()
    if context is not None:
        context.state.setdefault("handoffs", []).append(ticket)
    return {
        "ticket_id": ticket,
        "status": "queued",
        "reason": text,
        "order_id": order,
        "next_step": "a customer-service agent will message the viewer privately",
    }


TOOL_FUNCTIONS: dict[str, Callable[..., dict[str, Any]]] = {
    fn.__name__: fn
    for fn in (
        get_price,
        get_stock,
        get_specs,
        get_discount_rules,
        get_shipping,
        search_faq,
        switch_product_link,
        handoff_to_service,
    )
}
"""Function id -> implementation; the ids are the stable names the simulator and judges use."""
