"""The live room's world data: products, FAQ, campaigns and the room, behind one small interface.

Why one module: the default ``livestream`` harness ships with a fixed catalog
(``data/catalog.json``) so that it runs out of the box, but the simulator replaces it with a seeded,
generated world. Every read of world data goes through :class:`Catalog` (tools reach it through
``catalog_for(context)``), so swapping the world means building another :class:`Catalog` with
:meth:`Catalog.from_dict` and handing it over as ``context.resources["catalog"]``; no tool changes.

Records stay plain dicts (they are JSON on disk and JSON in tool observations). The cached catalog
is shared, so treat its records as read-only; :meth:`Catalog.new_room` hands out a private copy of
the room for code that mutates room state.

Product references are resolved the way a viewer makes them: an exact id (``"p-dress-01"``), a
name or alias (``"dress"``, ``"air fryer"``), a color (``"the blue one"``), with small typos
(``"earbudz"``). :meth:`Catalog.rank_products` scores every product by weighted token overlap;
:meth:`Catalog.find_product` returns the single best one, or ``None`` when nothing matches or the
best score is shared (``"black"`` fits three products) and ``prefer`` does not break the tie.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CATALOG_PATH",
    "Catalog",
    "catalog_for",
    "find_product",
    "load_catalog",
    "product_index",
    "token_score",
    "tokens",
]

CATALOG_PATH = Path(__file__).parent / "data" / "catalog.json"

_PRODUCT_KEYS = ("id", "name", "brand", "category", "price", "promo_price", "stock", "specs", "shipping")
_ROOM_KEYS = ("room_id", "host", "on_display", "order", "turns_left", "time_left_s", "campaign")

# Words that carry no product identity in "can you show me the blue one please".
_STOPWORDS = frozenset(
    "a an and any are can do does for have how i in is it its me much my of on one please pls show "  # noqa: SIM905
    "that the this those these to what which with you your item product thing link".split()
)

# Field weights for matching: names identify a product far better than a shared color does.
_WEIGHTS = {"name": 3.0, "alias": 3.0, "brand": 2.0, "category": 2.0, "color": 2.0}
_FUZZY_CUTOFF = 0.8  # difflib ratio for typo'd tokens ("earbudz", "hodie"); they score at 80%


def tokens(text: str) -> list[str]:
    """Lower-case word tokens with a crude plural strip (``sizes`` -> ``size``), shared by every
    matcher here and in the tools, so both sides of a comparison are normalised the same way."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return [w[:-1] if len(w) >= 5 and w.endswith("s") and not w.endswith("ss") else w for w in words]


def product_index(product: Mapping[str, Any]) -> dict[str, float]:
    """token -> weight of the strongest field it appears in."""
    fields: list[tuple[str, Iterable[str]]] = [
        ("name", [product["name"]]),
        ("alias", product.get("aliases", [])),
        ("brand", [product["brand"]]),
        ("category", [product["category"]]),
        ("color", product.get("specs", {}).get("colors", [])),
    ]
    index: dict[str, float] = {}
    for field_name, texts in fields:
        for text in texts:
            for tok in tokens(text):
                index[tok] = max(index.get(tok, 0.0), _WEIGHTS[field_name])
    return index


def token_score(tok: str, index: Mapping[str, float], *, fuzzy: bool) -> float:
    if tok in index:
        return index[tok]
    if not fuzzy or len(tok) < 4:  # short tokens ("m", "xl", "red") only count when exact
        return 0.0
    close = difflib.get_close_matches(tok, list(index), n=1, cutoff=_FUZZY_CUTOFF)
    return 0.8 * index[close[0]] if close else 0.0


