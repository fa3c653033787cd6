"""Behind PgBouncer in transaction pooling (`EVENTS_DB_POOLER=transaction`, a real
PgBouncer from `tests/pgbouncer.py` with 3 server sessions per database): the pool keeps
no prepared statement and no session state, each transaction sets its own timeouts,
what needs a session goes to `EVENTS_DATABASE_DIRECT_URL`, and the registration,
scheduler and seam probes pass through it as they pass directly.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from events_svc import db
from events_svc.settings import Settings, SettingsError
from tests.probes.conftest import POOLER_KEY
from tests.probes.helpers import api_status, make_event, register

ROOT = Path(__file__).resolve().parents[2]
# the probes the run through PgBouncer repeats (the whole of each)
THROUGH = ["tests/probes/registrations", "tests/probes/test_scheduler.py", "tests/probes/sale"]
# of those, the probes that start processes of their own on the direct URL (a scheduler
# `run-once`, a `serve`): nothing of theirs would go through the bouncer, so the run
# through it leaves them to the direct run
OWN_PROCESSES = [
    "tests/probes/test_scheduler.py::test_a_killed_pass_leaves_no_half_batch_and_the_next_finishes",
    "tests/probes/test_scheduler.py::test_scheduler_run_once_cli",
    "tests/probes/test_scheduler.py::test_sigterm_during_a_long_pass_exits_in_time_with_whole_batches",
]
# the three-process storm runs through the bouncer at its largest size only: the smaller
# ones ask nothing more of the bouncer and cost the suite's two cores 5 s each
SMALLER = [
    "tests/probes/registrations/test_combiner.py::test_three_processes_storm_one_event_and_never_oversell[10]",
    "tests/probes/registrations/test_combiner.py::test_three_processes_storm_one_event_and_never_oversell[100]",
]


@pytest.fixture
def settings(db_url: str, bouncer: str) -> Settings:
    """This module's service always goes through the bouncer; a short lock wait."""
    through = bouncer.format(database=urlsplit(db_url).path[1:])
    return Settings(
        database_url=through,
        database_direct_url=db_url,
        db_pooler="transaction",
        pool_min=1,
        pool_max=12,  # four times the bouncer's server sessions
        lock_timeout_ms=300,
        scheduler_enabled=False,
    )


async def test_a_storm_through_three_server_sessions_never_oversells(
    admin: httpx.AsyncClient, settings: Settings
) -> None:
    event = await make_event(admin, seats_max=7)
    bodies = [
        {"event_id": event["id"], "name": f"P{i}", "email": f"p{i}@example.org"} for i in range(40)
    ]
    answers = await asyncio.gather(*(admin.post("/admin/registrations", json=b) for b in bodies))
    codes = sorted(r.status_code for r in answers)
    assert codes == [201] * 7 + [409] * 33, codes
    assert {r.json()["error"]["code"] for r in answers if r.status_code == 409} == {
        "event_seats_exhausted"
    }
    assert settings.database_direct_url
    direct = await asyncpg.connect(settings.database_direct_url)
    try:
        taken = await direct.fetchval(
            "SELECT count(*) FROM event.registrations WHERE event_id = $1 AND active",
            uuid.UUID(event["id"]),
        )
    finally:
        await direct.close()
    assert taken == 7


