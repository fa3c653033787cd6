"""The console's own state in the database: the secret its session cookies are signed
with when EVENTS_CONSOLE_SECRET is not set (one per database, made by migration 0022)."""

from __future__ import annotations

from events_svc.db import Pool, connection

_READ = "SELECT secret FROM event.console_secret WHERE id = 1"


async def database_secret(pool: Pool) -> str | None:
    """The database's console secret (None before migration 0022 ran)."""
    async with connection(pool) as conn:
        value = await conn.fetchval(_READ)
    return str(value) if value is not None else None
