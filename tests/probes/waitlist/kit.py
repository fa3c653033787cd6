"""What the waiting-list probes share: the settings (public intake, a capability secret,
a public base URL for the offer links), a full event with its list on, joining, the
pass, and the clock moved through the database."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx

from events_svc.settings import Settings
from tests.probes.helpers import make_event

SECRET = "waitlist-secret-0123456789"


def waitlist_settings(db_url: str, **over: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "pool_min": 1,
        "pool_max": 8,
        "scheduler_enabled": False,
        "capability_secrets": (SECRET,),
        "intake_public": True,
        "public_base_url": "https://tickets.example.org",
        "rate_limit_ip": "10000/minute",
        "rate_limit_capability": "10000/minute",
        "rate_limit_email": "10000/hour",
    }
    values.update(over)
    return Settings(**values)


async def listed_event(
    admin: httpx.AsyncClient, seats: int, *, offer_hours: int = 48, **over: Any
) -> dict[str, Any]:
    """A published event of `seats` seats with its waiting list on."""
    event = await make_event(admin, seats_max=seats, **over)
    r = await admin.post(
        f"/admin/events/{event['id']}/publish", json={"date_publish": "2020-01-01T00:00:00Z"}
    )
    assert r.status_code == 200, r.text
    r = await admin.put(
        f"/admin/events/{event['id']}/waitlist-settings",
        json={"enabled": True, "offer_hours": offer_hours},
    )
    assert r.status_code == 200, r.text
    return event


async def register(
    public: httpx.AsyncClient, event_id: str, email: str, n: int = 1, **scope: Any
) -> httpx.Response:
    """A public intake of `n` attendees (the first with `email`)."""
    attendees = [
        {"name": f"Person {i}", "email": email if i == 0 else f"{i}.{email}"} for i in range(n)
    ]
    return await public.post(f"/intake/{event_id}", json={"attendees": attendees, **scope})


async def fill(public: httpx.AsyncClient, event_id: str, n: int) -> list[str]:
    """`n` public registrations of one attendee each; their ids."""
    ids = []
    for i in range(n):
        r = await register(public, event_id, f"fill{i}-{uuid.uuid4().hex[:6]}@example.org")
        assert r.status_code == 201, r.text
        ids.append(r.json()["registration_id"])
    return ids


async def join(
    public: httpx.AsyncClient, event_id: str, email: str, seats: int = 1, **more: Any
) -> httpx.Response:
    body = {"name": more.pop("name", "Wanda Waiter"), "email": email, "seats": seats, **more}
    return await public.post(f"/intake/{event_id}/waitlist", json=body)


async def joined(
    public: httpx.AsyncClient, event_id: str, email: str, seats: int = 1, **more: Any
) -> dict[str, Any]:
    r = await join(public, event_id, email, seats, **more)
    assert r.status_code == 201, r.text
    return dict(r.json())


def link(status_url: str) -> str:
    """The path of a status link, relative to the API's base."""
    return status_url.split("/api/v1/event", 1)[1]


async def offer_pass(admin: httpx.AsyncClient) -> dict[str, Any]:
    """One full scheduler pass now (the offer pass with it)."""
    r = await admin.post("/admin/schedulers/run")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def cancel(admin: httpx.AsyncClient, registration_id: str) -> None:
    r = await admin.post(
        f"/admin/registrations/{registration_id}/cancel", json={"reason": "cannot come"}
    )
    assert r.status_code == 200, r.text


async def entries(pool: asyncpg.Pool, event_id: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT * FROM event.waitlist_entry WHERE event_id = $1 ORDER BY created_at, id",
        uuid.UUID(event_id),
    )


async def run_out(pool: asyncpg.Pool, entry_id: Any) -> None:
    """Move an offer's deadline into the past, through the database (no sleeping)."""
    await pool.execute(
        "UPDATE event.waitlist_entry SET offer_expires_at = clock_timestamp() - interval '1 minute'"
        " WHERE id = $1",
        uuid.UUID(str(entry_id)),
    )


async def seats_taken(pool: asyncpg.Pool, event_id: str) -> int:
    """The one seat counter's count for the event."""
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM event.registrations WHERE event_id = $1"
            " AND event.holds_seat_at(state, active, sale_status, hold_expires_at, now())",
            uuid.UUID(event_id),
        )
    )
