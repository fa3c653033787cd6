"""Whose order a seam fact is about: an order is (company, order id), never the order id
alone, so two companies using one order id have two independent orders.

The company of an order is the company of the actor that sends its facts. A platform
actor (no company) acts on the company of the order's events: for `confirmed`, the one
company of the events its lines name (shared events name none; events of several
companies: 422 `company_not_allowed`, an order belongs to one company); for `paid` and
`cancelled`, the one company that has an order of that id (none yet: a platform order,
kept for a later fact; several: 409 `conflict`, the platform cannot tell which; each
company then sends the fact with its own token). An order of no company is a platform
order: only a platform actor reaches it, and only its rows on shared events are in it.

The inbox keys of an order's facts (`consumer_of`) are per order company too: a
redelivery finds its recorded answer whichever of the company's tokens or the platform
sends it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection

CONSUMER = "event_sale"

# the companies of the events a platform actor's confirmed fact names (unknown ones are
# left to the fact's own not_found)
_EVENT_COMPANIES = """
SELECT DISTINCT company_id FROM event.events
WHERE id = ANY($1::uuid[]) AND company_id IS NOT NULL
ORDER BY company_id
"""
# the companies that have an order of this id (NULL: the platform's own order)
_ORDER_COMPANIES = """
SELECT company_id FROM event.sale_orders WHERE order_id = $1 ORDER BY company_key
"""


@dataclass(frozen=True)
class OrderKey:
    """An order's identity: its company (None: a platform order) and the host's order id."""

    company_id: UUID | None
    order_id: UUID


def consumer_of(company_id: UUID | None) -> str:
    """The inbox's key space of an order company: another company's delivery key never
    answers this one's."""
    return f"{CONSUMER}:{company_id or '*'}"


async def order_of_lines(
    conn: Connection, actor: Actor, order_id: UUID, event_ids: Iterable[UUID]
) -> OrderKey:
    """The order a confirmed fact names: the actor's company's; a platform actor's, the
    one company of the events the lines name (none: a platform order)."""
    if actor.company_id is not None:
        return OrderKey(actor.company_id, order_id)
    rows = await conn.fetch(_EVENT_COMPANIES, sorted(set(event_ids)))
    if len(rows) > 1:
        raise errors.CompanyNotAllowed(
            "An order belongs to one company: its lines name events of several companies.",
            field="lines",
        )
    return OrderKey(rows[0]["company_id"] if rows else None, order_id)


async def order_of_id(conn: Connection, actor: Actor, order_id: UUID) -> OrderKey:
    """The order a paid or cancelled fact names: the actor's company's; a platform
    actor's, the one order of that id (none yet: a platform order)."""
    if actor.company_id is not None:
        return OrderKey(actor.company_id, order_id)
    rows = await conn.fetch(_ORDER_COMPANIES, order_id)
    if len(rows) > 1:
        raise errors.Conflict(
            "Several companies have an order of this id: send the fact with the company's "
            "own token.",
            field="order_id",
        )
    return OrderKey(rows[0]["company_id"] if rows else None, order_id)