@dataclass(frozen=True)
class Catalog:
    """World data for one live room. Build it with :meth:`from_dict` (validated) or :func:`load_catalog`."""

    currency: str
    products: tuple[dict[str, Any], ...]
    faq: tuple[dict[str, Any], ...]
    campaigns: tuple[dict[str, Any], ...]
    discount_rules: tuple[str, ...]
    room: dict[str, Any]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Catalog:
        """Validate and wrap catalog data; raises ``ValueError`` naming every problem found."""
        problems = _validate(data)
        if problems:
            listed = "\n".join(f"  - {p}" for p in problems)
            raise ValueError(f"catalog data is invalid; fix these:\n{listed}")
        return cls(
            currency=str(data.get("currency", "USD")),
            products=tuple(data["products"]),
            faq=tuple(data.get("faq", [])),
            campaigns=tuple(data.get("campaigns", [])),
            discount_rules=tuple(data.get("discount_rules", [])),
            room=dict(data["room"]),
        )

    # -- lookup -----------------------------------------------------------------------------------
    def product(self, product_id: str) -> dict[str, Any] | None:
        return next((p for p in self.products if p["id"] == product_id), None)

    def new_room(self) -> dict[str, Any]:
        """A private, mutable copy of the room state."""
        return copy.deepcopy(self.room)

    def rank_products(self, query: str) -> list[tuple[float, dict[str, Any]]]:
        """Every product with a positive match score for ``query``, best first (catalog order on ties)."""
        query_tokens = [t for t in tokens(query) if t not in _STOPWORDS]
        indexes = [product_index(p) for p in self.products]
        # A word that is exact somewhere ("black") is not a typo of another word ("block").
        known = {t for t in query_tokens if any(t in index for index in indexes)}
        scored = []
        for product, index in zip(self.products, indexes, strict=True):
            score = sum(token_score(t, index, fuzzy=t not in known) for t in query_tokens)
            if score > 0:
                scored.append((round(score, 3), product))
        return sorted(scored, key=lambda item: -item[0])

    def find_product(self, query: str, *, prefer: str | None = None) -> dict[str, Any] | None:
        """Resolve an id or a fuzzy reference. ``prefer`` (usually the product on display) wins a tie
        it takes part in, so "the black one" means the on-screen item when it comes in black."""
        text = query.strip()
        exact = self.product(text) or next((p for p in self.products if p["id"] in text.lower()), None)
        if exact is not None:
            return exact
        best = self._best(text)
        if len(best) == 1:
            return best[0]
        return next((p for p in best if p["id"] == prefer), None)

    def explain_miss(self, query: str) -> str:
        """Why ``find_product(query)`` found nothing, phrased as what to do next."""
        best = self._best(query)
        if len(best) > 1:
            options = ", ".join(f"{p['id']} ({p['name']})" for p in best)
            return f"{query!r} matches several products: {options}; pass one of these ids"
        ids = ", ".join(p["id"] for p in self.products)
        return f"no product matches {query!r}; pass a product id, one of: {ids}"

    def _best(self, query: str) -> list[dict[str, Any]]:
        ranked = self.rank_products(query)
        return [p for score, p in ranked if score == ranked[0][0]] if ranked else []


def _validate(data: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    products = data.get("products")
    if not isinstance(products, list) or not products:
        return ["'products' must be a non-empty list"]
    ids = [p.get("id") for p in products]
    for i, product in enumerate(products):
        missing = [k for k in _PRODUCT_KEYS if k not in product]
        if missing:
            problems.append(f"products[{i}] ({product.get('id', '?')}) lacks {', '.join(missing)}")
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        problems.append(f"duplicate product ids: {', '.join(map(str, duplicates))}")
    room = data.get("room")
    if not isinstance(room, dict):
        return [*problems, "'room' must be a mapping"]
    problems += [f"room lacks {k!r}" for k in _ROOM_KEYS if k not in room]
    unknown = [pid for pid in [room.get("on_display"), *room.get("order", [])] if pid not in ids]
    if unknown:
        problems.append(f"room refers to unknown products: {', '.join(map(str, unknown))}")
    return problems


@functools.lru_cache(maxsize=8)
def load_catalog(path: str | Path | None = None) -> Catalog:
    """The catalog from ``path`` (default: the bundled ``data/catalog.json``), parsed once and cached."""
    source = Path(path) if path is not None else CATALOG_PATH
    return Catalog.from_dict(json.loads(source.read_text(encoding="utf-8")))


def catalog_for(context: Any = None) -> Catalog:
    """The catalog a tool call should read: ``context.resources["catalog"]`` when the caller (the
    simulator) provides one, else the bundled default."""
    catalog = (getattr(context, "resources", None) or {}).get("catalog")
    return catalog if isinstance(catalog, Catalog) else load_catalog()


def find_product(query: str, *, prefer: str | None = None, catalog: Catalog | None = None) -> dict[str, Any] | None:
    """Resolve ``query`` (an id or a fuzzy reference) against ``catalog`` (default: the bundled one)."""
    return (catalog or load_catalog()).find_product(query, prefer=prefer)
