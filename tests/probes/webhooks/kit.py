"""What the webhook delivery probes share: a clock they move, the webhooks' pass they run
by hand (the app's loop is off in the probes), or in a loop of its own, and endpoint
helpers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from events_svc.adapters.webhook_sender import WebhookSender
from events_svc.loops import LOOP, Loop, WebhookOptions, WebhookPass
from events_svc.verbs.webhooks import WAKE_CHANNEL, attempts


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


def hand_loop(app: Any, clock: Clock, *, timeout_s: float = 2.0) -> WebhookPass:
    """The webhooks' pass on the app's pool, guard and metrics; the app and the pass read
    the probe's clock; private addresses allowed (the receiver is on loopback)."""
    ctx = app.state.events
    ctx.clock = clock
    ctx.egress.allow_private = True
    sender = WebhookSender(ctx.egress, timeout_s=timeout_s)
    return WebhookPass(ctx.db, sender, WebhookOptions(), clock, ctx.metrics)


def notify(hand: WebhookPass) -> None:
    """What the NOTIFY of a written fact or attempt tells the pass."""
    hand.heard(WAKE_CHANNEL, "")


async def turn(hand: WebhookPass) -> datetime | None:
    """One run of the pass at its clock (record, fan out, claim, start), as its lane runs
    it; when an attempt is due next (whatever is in flight)."""
    await hand.run(hand.clock(), lambda: False, LOOP)
    return await attempts.next_due(hand.pool(), hand.clock())


def lane_of(app: Any, hand: WebhookPass) -> Loop:
    """A loop of the one pass, listening on the app's database (start and stop it)."""
    ctx = app.state.events
    return Loop([hand], ctx.db, ctx.settings, hand.clock, ctx.metrics)


async def turn_until_quiet(hand: WebhookPass, turns: int = 50) -> None:
    """Run the pass until nothing it can do now is left: no attempt in flight, every
    answer recorded, nothing due at its clock. The hand pass listens to nothing: this
    stands in for the NOTIFY of what the probe wrote since its last run."""
    notify(hand)
    for _ in range(turns):
        due = await turn(hand)
        if hand.flights:
            await asyncio.wait(set(hand.flights))
            continue
        if hand.answers:
            continue
        if due is None or due > hand.clock():
            return
    raise AssertionError("the pass did not settle")


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