async def test_each_transaction_sets_its_own_timeouts_and_leaves_no_session_state(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    seen = set()
    for _ in range(12):
        async with db.transaction(pool) as conn:
            seen.add(await conn.fetchval("SHOW lock_timeout"))
            assert await conn.fetchval("SHOW statement_timeout") == "30s"
            assert await conn.fetchval("SHOW idle_in_transaction_session_timeout") == "1min"
    assert seen == {"300ms"}
    # a bare client of the bouncer, outside a transaction: the server's defaults, so no
    # transaction of the service left its settings on a server session
    assert settings.database_url
    bare = await asyncpg.connect(settings.database_url, statement_cache_size=0)
    try:
        for _ in range(6):
            assert await bare.fetchval("SHOW lock_timeout") == "0"
        prepared = await bare.fetchval("SELECT count(*) FROM pg_prepared_statements")
    finally:
        await bare.close()
    assert prepared == 0  # nothing cached on a server session


async def test_a_lock_wait_is_busy_after_the_transactions_own_lock_timeout(
    admin: httpx.AsyncClient, settings: Settings
) -> None:
    event = await make_event(admin, seats_max=10)
    assert settings.database_direct_url
    holder = await asyncpg.connect(settings.database_direct_url)
    try:
        async with holder.transaction():
            await holder.execute(
                "SELECT 1 FROM event.events WHERE id = $1 FOR UPDATE", uuid.UUID(event["id"])
            )
            body = {"event_id": event["id"], "name": "Wait", "email": "wait@example.org"}
            status = await asyncio.wait_for(
                api_status(admin, "POST", "/admin/registrations", json=body), 10
            )
            assert status == (503, "busy")
    finally:
        await holder.close()
    await register(admin, event["id"], "After")  # the lock gone, the same request passes


def test_transaction_pooling_needs_a_direct_url_for_the_scheduler() -> None:
    url = "postgresql://u@127.0.0.1:6432/events"
    with pytest.raises(SettingsError, match="EVENTS_DATABASE_DIRECT_URL"):
        Settings(database_url=url, db_pooler="transaction", scheduler_enabled=True)
    # even without the scheduler: the migrations' advisory lock is a session lock
    with pytest.raises(SettingsError, match="EVENTS_DATABASE_DIRECT_URL"):
        Settings(database_url=url, db_pooler="transaction", scheduler_enabled=False)
    with pytest.raises(SettingsError, match="EVENTS_DB_POOLER"):
        Settings.from_env({"EVENTS_DB_POOLER": "statement"})
    parsed = Settings.from_env(
        {
            "EVENTS_DATABASE_URL": url,
            "EVENTS_DB_POOLER": "Transaction",
            "EVENTS_DATABASE_DIRECT_URL": "postgresql://u@127.0.0.1:5432/events",
        }
    )
    assert parsed.db_pooler == "transaction"
    assert parsed.session_url == "postgresql://u@127.0.0.1:5432/events"
    assert Settings(database_url=url).session_url == url  # direct: the URL itself


@pytest.mark.long
def test_the_registration_scheduler_and_seam_probes_pass_through_pgbouncer(
    admin_url: str, tmp_path: Path
) -> None:
    """The whole of those probes again, every pool through a real PgBouncer in
    transaction pooling (`EVENTS_TEST_POOLER=pgbouncer`: the `settings` fixture routes
    the pool through it and gives the direct URL for what needs a session)."""
    env = {**os.environ, POOLER_KEY: "pgbouncer", "EVENTS_TEST_ADMIN_URL": admin_url}
    env.pop("PYTEST_XDIST_WORKER", None)
    env["EVENTS_TEST_TEMPLATE_SUFFIX"] = "pooled"
    report = tmp_path / "logins"
    env["EVENTS_TEST_POOLER_REPORT"] = str(report)
    run = subprocess.run(
        [
            sys.executable,
            *("-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *THROUGH),
            *(f"--deselect={test}" for test in [*OWN_PROCESSES, *SMALLER]),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = (run.stdout + run.stderr)[-3000:]
    assert run.returncode == 0, tail
    summary = tail.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary), tail
    assert not re.search(r"\d+ (failed|errors?)\b", summary), tail
    assert f"{len(OWN_PROCESSES) + len(SMALLER)} deselected" in summary, tail
    # the pools went through the bouncer: a login per connection of every probe's pool
    passed = int(re.search(r"(\d+) passed", summary).group(1))  # type: ignore[union-attr]
    assert sum(int(n) for n in report.read_text().split()) >= passed, report.read_text()


async def test_a_request_never_waits_on_its_tokens_row(
    admin: httpx.AsyncClient, settings: Settings
) -> None:
    """The bearer lookup's once-a-minute `last_used_at` is best effort (`SKIP LOCKED`): a
    token row held by a sign-in or a revocation does not hold the request, which behind
    the pooler no `lock_timeout` would bound (it runs outside a transaction)."""
    await admin.get("/admin/events")  # the token exists and was just touched
    assert settings.database_direct_url
    holder = await asyncpg.connect(settings.database_direct_url)
    try:
        # due for a touch again, then its row held (as a sign-in holds it)
        await holder.execute("UPDATE event.api_tokens SET last_used_at = now() - interval '1 hour'")
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM event.api_tokens FOR NO KEY UPDATE")
            r = await asyncio.wait_for(admin.get("/admin/events"), 5)
            assert r.status_code == 200, r.text
    finally:
        await holder.close()
