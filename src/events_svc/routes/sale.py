"""Admin routes of the sale side: the billing side's three order facts (`router`), and the
read of the host products an event links to (`products_router`: listed with the booths'
routes, since booth categories and tickets name those products; reads need `event:read`).

A fact is about the order of the actor's company: (company, `order_id`) is the order, and
another company's order of the same id is never touched (`verbs/sale/orders`)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Response

from events_svc.actors import Actor
from events_svc.models import Page
from events_svc.models.booths import LinkedProductView
from events_svc.models.sale import OrderConfirmed, OrderFact, SeamAnswer
from events_svc.routes.deps import Ctx, Cursor, Limit, answer, require
from events_svc.verbs.sale import linked_products, seam

router = APIRouter(tags=["sale seam"])
products_router = APIRouter(tags=["booths"])

Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("seam:write")]


@router.post("/admin/seam/orders/confirmed", response_model=SeamAnswer)
async def order_confirmed(ctx: Ctx, actor: Write, body: OrderConfirmed) -> Response:
    """Mint the order's attendees (open when free, held drafts when there is a total to
    pay) and book its booths; exactly once per delivery key. Another company's event
    answers as a missing one; a platform actor's order is its events' company's."""
    now = ctx.clock()
    result = await seam.deliver(
        ctx.db(),
        actor,
        "confirmed",
        body,
        lambda conn, order: seam.apply_confirmed(conn, actor, body, order, now),
        now,
    )
    return answer(SeamAnswer, result)


@router.post("/admin/seam/orders/paid", response_model=SeamAnswer)
async def order_paid(ctx: Ctx, actor: Write, body: OrderFact) -> Response:
    """Lift the order's unpaid attendees to open + sold (forward only); latch its booths
    paid; exactly once per delivery key. Only the actor's company's order is touched."""
    now = ctx.clock()
    result = await seam.deliver(
        ctx.db(),
        actor,
        "paid",
        body,
        lambda conn, order: seam.apply_paid(conn, actor, order, now),
        now,
    )
    return answer(SeamAnswer, result)


@router.post("/admin/seam/orders/cancelled", response_model=SeamAnswer)
async def order_cancelled(ctx: Ctx, actor: Write, body: OrderFact) -> Response:
    """Cancel every attendee of the order (sale status kept; booths untouched); exactly
    once per delivery key. Only the actor's company's order is touched."""
    now = ctx.clock()
    result = await seam.deliver(
        ctx.db(),
        actor,
        "cancelled",
        body,
        lambda conn, order: seam.apply_cancelled(conn, actor, order, now),
        now,
    )
    return answer(SeamAnswer, result)


# --- the linked-products read ----------------------------------------------------------------


@products_router.get("/admin/linked-products", response_model=Page[LinkedProductView])
async def list_linked_products(
    ctx: Ctx,
    actor: Read,
    event_id: UUID | None = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> Response:
    found = await linked_products.linked_products(
        ctx.db(), actor, event_id=event_id, limit=limit, cursor=cursor
    )
    return answer(Page[LinkedProductView], found)
