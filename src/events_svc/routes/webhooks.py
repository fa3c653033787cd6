"""Webhook endpoints for integrators (scope `webhook:write`): CRUD, secret rotation,
ping, the delivery log and redelivery. The messages themselves are written by the verbs
that make the changes and sent by the loop's webhooks channel (`loops/webhooks.py`)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Response, status

from events_svc.actors import Actor
from events_svc.models import (
    Page,
    WebhookDeliveryView,
    WebhookEndpointBody,
    WebhookEndpointCreated,
    WebhookEndpointPatch,
    WebhookEndpointView,
    WebhookSecretView,
)
from events_svc.routes.deps import Ctx, Cursor, Limit, answer, require
from events_svc.verbs import webhooks as verbs

Hooks = Annotated[Actor, require("webhook:write")]

router = APIRouter(tags=["webhooks"])


@router.get("/admin/webhooks", response_model=Page[WebhookEndpointView])
async def list_webhooks(
    ctx: Ctx, actor: Hooks, limit: Limit = None, cursor: Cursor = None
) -> Response:
    """The company's endpoints, oldest first (never their secrets)."""
    page = await verbs.list_endpoints(ctx.db(), actor, cursor=cursor, limit=limit)
    return answer(Page[WebhookEndpointView], page)


@router.post(
    "/admin/webhooks",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookEndpointCreated,
)
async def create_webhook(ctx: Ctx, actor: Hooks, body: WebhookEndpointBody) -> Response:
    """A new endpoint; the answer carries its `secret`, this once. `include_pii` needs
    `registration:pii`; the URL must be public (422 `webhook_url_not_allowed`)."""
    created = await verbs.create_endpoint(
        ctx.db(), ctx.egress, actor, body.model_dump(), ctx.clock()
    )
    return answer(WebhookEndpointCreated, created, status_code=201)


@router.get("/admin/webhooks/{endpoint_id}", response_model=WebhookEndpointView)
async def get_webhook(ctx: Ctx, actor: Hooks, endpoint_id: UUID) -> Response:
    return answer(WebhookEndpointView, await verbs.get_endpoint(ctx.db(), actor, endpoint_id))


@router.patch("/admin/webhooks/{endpoint_id}", response_model=WebhookEndpointView)
async def patch_webhook(
    ctx: Ctx, actor: Hooks, endpoint_id: UUID, body: WebhookEndpointPatch
) -> Response:
    """Change the fields sent; `active: true` enables a disabled endpoint again."""
    saved = await verbs.patch_endpoint(
        ctx.db(), ctx.egress, actor, endpoint_id, body.given(), ctx.clock()
    )
    return answer(WebhookEndpointView, saved)


@router.delete("/admin/webhooks/{endpoint_id}", status_code=204, response_class=Response)
async def delete_webhook(ctx: Ctx, actor: Hooks, endpoint_id: UUID) -> Response:
    """Delete the endpoint with its messages and delivery log."""
    await verbs.delete_endpoint(ctx.db(), actor, endpoint_id)
    return Response(status_code=204)


@router.post("/admin/webhooks/{endpoint_id}/rotate-secret", response_model=WebhookSecretView)
async def rotate_webhook_secret(ctx: Ctx, actor: Hooks, endpoint_id: UUID) -> Response:
    """A new secret, shown once; the previous one still signs for 24 hours."""
    rotated = await verbs.rotate_secret(ctx.db(), actor, endpoint_id, ctx.clock())
    return answer(WebhookSecretView, rotated)


@router.post(
    "/admin/webhooks/{endpoint_id}/ping",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=WebhookDeliveryView,
)
async def ping_webhook(ctx: Ctx, actor: Hooks, endpoint_id: UUID) -> Response:
    """Queue a `ping` message to this endpoint, whatever its event types; its attempt."""
    queued = await verbs.ping(ctx.db(), actor, endpoint_id, ctx.clock())
    return answer(WebhookDeliveryView, queued, status_code=202)


@router.get("/admin/webhooks/{endpoint_id}/deliveries", response_model=Page[WebhookDeliveryView])
async def list_webhook_deliveries(
    ctx: Ctx, actor: Hooks, endpoint_id: UUID, limit: Limit = None, cursor: Cursor = None
) -> Response:
    """One row per attempt, newest first."""
    page = await verbs.list_deliveries(ctx.db(), actor, endpoint_id, cursor=cursor, limit=limit)
    return answer(Page[WebhookDeliveryView], page)


@router.post(
    "/admin/webhook-deliveries/{delivery_id}/redeliver",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=WebhookDeliveryView,
)
async def redeliver_webhook(ctx: Ctx, actor: Hooks, delivery_id: UUID) -> Response:
    """Send that attempt's message again now, with the same `webhook-id`; the attempt
    that will (409 `webhook_endpoint_disabled` while the endpoint is disabled)."""
    queued = await verbs.redeliver(ctx.db(), actor, delivery_id, ctx.clock())
    return answer(WebhookDeliveryView, queued, status_code=202)
