"""The support desk's Python side: two tools and the context provider, over ``data/db.json``.

The tools are plain typed functions; ``@tool`` derives their schema from the type hints and the
docstring, and ``tools/*.yaml`` bind them by name (``python:support_desk:lookup_order``). The YAML
files are what ``hat.harness.spec_of`` gives for these functions (``tests/test_support_desk.py``
checks that they have not drifted). Regenerate one with::

    cd examples/support-desk && python -c \\
        "import support_desk; from hat.harness import tool_yaml; print(tool_yaml(support_desk.lookup_order))"

The database is a small JSON file read once; a request may bring its own (``Request(resources=
{"support_db": {...}})``), as a production deployment would bring a database client.
"""

from __future__ import annotations

import datetime
import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from hat.harness import Request, ToolContext, tool

DB_FILE = Path(__file__).parent / "data" / "db.json"


@functools.cache
def default_db() -> dict[str, Any]:
    return json.loads(DB_FILE.read_text(encoding="utf-8"))


def _db(context: ToolContext | None = None) -> dict[str, Any]:
    given = context.resources.get("support_db") if context is not None else None
    return given if given is not None else default_db()


def _days_between(start: str, end: str) -> int:
    return (datetime.date.fromisoformat(end) - datetime.date.fromisoformat(start)).days


@tool(idempotent=True)
def lookup_order(order_id: str, *, context: ToolContext) -> dict[str, Any]:
    """Look up one of the customer's orders: item, status, carrier and tracking, dates.

    Args:
        order_id: The order number, like SD-1001.
    """
    db = _db(context)
    key = order_id.strip().upper()
    order = db["orders"].get(key)
    customer = context.context.get("customer_id")
    if not customer:
        raise PermissionError("the customer is not signed in; ask them to sign in to see their orders")
    if order is None or order["customer_id"] != customer:
        raise LookupError(f"no order {key} on this customer's account; ask them to check the number")
    found = {"order_id": key, **{k: v for k, v in order.items() if k != "customer_id"}}
    if "delivered" in order:
        found["days_since_delivery"] = _days_between(order["delivered"], db["as_of"])
    return found


@tool(idempotent=True)
def refund_policy(category: Literal["electronics", "apparel", "home"], *, context: ToolContext) -> dict[str, Any]:
    """The return and refund policy of a product category.

    Args:
        category: The order's category, as lookup_order reports it.
    """
    return {"category": category, **_db(context)["refund_policies"][category]}


def customer_context(request: Request) -> Request:
    """The harness's context provider: fills ``customer`` (name, tier, order numbers) from the
    ``customer_id`` of the request's context. A request without a known one is an anonymous
    visitor. A ``customer`` record the caller sent is always replaced or dropped: the
    ``grounded_claims`` hook trusts the numbers in it (``trusted_context`` in harness.yaml), so it
    must come from the database, never from the caller."""
    context = dict(request.context)
    sent = context.pop("customer", None)
    customer_id = context.get("customer_id")
    db = default_db()
    record = db["customers"].get(customer_id) if isinstance(customer_id, str) else None
    if record is None:
        return replace(request, context=context) if sent is not None else request
    orders = sorted(k for k, o in db["orders"].items() if o["customer_id"] == customer_id)
    context["customer"] = {"id": customer_id, "name": record["name"], "tier": record["tier"], "orders": orders}
    return replace(request, context=context)
