"""A scheduler line's failures: their kinds, their back-off, and their bookkeeping.

`ports.MailErrorKind` is the ONE list of failure kinds (a host's renderer and queue
raise them); the database type `event.mail_error_kind` holds the same values (a probe
compares them). A line
failure is recorded on its row with a safe detail and a back-off: the row is not
claimed before `next_attempt_at`: one minute after the first failure, doubling up to
an hour (`backoff.MAIL_LINES`). A success clears it. Each is logged when it starts (or changes kind)
and when it clears; repeats are debug lines.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events_svc.backoff import MAIL_LINES
from events_svc.db import Connection, Pool, transaction
from events_svc.diagnostics import error_fields
from events_svc.ports import MailErrorKind

log = logging.getLogger("events_svc.scheduler")


# the kinds a port may raise (`ports.MailRefused.kind`); any other is taken as the default
LINE_FAILURES = frozenset(
    {
        MailErrorKind.TEMPLATE_UNRESOLVED,
        MailErrorKind.RENDER_FAILED,
        MailErrorKind.TEMPLATE_RENDERER_NOT_COMPOSED,
        MailErrorKind.ENQUEUE_REFUSED,
        MailErrorKind.SMS_ENQUEUE_REFUSED,
    }
)


@dataclass(frozen=True)
class LineFailure:
    """A failure of the whole line: its kind and a safe detail (never attendee data)."""

    kind: MailErrorKind
    detail: str


_SET_ERROR = """
UPDATE event.mails SET error_kind = $2::event.mail_error_kind, error_datetime = $3,
    error_detail = $4, attempts = attempts + 1, next_attempt_at = $5
WHERE id = $1
"""
_CLEAR_ERROR = """
UPDATE event.mails SET error_kind = NULL, error_datetime = NULL, error_detail = NULL,
    attempts = 0, next_attempt_at = NULL
WHERE id = $1 AND (error_kind IS NOT NULL OR attempts > 0)
"""
_FAILING = """
SELECT count(*) FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE m.error_kind IS NOT NULL AND event.line_is_live(m, e, $1)
"""


def _line(m: dict[str, Any]) -> dict[str, Any]:
    return {"scheduler_id": str(m["id"]), "event_id": str(m["event_id"])}


async def record_failure(
    conn: Connection,
    m: dict[str, Any],
    failure: LineFailure,
    now: datetime,
    trace: dict[str, Any] | None = None,
) -> None:
    """Record a line failure with its back-off; log it only when it starts or changes."""
    attempts = int(m["attempts"]) + 1
    retry_at = now + MAIL_LINES.delay(attempts)
    await conn.execute(_SET_ERROR, m["id"], failure.kind, now, failure.detail, retry_at)
    fields = {
        **_line(m),
        "kind": str(failure.kind),
        "detail": failure.detail,
        "attempts": attempts,
        "next_attempt_at": retry_at.isoformat(),
        **(trace or {}),
    }
    level = logging.WARNING if m["error_kind"] != failure.kind else logging.DEBUG
    log.log(level, "scheduler line failing", extra={"fields": fields})


async def clear_failure(conn: Connection, m: dict[str, Any]) -> None:
    """A success: the line's error and back-off go, and that is logged once."""
    if m["error_kind"] is None and not m["attempts"]:
        return
    await conn.execute(_CLEAR_ERROR, m["id"])
    fields = {**_line(m), "after_attempts": int(m["attempts"])}
    log.info("scheduler line recovered", extra={"fields": fields})


async def record_batch_failure(
    pool: Pool, m: dict[str, Any], exc: Exception, now: datetime
) -> None:
    """A batch that raised was rolled back: record it on its line, in a new transaction
    (if even that fails, the database is away and the caller's pass fails)."""
    failure = LineFailure(MailErrorKind.BATCH_FAILED, type(exc).__name__)
    async with transaction(pool) as conn:
        await record_failure(conn, m, failure, now, error_fields(exc))


async def count_failing_lines(pool: Pool, now: datetime) -> int:
    """Live scheduler lines whose last attempt failed: they back off, so they never show
    as lag; this is the figure to alert on."""
    async with transaction(pool) as conn:
        return int(await conn.fetchval(_FAILING, now))
