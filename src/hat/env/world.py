"""The world a simulated episode runs in, by seed.

``world_seed < 0`` means the small fixed catalog bundled with the package (what the default
harness's tools read outside the simulator); any other seed builds a generated world
(:mod:`hat.env.worldgen`). Catalogs are cached per seed: building one is deterministic, and every
episode of a run shares its world.
"""

from __future__ import annotations

from functools import lru_cache

from hat.env.catalog import Catalog, load_catalog

__all__ = ["world_catalog"]


@lru_cache(maxsize=16)
def world_catalog(seed: int) -> Catalog:
    if seed < 0:
        return load_catalog()
    from hat.env.worldgen import generate_world

    return generate_world(seed).catalog()
