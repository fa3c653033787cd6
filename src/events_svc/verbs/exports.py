"""Formula-safe registration exports: preview, confirm, stream (issue 13 §5).

`preview_export` counts the rows an export would hold and hands out a confirmation: a random
token whose sha256 is stored with the actor, the event, the columns and the state filter,
valid 10 minutes, for one use. `start_export` consumes it and answers an `ExportStream`:
the CSV, streamed by `COPY (SELECT ...) TO STDOUT` (never row by row in Python) through a
bounded queue, so a slow client slows the COPY down instead of filling memory.

Consistency: the export holds two connections for a moment. The writer transaction checks
the event, consumes the confirmation (`UPDATE ... WHERE used_at IS NULL ... RETURNING`: of
two racing exports, one gets the row), and, while it is still open, a REPEATABLE READ
READ ONLY transaction on a second connection counts the rows; the writer then records that
count in the audit row and commits. The COPY runs afterwards in the reader's snapshot, so
the audit row is committed before any byte leaves and its row count is the number of rows
streamed. The reader connection is released when the stream ends, fails, or its client
goes away (`ExportStream.aclose`).

Cells: every free-text cell goes through `event.csv_safe` (a leading = + - @ tab, carriage
return or ' gets one '), instants are RFC 3339 UTC (`event.rfc3339`), and an actor without
`registration:pii` gets the masked name, email and phone the database keeps beside the full
ones (`name_masked` ...: `event.mask_*`, held to `verbs/pii.py` by a probe). Only active
registrations are exported, ordered by (created_at, id).
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.verbs.audit import write_audit

CONFIRMATION_TTL = timedelta(minutes=10)
_READER_WAIT_S = 5.0  # the second connection: waited for this long, then 503 busy
_QUEUE_CHUNKS = 32  # COPY batches buffered between the database and the client
_CHUNK_BYTES = 256 * 1024  # batches waiting in the queue are joined up to this size

# -- a FOR KEY SHARE lock keeps the event from being deleted before the confirmation's insert
_EVENT = """
SELECT id FROM event.events e
WHERE e.id = $1 AND event.visible_to(e.company_id, $2)
FOR KEY SHARE
"""
_EVENT_VISIBLE = """
SELECT id FROM event.events e WHERE e.id = $1 AND event.visible_to(e.company_id, $2)
"""
# the rows an export holds: the event's ACTIVE registrations, of one state when filtered
_COUNT = """
SELECT count(*) FROM event.registrations r
WHERE r.event_id = $1 AND r.active
  AND ($2::event.registration_state IS NULL OR r.state = $2::event.registration_state)
"""
_INSERT_CONFIRMATION = """
INSERT INTO event.export_confirmations (token_hash, actor_id, company_id, event_id, columns,
    state_filter, row_count, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6::event.registration_state, $7, $8, $9)
"""
# the single use: of two exports racing on one token, the second finds used_at set
_CONSUME = """
UPDATE event.export_confirmations SET used_at = $4
WHERE token_hash = $1 AND actor_id = $2 AND event_id = $3
  AND used_at IS NULL AND expires_at > $4
RETURNING id, columns, state_filter::text AS state_filter
"""
# the reader's transaction: instants printed the ISO way whatever the server's default, and
# a statement limit that fits a long stream to a slow client
_READER_SETTINGS = """
SELECT set_config('DateStyle', 'ISO, YMD', true), set_config('statement_timeout', $1, true)
"""

# The COPY's select list is made of these fragments only, one per requested column in the
# caller's order: the text holds no value of the request (the event and the state are $n
# parameters), and a column outside the closed list never reaches it (checked first).
_CELLS: dict[str, str] = {
    "id": "r.id AS id",
    "name": "event.csv_safe(r.name) AS name",
    "email": "event.csv_safe(r.email) AS email",
    "phone": "event.csv_safe(r.phone) AS phone",
    "company_name": "event.csv_safe(r.company_name) AS company_name",
    "state": "r.state AS state",
    "ticket": "event.csv_safe(t.name) AS ticket",
    "slot": "event.rfc3339(s.date_begin) AS slot",
    "barcode": "r.barcode AS barcode",
    "created_at": "event.rfc3339(r.created_at) AS created_at",
    "date_closed": "event.rfc3339(r.date_closed) AS date_closed",
}
_MASKED_CELLS: dict[str, str] = {
    **_CELLS,
    "name": "event.csv_safe(r.name_masked) AS name",
    "email": "event.csv_safe(r.email_masked) AS email",
    "phone": "event.csv_safe(r.phone_masked) AS phone",
}
# the columns a caller without registration:pii gets masked (the console labels them so)
MASKED_COLUMNS: frozenset[str] = frozenset(k for k, v in _MASKED_CELLS.items() if v != _CELLS[k])
_ROWS_HEAD = "SELECT "
# The same rows as _COUNT, in a deterministic order. The cell functions are inlined and, on
# a large event, computed by the parallel workers before their sort; unused joins are
# dropped by the planner.
_ROWS_TAIL = """
FROM event.registrations r
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE r.event_id = $1 AND r.active
  AND ($2::event.registration_state IS NULL OR r.state = $2::event.registration_state)
