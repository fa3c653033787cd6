"""Probes run against a real PostgreSQL: the embedded server (default), the
server named by EVENTS_TEST_ADMIN_URL, or a testcontainers PostgreSQL when
EVENTS_TEST_BACKEND=testcontainers. Each test gets a fresh database cloned from
a template migrated once per session (once per worker under pytest-xdist: each
worker has its own template). No server means failures, never skips.

Under pytest-xdist (`make test` runs `-n auto`), the controlling process starts the
one server before the workers start and hands them its URL; the workers share it.
The embedded test server trades durability for speed (`TEST_SERVER_CONFIG`): its
data lives for one session and is never recovered after a machine crash.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc import create_app, migrate
from events_svc.db import create_pool
from events_svc.embedded import scratch_server
from events_svc.settings import Settings
from tests.probes.helpers import BASE, Api, drop_database, new_database, with_database

# a worker's template; a test's database is cloned from its worker's
TEMPLATE = f"events_test_template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
# the embedded test server: its folder in memory where the machine has one (a database is
# cloned in about 10 ms there, against 50 to 500 ms on this machine's disk), no flush to
# disk (a session's data never outlives it), and room for several workers whose probes
# each start service processes with pools
TEST_SERVER_FOLDER = (
    "/dev/shm"
    if os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free >= 2 << 30
    else None  # none, or too small (a container's 64 MB): the system's temporary folder
)
TEST_SERVER_CONFIG = {
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "400",
}
_URL_KEY = "events_admin_url"


@contextlib.contextmanager
def _server() -> Iterator[str]:
    """The superuser URL of the session's server, for as long as the context lasts."""
    given = os.environ.get("EVENTS_TEST_ADMIN_URL")
    if given:
        yield given
        return
    if os.environ.get("EVENTS_TEST_BACKEND") == "testcontainers":
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as pg:
            yield pg.get_connection_url()
        return
    with scratch_server("events-test-", TEST_SERVER_CONFIG, TEST_SERVER_FOLDER) as url:
        yield url


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller: start the one server before the first worker, hand it to each."""
    config = node.config
    url = getattr(config, "_events_admin_url", None)
    if url is None:
        stack = contextlib.ExitStack()
        config.add_cleanup(stack.close)  # after every worker has finished
        url = config._events_admin_url = stack.enter_context(_server())
    node.workerinput[_URL_KEY] = url


@pytest.fixture(scope="session")
def admin_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A superuser URL of a real PostgreSQL for the whole session."""
    handed = getattr(request.config, "workerinput", {}).get(_URL_KEY)
    if handed:  # an xdist worker: the controller's server
        yield handed
        return
    with _server() as url:
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


@pytest.fixture
def settings(db_url: str) -> Settings:
    # the scheduler loop runs only in the probes that start it: others pass time explicitly
    return Settings(
        database_url=db_url,
        pool_min=1,
        pool_max=4,
        lock_timeout_ms=2000,
        scheduler_enabled=False,
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
