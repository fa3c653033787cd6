"""The migration runner: sql/migrations/NNNN_name.sql, forward-only, once each.

Files apply in filename order, each in its own transaction, under a
session-level advisory lock so two instances starting together never both
apply. `event.schema_migrations` records each file's name and sha256; an
applied file that was edited or vanished stops the runner with a clear error.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import asyncpg
import asyncpg.pool

AnyConnection: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)

# an arbitrary constant shared by every instance: "events-svc migrations"
_LOCK_KEY = 0x6576_656E_7473_6D67
_NAME = re.compile(r"^\d{4}_[a-z0-9_]+\.sql$")

_CREATE_TRACKING = """
CREATE SCHEMA IF NOT EXISTS event;
CREATE TABLE IF NOT EXISTS event.schema_migrations (
    name       text PRIMARY KEY,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""
_APPLIED = "SELECT name, sha256 FROM event.schema_migrations ORDER BY name"
_RECORD = "INSERT INTO event.schema_migrations (name, sha256) VALUES ($1, $2)"
_TRACKING_EXISTS = "SELECT to_regclass('event.schema_migrations') IS NOT NULL"


class MigrationError(RuntimeError):
    """The migration set and the database disagree; the message says how."""


@dataclass(frozen=True)
class Migration:
    name: str
    sha256: str
    sql: str


def default_dir() -> Path:
    """The packaged migrations (wheel) or the repository's sql/migrations (checkout)."""
    packaged = Path(__file__).parent / "_migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "sql" / "migrations"


def load(directory: Path) -> list[Migration]:
    """Every migration file in filename order, with its checksum."""
    if not directory.is_dir():
        raise MigrationError(f"migrations folder {directory} does not exist")
    found = []
    for path in sorted(directory.glob("*.sql")):
        if not _NAME.match(path.name):
            raise MigrationError(f"migration file name {path.name!r} is not NNNN_snake_case.sql")
        data = path.read_bytes()
        found.append(Migration(path.name, hashlib.sha256(data).hexdigest(), data.decode()))
    return found


def _check_history(applied: dict[str, str], files: list[Migration]) -> None:
    by_name = {m.name: m for m in files}
    for name, digest in applied.items():
        if name not in by_name:
            raise MigrationError(f"applied migration {name} is missing from the migrations folder")
        if by_name[name].sha256 != digest:
            raise MigrationError(
                f"applied migration {name} was edited after it was applied "
                "(migrations are forward-only: add a new file instead)"
            )


async def apply(conn: AnyConnection, directory: Path) -> list[str]:
    """Apply every pending migration; returns the names applied by this call.

    `conn` is the runner's own session. No statement bound holds there (an index built on
    a large table takes its time, whatever the role's `statement_timeout`), and the wait
    for another process's run (the advisory lock) is no lock timeout either: processes
    that start together wait for one another. The migrations' own locks keep the
    session's `lock_timeout`: a migration that would queue behind a long transaction, and
    every request behind itself, stops the start instead (the next start tries again)."""
    files = load(directory)
    await conn.execute("SET statement_timeout = 0")
    await conn.execute("SET lock_timeout = 0")
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    await conn.execute("RESET lock_timeout")
    try:
        await conn.execute(_CREATE_TRACKING)
        applied = {r["name"]: r["sha256"] for r in await conn.fetch(_APPLIED)}
        _check_history(applied, files)
        done: list[str] = []
        for migration in files:
            if migration.name in applied:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(_RECORD, migration.name, migration.sha256)
            done.append(migration.name)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)


async def pending(conn: AnyConnection, directory: Path) -> list[str]:
    """Names not yet applied; raises MigrationError when the history disagrees."""
    files = load(directory)
    if not await conn.fetchval(_TRACKING_EXISTS):
        return [m.name for m in files]
    applied = {r["name"]: r["sha256"] for r in await conn.fetch(_APPLIED)}
    _check_history(applied, files)
    return [m.name for m in files if m.name not in applied]
