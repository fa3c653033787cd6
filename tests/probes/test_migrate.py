"""The migration runner on a real PostgreSQL: fresh apply, no-op re-run, refusals, concurrency."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from events_svc import migrate

FILES = migrate.load(migrate.default_dir())


async def _applied(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT name FROM event.schema_migrations ORDER BY name")
        return [r["name"] for r in rows]
    finally:
        await conn.close()


async def test_fresh_apply_then_rerun_is_a_no_op(empty_db_url: str):
    conn = await asyncpg.connect(empty_db_url)
    try:
        assert await migrate.pending(conn, migrate.default_dir()) == [m.name for m in FILES]
        first = await migrate.apply(conn, migrate.default_dir())
        assert first == [m.name for m in FILES]
        assert await migrate.apply(conn, migrate.default_dir()) == []
        assert await migrate.pending(conn, migrate.default_dir()) == []
        tables = await conn.fetchval(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'event'"
        )
        assert tables >= 22
    finally:
        await conn.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A private copy of the migrations folder that a probe may edit."""
    copy = tmp_path / "migrations"
    shutil.copytree(migrate.default_dir(), copy)
    return copy


@pytest.fixture
async def conn(empty_db_url: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(empty_db_url)
    yield c
    await c.close()


async def test_an_edited_or_vanished_applied_file_is_refused(conn, folder: Path):
    await migrate.apply(conn, folder)
    edited = folder / FILES[1].name
    edited.write_text(edited.read_text() + "\n-- a later edit\n")
    with pytest.raises(migrate.MigrationError, match="was edited"):
        await migrate.apply(conn, folder)
    with pytest.raises(migrate.MigrationError, match="was edited"):
        await migrate.pending(conn, folder)
    edited.unlink()
    with pytest.raises(migrate.MigrationError, match="is missing"):
        await migrate.apply(conn, folder)


async def test_a_new_file_applies_after_the_landed_ones(conn, folder: Path):
    await migrate.apply(conn, folder)
    (folder / "9999_add_probe_table.sql").write_text("CREATE TABLE event.probe (x int);")
    assert await migrate.apply(conn, folder) == ["9999_add_probe_table.sql"]
    (folder / "bad name.sql").write_text("SELECT 1;")
    with pytest.raises(migrate.MigrationError, match="not NNNN_snake_case"):
        await migrate.apply(conn, folder)


async def test_a_failing_migration_rolls_back_alone(conn, folder: Path, empty_db_url: str):
    (folder / "9999_broken.sql").write_text("CREATE TABLE event.half (x int); SELECT 1/0;")
    with pytest.raises(asyncpg.DivisionByZeroError):
        await migrate.apply(conn, folder)
    assert await conn.fetchval("SELECT to_regclass('event.half')") is None
    assert await _applied(empty_db_url) == [m.name for m in FILES]


async def test_a_run_waits_out_another_past_the_roles_lock_timeout(empty_db_url: str):
    """The role's `lock_timeout` (here 100 ms) bounds the migrations' own locks, not the
    wait for another process's run, and no statement bound holds during the run."""
    bounded = {"lock_timeout": "100", "statement_timeout": "50"}
    holder = await asyncpg.connect(empty_db_url)
    runner = await asyncpg.connect(empty_db_url, server_settings=bounded)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", migrate._LOCK_KEY)
        run = asyncio.create_task(migrate.apply(runner, migrate.default_dir()))
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        while not await holder.fetchval(waiting):  # the runner queues on the lock
            assert not run.done(), run
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # three of the role's lock timeouts go by: still waiting
        assert not run.done()
        await holder.execute("SELECT pg_advisory_unlock($1)", migrate._LOCK_KEY)
        assert await asyncio.wait_for(run, 60) == [m.name for m in FILES]
        assert await runner.fetchval("SHOW lock_timeout") == "100ms"
    finally:
        await holder.close()
        await runner.close()


async def test_two_concurrent_migrate_processes_apply_once(empty_db_url: str):
    env = {**os.environ, "EVENTS_DATABASE_URL": empty_db_url}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "events_svc", "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    counts = sorted(int(out.split()[1]) for out, _ in outs)
    assert counts == [0, len(FILES)], outs
    assert await _applied(empty_db_url) == [m.name for m in FILES]


async def test_readyz_is_503_while_migrations_are_pending(empty_db_url: str):
    import httpx

    from events_svc import create_app
    from events_svc.settings import Settings

    app = create_app(Settings(database_url=empty_db_url, pool_min=1, pool_max=2))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            r = await c.get("/readyz")
            assert r.status_code == 503 and r.json()["reason"] == "migrations_pending"
            conn = await asyncpg.connect(empty_db_url)
            try:
                await migrate.apply(conn, migrate.default_dir())
            finally:
                await conn.close()
            assert (await c.get("/readyz")).status_code == 200
            assert (await c.get("/api/v1/event/readyz")).status_code == 200


_CONSTRAINTS = """
SELECT t.relname AS tbl, c.conname AS name, c.contype::text AS kind,
       pg_get_constraintdef(c.oid) AS definition
FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = 'event' AND c.contype IN ('c', 'f', 'p', 'u', 'x')  -- not NOT NULL
"""
_INDEXES = """
SELECT t.relname AS tbl, i.relname AS name, pg_get_indexdef(i.oid) AS definition
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = 'event'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.oid AND c.contype IN
                  ('p', 'u', 'x'))
"""
_KINDS = {"c": "check", "f": "foreign key", "p": "primary key", "u": "unique", "x": "exclusion"}
SCHEMA_DOC = Path(__file__).resolve().parents[2] / "docs" / "schema.md"
SECTION = "## Every constraint and index\n"


async def _constraint_section(url: str) -> str:
    """The section of docs/schema.md that lists every constraint and index, as the
    migrated database has them."""
    conn = await asyncpg.connect(url)
    try:
        rows: dict[str, list[tuple[str, str, str]]] = {}
        order = list(_KINDS)
        for r in sorted(
            await conn.fetch(_CONSTRAINTS), key=lambda r: (order.index(r["kind"]), r["name"])
        ):
            rows.setdefault(r["tbl"], []).append((r["name"], _KINDS[r["kind"]], r["definition"]))
        for r in sorted(await conn.fetch(_INDEXES), key=lambda r: r["name"]):
            definition = r["definition"].split(" USING ", 1)[1]
            rows.setdefault(r["tbl"], []).append((r["name"], "index", definition))
    finally:
        await conn.close()
    out = [SECTION]
    for table in sorted(rows):
        out += [
            f"\n### `event.{table}`\n\n",
            "| constraint / index | kind | definition |\n",
            "|---|---|---|\n",
        ]
        out += [
            f"| `{name}` | {kind} | `{definition}` |\n" for name, kind, definition in rows[table]
        ]
    return "".join(out)


async def test_the_schema_document_lists_every_constraint_and_index(template_url: str):
    """docs/schema.md stays true to the migrations (EVENTS_WRITE_SCHEMA_DOC=1 rewrites it)."""
    expected = await _constraint_section(template_url)
    text = SCHEMA_DOC.read_text()
    head = text[: text.index(SECTION)]
    if os.environ.get("EVENTS_WRITE_SCHEMA_DOC") == "1":
        SCHEMA_DOC.write_text(head + expected)
    assert text[len(head) :] == expected, "run with EVENTS_WRITE_SCHEMA_DOC=1 to update"
