"""The seeded world generator: determinism, shape (the bundled catalog's record shapes), and that
the existing livestream tools run unchanged on every generated product."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from hat.env import livestream_tools as tools
from hat.env.catalog import CATALOG_PATH, Catalog, load_catalog
from hat.env.world import world_catalog
from hat.env.worldgen import FAQ_FACTS, World, generate_world
from hat.harness.state import canonical_json
from hat.harness.tools import ToolContext

SEEDS = (0, 1, 7)


@pytest.fixture(scope="module")
def world() -> World:
    return generate_world(0)


def context(world: World, room_index: int = 0) -> ToolContext:
    return ToolContext(context={"room": dict(world.rooms[room_index])}, resources={"catalog": world.catalog()})


def test_same_seed_same_bytes_in_process_and_in_a_subprocess() -> None:
    first = canonical_json(generate_world(3).to_dict())
    assert canonical_json(generate_world(3).to_dict()) == first
    code = "from hat.env.worldgen import generate_world; print(generate_world(3).content_hash())"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # str hashing must not leak into the world
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == generate_world(3).content_hash()


def test_different_seeds_give_different_worlds() -> None:
    hashes = {generate_world(seed).content_hash() for seed in range(6)}
    assert len(hashes) == 6
    names = [{p["name"] for p in generate_world(seed).products} for seed in (0, 1)]
    assert names[0] != names[1]


@pytest.mark.parametrize("seed", SEEDS)
def test_world_shape(seed: int) -> None:
    world = generate_world(seed)
    per_category = Counter(p["category"] for p in world.products)
    assert len(per_category) >= 8 and min(per_category.values()) >= 3
    assert 24 <= len(world.products) <= 40
    assert len({p["id"] for p in world.products}) == len(world.products)
    assert len(world.faq) >= 15 and len(world.campaigns) >= 3 and len(world.rooms) >= 4
    assert any(v["qty"] == 0 for p in world.products for v in p["stock"])  # some variants sold out
    assert any(p["promo_price"] is None for p in world.products)
    assert any(p["promo_price"] is not None for p in world.products)
    ids = {p["id"] for p in world.products}
    for room in world.rooms:
        assert room["on_display"] in room["order"] and set(room["order"]) <= ids
        assert len(room["host_script"]) >= 4 and all(isinstance(line, str) for line in room["host_script"])
        assert room["turns_left"] > 0 and room["time_left_s"] > 0 and room["campaign"]


def test_records_have_the_bundled_catalog_shapes(world: World) -> None:
    bundled = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    product_keys = set(bundled["products"][0])
    assert all(set(p) == product_keys for p in world.products)
    assert all(set(p["shipping"]) == set(bundled["products"][0]["shipping"]) for p in world.products)
    assert all(set(v) == {"color", "size", "qty"} for p in world.products for v in p["stock"])
    assert all(set(f) == set(bundled["faq"][0]) for f in world.faq)
    assert all(set(c) == set(bundled["campaigns"][0]) for c in world.campaigns)
    assert all(set(r) == set(bundled["room"]) | {"host_script"} for r in world.rooms)
    catalog_dict = world.to_catalog_dict()
    assert set(catalog_dict) == set(bundled)
    assert Catalog.from_dict(catalog_dict).products == world.catalog().products


def test_catalog_per_room_and_world_catalog_cache(world: World) -> None:
    for room in world.rooms:
        assert world.catalog(room["room_id"]).room == room
    with pytest.raises(KeyError, match="known rooms"):
        world.room("room-999")
    assert world_catalog(0).products == world.catalog().products
    assert world_catalog(-1) is load_catalog()  # negative seeds keep meaning the bundled catalog


@pytest.mark.parametrize("seed", SEEDS)
def test_every_product_resolves_through_the_existing_tools(seed: int) -> None:
    world = generate_world(seed)
    ctx = context(world)
    catalog = ctx.resources["catalog"]
    for product in world.products:
        pid = product["id"]
        assert catalog.find_product(product["name"])["id"] == pid  # type: ignore[index]
        assert product["aliases"], f"{pid} lost all its aliases"
        for alias in product["aliases"]:
            assert catalog.find_product(alias)["id"] == pid  # type: ignore[index]
        price = tools.get_price(pid, context=ctx)
        assert price["product"] == pid and price["price"] == product["price"]
        assert json.dumps(product["price"]) in canonical_json(price)  # quoted verbatim
        assert product["price"] != int(product["price"])  # never a whole number: "45.9", not "45.0"
        for variant in product["stock"]:
            stock = tools.get_stock(pid, color=variant["color"], size=variant["size"], context=ctx)
            assert stock["qty"] == variant["qty"]
        assert tools.get_specs(pid, context=ctx)["specs"] == product["specs"]
        assert tools.get_shipping(pid, region="US", context=ctx)["ships_to_region"] is True
        assert tools.get_discount_rules(pid, context=ctx)["coupons"]  # the site-wide coupons apply
        assert tools.switch_product_link(pid, context=ctx)["on_display"] == pid


def test_faq_facts_and_retrieval(world: World) -> None:
    ctx = context(world)
    for entry in world.faq:
        assert FAQ_FACTS[entry["id"]] in entry["answer"]
        hits = tools.search_faq(entry["question"], context=ctx)["results"]
        assert hits and hits[0]["id"] == entry["id"]


def test_moment_is_a_private_copy(world: World) -> None:
    rng = random.Random(5)
    room = world.moment(rng)
    assert room["on_display"] in room["order"]
    room["order"].append("x")
    assert "x" not in world.room(room["room_id"])["order"]
    assert world.moment(random.Random(5)) == {**room, "order": room["order"][:-1]}
