"""Background jobs worked in batches (an attendance import, an event operation): the
one way a batch is claimed and run, the one loop of a pass, and the one back-off of a
job whose batch failed.

`work_one_batch` opens the batch's transaction, picks a job (the caller's SQL, `FOR NO
KEY UPDATE SKIP LOCKED`) and works it; an error of the work rolls the batch back and is
recorded on the job by the caller's `fail` in a new transaction (an error of the pick
itself fails the caller's pass, which backs off). `run_batches` calls a batch until none
is left, the pass's cap of batches ran, its time budget is spent (then `more`), or the
loop is stopping (asked before each batch: a shutdown finishes the batch in hand).

A failing batch rolls back whole; its job counts the failure and waits 5 s, 10 s, 20 s,
40 s (`paused` until then: `backoff.JOBS`); the 5th failure in a row makes it `failed`,
and only a `resume` revives it. A successful batch clears the count. What a job records of an
error is its code (a refusal's) or its class, never its message: a message may quote
values.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from events_svc import errors
from events_svc.backoff import JOBS
from events_svc.db import Connection, Pool, transaction

T = TypeVar("T")

MAX_CODE = 200
# the import and operation passes LISTEN here: a job created, started or resumed NOTIFYs
WAKE_CHANNEL = "event_jobs_due"


def failure_code(exc: BaseException) -> str:
    """What a job may record of an error: its code or class, never its message."""
    code = exc.code if isinstance(exc, errors.DomainError) else type(exc).__name__
    return code[:MAX_CODE]


def after_failure(attempts: int, now: datetime) -> tuple[str, datetime | None]:
    """(the job's state, when it may run again) after its `attempts`-th failure in a row:
    `paused` with a doubling wait, or `failed` (no retry until resumed)."""
    retry_at = JOBS.next_at(attempts, now)
    return ("failed", None) if retry_at is None else ("paused", retry_at)


async def wake_jobs(conn: Connection) -> None:
    """Wake the job passes of every process when this transaction commits."""
    await conn.execute("SELECT pg_notify($1, '')", WAKE_CHANNEL)


async def work_one_batch(
    pool: Pool,
    pick: Callable[[Connection], Awaitable[Any]],
    work: Callable[[Connection, dict[str, Any]], Awaitable[T]],
    fail: Callable[[dict[str, Any], Exception], Awaitable[T]],
) -> T | None:
    """One batch: pick a job and work it in ONE transaction; None when no job is due and
    free. A failing work is rolled back and answered by `fail(job, error)`."""
    job: dict[str, Any] | None = None
    try:
        async with transaction(pool) as conn:
            picked = await pick(conn)
            if picked is None:
                return None
            job = dict(picked)
            return await work(conn, job)
    except Exception as exc:
        if job is None:
            raise  # the pick itself failed: the caller's pass fails (and backs off)
        return await fail(job, exc)


async def run_batches(
    batch: Callable[[], Awaitable[T | None]],
    done: Callable[[T], None],
    *,
    cap: int,
    budget_s: float | None,
    stopping: Callable[[], bool],
) -> tuple[int, bool]:
    """Call `batch` (each result to `done`) until it answers None, `cap` batches ran or
    `budget_s` seconds passed, or `stopping()`; (batches run, whether work may be left)."""
    started = time.monotonic()
    batches = 0
    while not stopping():
        if batches >= cap or (budget_s is not None and time.monotonic() - started >= budget_s):
            return batches, True
        result = await batch()
        if result is None:
            break
        batches += 1
        done(result)
    return batches, False