ORDER BY r.created_at, r.id
"""


def check_columns(columns: Sequence[str]) -> list[str]:
    """The columns as asked, once each and from the closed list (422 naming the culprit)."""
    seen: set[str] = set()
    for index, column in enumerate(columns):
        if column not in _CELLS:
            raise errors.ExportColumnUnknown(
                f"Unknown export column: {column!r}.", column=column, index=index
            )
        if column in seen:
            raise errors.ExportColumnDuplicate(
                f"The column {column!r} is asked for twice.", column=column, index=index
            )
        seen.add(column)
    return list(columns)


def rows_query(columns: Sequence[str], masked: bool) -> str:
    """The SELECT the export COPYs: the closed fragments of `columns`, in their order."""
    cells = _MASKED_CELLS if masked else _CELLS
    return _ROWS_HEAD + ", ".join(cells[c] for c in check_columns(columns)) + _ROWS_TAIL


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _pii_full(actor: Actor) -> bool:
    return actor.has("registration:pii")


def _check_size(count: int, max_rows: int) -> None:
    if count > max_rows:
        raise errors.ExportTooLarge(row_count=count, limit=max_rows)


async def preview_export(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    columns: Sequence[str],
    state: str | None,
    now: datetime,
    *,
    max_rows: int,
) -> dict[str, Any]:
    """{row_count, columns, state, pii, confirmation_token, expires_at}: counts the rows and
    stores a single-use confirmation (its hash); locks the event row FOR KEY SHARE. More
    than `max_rows` rows: 422 `export_too_large`, nothing stored."""
    asked = check_columns(columns)
    token = secrets.token_urlsafe(32)
    expires_at = now + CONFIRMATION_TTL
    pii = "full" if _pii_full(actor) else "masked"
    async with transaction(pool) as conn:
        if await conn.fetchval(_EVENT, event_id, actor.company_id) is None:
            raise errors.NotFound("No such event.")
        count = int(await conn.fetchval(_COUNT, event_id, state))
        _check_size(count, max_rows)
        await conn.execute(
            _INSERT_CONFIRMATION,
            _digest(token),
            actor.id,
            actor.company_id,
            event_id,
            asked,
            state,
            count,
            now,
            expires_at,
        )
        summary = {"columns": asked, "state": state, "row_count": count, "pii": pii}
        await write_audit(
            conn,
            actor,
            "registration_export_previewed",
            "event",
            event_id,
            event_id=event_id,
            summary=summary,
        )
    return {
        "row_count": count,
        "columns": asked,
        "state": state,
        "pii": pii,
        "confirmation_token": token,
        "expires_at": expires_at,
    }


class _End:
    """The end of the COPY, in the queue after its last batch."""


_END = _End()
_Item = bytes | BaseException | _End


@dataclass
class ExportStream:
    """A consumed confirmation's CSV: `chunks()` streams it, `aclose()` ends it (idempotent;
    cancels a running COPY and releases the reader connection)."""

    event_id: UUID
    columns: list[str]
    row_count: int
    _reader: Connection
    _query: str
    _args: tuple[Any, ...]
    _timeout_s: float
    _stack: AsyncExitStack
    _task: asyncio.Task[str] | None = field(default=None, repr=False)
    _closing: asyncio.Task[None] | None = field(default=None, repr=False)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The CSV (a header row of the column names, then the rows) as COPY sends it."""
        if self._task is not None or self._closing is not None:
            raise RuntimeError("an export streams once")
        queue: asyncio.Queue[_Item] = asyncio.Queue(_QUEUE_CHUNKS)
        self._task = asyncio.create_task(self._copy(queue))
        try:
            while True:
                item: _Item | None = await queue.get()
                parts: list[bytes] = []
                size = 0
                # what COPY sent meanwhile leaves as one chunk: fewer, larger writes
                while isinstance(item, bytes | bytearray):
                    parts.append(item)
                    size += len(item)
                    item = None if size >= _CHUNK_BYTES or queue.empty() else queue.get_nowait()
                if parts:
                    yield b"".join(parts)
                if isinstance(item, BaseException):
                    raise item
                if item is _END:
                    break
        finally:
            await self.aclose()

    async def _copy(self, queue: asyncio.Queue[_Item]) -> str:
        """Run the COPY into `queue` (waiting while it is full), then its end marker."""
        try:
            status = await self._reader.copy_from_query(
                self._query,
                *self._args,
                output=queue.put,
                format="csv",
                header=True,
                timeout=self._timeout_s,
            )
        except Exception as exc:  # handed to the consumer, which raises it
            await queue.put(exc)
            raise
        await queue.put(_END)
        return status

    async def aclose(self) -> None:
        """End the export: the COPY is cancelled if it runs, then its transaction ends and
        the connection goes back to the pool. The closing runs as a task of its own, so a
        caller cancelled while it waits (a client gone away) never leaves it half done."""
        if self._closing is None:
            self._closing = asyncio.create_task(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        task = self._task
        if task is not None:
            task.cancel()
            # the COPY's own failure reached the consumer already
            await asyncio.gather(task, return_exceptions=True)
        await self._stack.aclose()


async def _open_reader(pool: Pool, stack: AsyncExitStack, timeout_s: int) -> Connection:
    """A second connection in a REPEATABLE READ READ ONLY transaction, kept by `stack`."""
    try:
        reader: Connection = await stack.enter_async_context(pool.acquire(timeout=_READER_WAIT_S))
    except TimeoutError as exc:
        raise errors.Busy("Every database connection is in use; retry shortly.") from exc
    await stack.enter_async_context(reader.transaction(isolation="repeatable_read", readonly=True))
    await reader.fetchrow(_READER_SETTINGS, str(timeout_s * 1000))
    return reader


async def start_export(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    confirmation_token: str,
    now: datetime,
    *,
    timeout_s: int,
    max_rows: int,
) -> ExportStream:
    """Consume the confirmation and audit the export (actor, columns, row count), committed
    before the stream starts; the rows are read in the snapshot that was counted."""
    pii = "full" if _pii_full(actor) else "masked"
    stack = AsyncExitStack()
    try:
        async with transaction(pool) as conn:
            if await conn.fetchval(_EVENT_VISIBLE, event_id, actor.company_id) is None:
                raise errors.NotFound("No such event.")
            found = await conn.fetchrow(
                _CONSUME, _digest(confirmation_token), actor.id, event_id, now
            )
            if found is None:
                raise errors.ExportConfirmationInvalid()
            columns, state = list(found["columns"]), found["state_filter"]
            reader = await _open_reader(pool, stack, timeout_s)
            count = int(await reader.fetchval(_COUNT, event_id, state))
            _check_size(count, max_rows)  # grown past the bound: refused, the token unused
            summary = {"columns": columns, "state": state, "row_count": count, "pii": pii}
            await write_audit(
                conn,
                actor,
                "registration_exported",
                "event",
                event_id,
                event_id=event_id,
                summary=summary,
            )
    except BaseException:
        await stack.aclose()
        raise
    return ExportStream(
        event_id=event_id,
        columns=columns,
        row_count=count,
        _reader=reader,
        _query=rows_query(columns, masked=pii == "masked"),
        _args=(event_id, state),
        _timeout_s=float(timeout_s),
        _stack=stack,
    )
