"""What the webhook delivery probes share: a clock they move, a delivery loop they turn
by hand (the app's scheduler is off in the probes), and endpoint helpers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from events_svc.adapters.webhook_sender import WebhookSender
from events_svc.webhook_loop import WebhookLoop, WebhookOptions


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def move(self, **delta: float) -> None:
        self.now += timedelta(**delta)


# what only an endpoint with `include_pii` receives
PII = frozenset({"name", "email", "phone", "company_name", "barcode"})


async def ping(admin: httpx.AsyncClient, endpoint_id: str) -> dict[str, Any]:
    """Queue a `ping` message to the endpoint (202); its first attempt."""
    r = await admin.post(f"/admin/webhooks/{endpoint_id}/ping")
    assert r.status_code == 202, r.text
    return dict(r.json())


def hand_loop(app: Any, clock: Clock, *, timeout_s: float = 2.0) -> WebhookLoop:
    """A webhook loop on the app's pool, guard and metrics; the app and the loop read the
    probe's clock; private addresses allowed (the receiver is on loopback)."""
    ctx = app.state.events
    ctx.clock = clock
    ctx.egress.allow_private = True
    sender = WebhookSender(ctx.egress, timeout_s=timeout_s)
    return WebhookLoop(ctx.db, sender, WebhookOptions(), clock, ctx.metrics)


async def turn_until_quiet(loop: WebhookLoop, turns: int = 50) -> None:
    """Turn the loop until nothing it can do now is left: no attempt in flight, every
    answer recorded, nothing due at the loop's clock. The hand loop listens to nothing:
    this stands in for the NOTIFY of what the probe wrote since its last turn."""
    loop.notify()
    for _ in range(turns):
        due = await loop.turn()
        if loop.flights:
            await asyncio.wait(set(loop.flights))
            continue
        if loop.answers:
            continue
        if due is None or due > loop.clock():
            return
    raise AssertionError("the loop did not settle")


async def endpoint(admin: httpx.AsyncClient, url: str, **over: Any) -> dict[str, Any]:
    body = {"url": url, "event_types": ["registration.created"], **over}
    r = await admin.post("/admin/webhooks", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def log(admin: httpx.AsyncClient, endpoint_id: str) -> list[dict[str, Any]]:
    r = await admin.get(f"/admin/webhooks/{endpoint_id}/deliveries")
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


async def endpoint_row(pool: asyncpg.Pool, endpoint_id: str) -> asyncpg.Record:
    async with pool.acquire() as conn:
        return await conn.fetchrow(
            "SELECT * FROM event.webhook_endpoints WHERE id = $1", endpoint_id
        )


def utc_now() -> datetime:
    return datetime.now(UTC)
