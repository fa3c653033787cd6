"""Probes run against a real PostgreSQL: the embedded server (default), the
server named by EVENTS_TEST_ADMIN_URL, or a testcontainers PostgreSQL when
EVENTS_TEST_BACKEND=testcontainers. Each test gets a fresh database cloned from
a template migrated once per session. No server means failures, never skips.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest

from events_svc import create_app, migrate
from events_svc.actors import Actor
from events_svc.db import create_pool
from events_svc.embedded import scratch_server
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token

TEMPLATE = "events_test_template"
BASE = "http://test/api/v1/event"


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
def admin_url() -> Iterator[str]:
    """A superuser URL of a real PostgreSQL for the whole session."""
    given = os.environ.get("EVENTS_TEST_ADMIN_URL")
    if given:
        yield given
        return
    if os.environ.get("EVENTS_TEST_BACKEND") == "testcontainers":
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as pg:
            yield pg.get_connection_url()
        return
    with scratch_server("events-test-") as url:
        yield url


async def _admin(admin_url: str) -> asyncpg.Connection:
    return await asyncpg.connect(admin_url)


@pytest.fixture(scope="session")
async def template_url(admin_url: str) -> str:
    """A database migrated once; every test database is cloned from it."""
    conn = await _admin(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
    finally:
        await conn.close()
    url = with_database(admin_url, TEMPLATE)
    tconn = await asyncpg.connect(url)
    try:
        await migrate.apply(tconn, migrate.default_dir())
    finally:
        await tconn.close()
    return url


async def new_database(admin_url: str, template: str | None) -> str:
    name = f"events_test_{uuid.uuid4().hex[:12]}"
    conn = await _admin(admin_url)
    try:
        clause = f' TEMPLATE "{template}"' if template else ""
        await conn.execute(f'CREATE DATABASE "{name}"{clause}')
    finally:
        await conn.close()
    return name


async def drop_database(admin_url: str, name: str) -> None:
    conn = await _admin(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture
async def db_url(admin_url: str, template_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database for one test."""
    name = await new_database(admin_url, TEMPLATE)
    yield with_database(admin_url, name)
    await drop_database(admin_url, name)


@pytest.fixture
async def empty_db_url(admin_url: str) -> AsyncIterator[str]:
    """A fresh database with no migrations applied."""
    name = await new_database(admin_url, None)
    yield with_database(admin_url, name)
    await drop_database(admin_url, name)


@pytest.fixture
def settings(db_url: str) -> Settings:
    # the scheduler loop runs only in the probes that start it: others pass time explicitly
    return Settings(
        database_url=db_url, pool_min=1, pool_max=4, lock_timeout_ms=2000,
        scheduler_enabled=False,
    )  # fmt: skip


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    assert settings.database_url
    p = await create_pool(settings.database_url, settings)
    yield p
    await p.close()


@pytest.fixture
async def app(settings: Settings, pool: asyncpg.Pool) -> AsyncIterator[Any]:
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


class Api:
    """An httpx client on the real ASGI app plus token minting."""

    def __init__(self, app: Any, pool: asyncpg.Pool) -> None:
        self.app = app
        self.pool = pool
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)

    async def token(self, *scopes: str, company: uuid.UUID | None = None) -> dict[str, str]:
        token, _ = await create_token(
            self.pool, "probe", list(scopes) or ["*"], company, datetime.now(UTC)
        )
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def api(app: Any, pool: asyncpg.Pool) -> AsyncIterator[Api]:
    a = Api(app, pool)
    yield a
    await a.client.aclose()


@pytest.fixture
async def admin(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    """A client whose every request carries a '*' token."""
    headers = await api.token("*")
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=BASE, headers=headers
    )
    yield client
    await client.aclose()


OPERATOR = Actor(id="probe", kind="system", scopes=frozenset({"*"}))


def event_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "PyCon Lisbon",
        "date_begin": "2027-05-10T09:00:00+00:00",
        "date_end": "2027-05-12T18:00:00+00:00",
        "date_tz": "Europe/Lisbon",
        "seats_limited": True,
        "seats_max": 100,
    }
    body.update(over)
    return body


async def insert_registration(
    pool: asyncpg.Pool, event_id: Any, *, ticket: Any = None, slot: Any = None, state: str = "open"
) -> uuid.UUID:
    """Set up a registration row directly (tests of constraints that need one)."""
    async with pool.acquire() as conn:
        multi = await conn.fetchval("SELECT is_multi_slots FROM event.events WHERE id=$1", event_id)
        return await conn.fetchval(
            """INSERT INTO event.registrations (event_id, event_is_multi_slots, event_slot_id,
                   event_ticket_id, state, barcode)
               VALUES ($1, $2, $3, $4, $5::event.registration_state, $6) RETURNING id""",
            event_id, multi, slot, ticket, state, str(uuid.uuid4().int)[:20],
        )  # fmt: skip


async def add_slot(admin: httpx.AsyncClient, event_id: str, hour: int = 10) -> dict[str, Any]:
    """A one-hour slot on 2027-05-10 (inside event_body's dates)."""
    body = {"event_id": event_id, "date_begin": f"2027-05-10T{hour:02}:00:00Z",
            "date_end": f"2027-05-10T{hour + 1:02}:00:00Z"}  # fmt: skip
    r = await admin.post("/admin/slots", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def add_ticket(admin: httpx.AsyncClient, event_id: str, **fields: Any) -> dict[str, Any]:
    r = await admin.post("/admin/tickets", json={"event_id": event_id, "name": "T", **fields})
    assert r.status_code == 201, r.text
    return dict(r.json())
