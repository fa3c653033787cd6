"""Probes run against a real PostgreSQL (`tests/server.py`: the embedded server by
default, the server named by EVENTS_TEST_ADMIN_URL, or a testcontainers PostgreSQL when
EVENTS_TEST_BACKEND=testcontainers). Each test gets a fresh database cloned from a
template migrated once per session (once per worker under pytest-xdist: each worker has
its own template, on the one server they share). No server means failures, never skips.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from events_svc import create_app, migrate
from events_svc.db import create_pool
from events_svc.settings import Settings
from tests.probes.helpers import BASE, Api, drop_database, new_database, with_database
from tests.server import URL_KEY, database_server

# `pgbouncer`: every probe's pool goes through a real PgBouncer in transaction pooling
POOLER_KEY = "EVENTS_TEST_POOLER"
# a worker's template; a test's database is cloned from its worker's
# (`EVENTS_TEST_TEMPLATE_SUFFIX`: a run started by a probe, beside its own worker's)
TEMPLATE = "events_test_template_" + (
    os.environ.get("EVENTS_TEST_TEMPLATE_SUFFIX") or os.environ.get("PYTEST_XDIST_WORKER", "main")
)


@pytest.fixture(scope="session")
def admin_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A superuser URL of a real PostgreSQL for the whole session (`tests/server.py`)."""
    handed = getattr(request.config, "workerinput", {}).get(URL_KEY)
    if handed:  # an xdist worker: the controller's server
        yield handed
        return
    with database_server() as url:
        yield url


@pytest.fixture(scope="session")
async def template_url(admin_url: str) -> str:
    """A database migrated once; every test database is cloned from it."""
    conn = await asyncpg.connect(admin_url)
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


@pytest.fixture(scope="session")
def bouncer(admin_url: str) -> Iterator[str]:
    """A real PgBouncer in transaction pooling before the session's server (one per
    worker); its URL with `{database}` to fill (`tests/pgbouncer.py`)."""
    from tests.pgbouncer import pgbouncer

    report = os.environ.get("EVENTS_TEST_POOLER_REPORT")
    with pgbouncer(admin_url, Path(report) if report else None) as url:
        yield url


@pytest.fixture
def settings(db_url: str, request: pytest.FixtureRequest) -> Settings:
    # the scheduler loop runs only in the probes that start it: others pass time explicitly
    base = Settings(
        database_url=db_url,
        pool_min=1,
        pool_max=4,
        lock_timeout_ms=2000,
        scheduler_enabled=False,
    )
    return routed(base, request)


def wide_settings(db_url: str, request: pytest.FixtureRequest) -> Settings:
    """Enough connections that the waiting and the races happen in the combiner and in
    PostgreSQL, not in the pool's queue (the combiner's and the races' probes)."""
    wide = Settings(
        database_url=db_url, pool_min=4, pool_max=24, lock_timeout_ms=10000, scheduler_enabled=False
    )
    return routed(wide, request)


def routed(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """`settings` as this run asks: unchanged, or in the run through PgBouncer
    (`EVENTS_TEST_POOLER=pgbouncer`, test_pooler.py) the pool through it in transaction
    pooling and what needs a session to the server directly. A module that makes its own
    settings passes them through here too."""
    if os.environ.get(POOLER_KEY) != "pgbouncer":
        return settings
    direct = settings.database_url
    assert direct
    bouncer = request.getfixturevalue("bouncer")
    return dataclasses.replace(
        settings,
        database_url=bouncer.format(database=urlsplit(direct).path[1:]),
        database_direct_url=direct,
        db_pooler="transaction",
    )


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


@pytest.fixture
async def public(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client without credentials, for the public routes."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Any]:
    """One headless chromium for the session (Debian's; the probes fail without it)."""
    from tests.probes.console.kit import launched

    async with launched() as (_, launched_browser):
        yield launched_browser


@pytest.fixture
async def studio(app: Any, pool: asyncpg.Pool, browser: Any) -> AsyncIterator[Any]:
    """The console served by a real uvicorn, with a browser to drive it (console/kit.py)."""
    from tests.probes.console.kit import Studio, served

    async with served(app) as base:
        kit = Studio(base, browser, pool)
        yield kit
        await kit.close()
