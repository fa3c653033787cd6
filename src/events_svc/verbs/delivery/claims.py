"""The drainer's statements: claim due outbox rows with a lease, record each answer.

A claim is one short transaction: the due rows of the channels this process can send
(`queued`, `retrying`, or `sending` whose lease ran out: a drainer that died holding them),
oldest due first, `FOR UPDATE SKIP LOCKED` so that any number of processes claim disjoint
rows; each becomes `sending` until `lease_until`. The messages are then sent outside any
transaction, and `record` writes every answer of a batch in one statement, only onto rows
this claim still holds (same lease): a drainer whose lease ran out and whose rows were
claimed again records nothing over the new holder. `attempts` grows by one for each
message actually tried; a message the drainer did not try (its relay went down earlier in
the batch, or the batch ran out of time) is written back without an attempt. A process
killed between the relay's answer and the record sends those messages again after the
lease (at least once; the same `Message-ID`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from events_svc.db import Pool, affected, connection, transaction
from events_svc.ports import DeliveryErrorKind, DeliveryFailure, QueuedMessage

RETRY_FIRST = timedelta(minutes=1)  # a temporary failure: 1 min, doubling up to 1 h
RETRY_MAX = timedelta(hours=1)
RETRY_WINDOW = timedelta(hours=48)  # after created_at: then `failed` (`expired`)
_RETRIED = frozenset(
    {DeliveryErrorKind.CONNECTION, DeliveryErrorKind.TIMEOUT, DeliveryErrorKind.TEMPORARY}
)

_CLAIM = """
WITH due AS (
    SELECT id, delivery_state AS was FROM event.outbox_messages
    WHERE delivery_state IN ('queued', 'retrying', 'sending') AND next_attempt_at <= $1
      AND channel = ANY($2::event.notification_channel[])
    ORDER BY next_attempt_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE event.outbox_messages o
SET delivery_state = 'sending', lease_until = $4,
    next_attempt_at = $4  -- a lease that runs out makes the row due again
FROM due WHERE o.id = due.id
RETURNING o.id, o.channel::text AS channel, o.message_id, o.recipient, o.sender, o.reply_to,
    o.subject, o.body, o.attachments, o.event_id, o.registration_id, o.created_at, o.attempts,
    due.was::text AS was
"""
_RECORD = """
UPDATE event.outbox_messages o
SET delivery_state = r.state::event.delivery_state, next_attempt_at = r.next_at,
    sent_at = r.sent_at, lease_until = NULL,
    attempts = o.attempts + CASE WHEN r.tried THEN 1 ELSE 0 END,
    -- a message given back untried keeps the error of its last attempt
    last_error = CASE WHEN r.tried OR r.error IS NOT NULL THEN r.error::jsonb
                      ELSE o.last_error END
FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::text[],
    $6::boolean[]) AS r(id, state, next_at, sent_at, error, tried)
WHERE o.id = r.id AND o.delivery_state = 'sending' AND o.lease_until = $7
"""
_NEXT_DUE = """
SELECT min(next_attempt_at) FROM event.outbox_messages
WHERE delivery_state IN ('queued', 'retrying', 'sending')
  AND channel = ANY($1::event.notification_channel[])
"""


@dataclass(frozen=True)
class Claimed:
    """One message of a claim, with what the answer's rule needs: the attempts made
    before this claim, and the state it was claimed from."""

    message: QueuedMessage
    created_at: datetime
    attempts: int
    was: str = "queued"


@dataclass(frozen=True)
class Claim:
    """The rows one claim holds until `lease_until` (the token `record` checks)."""

    lease_until: datetime
    rows: list[Claimed]


@dataclass(frozen=True)
class Settled:
    """What an answer makes of a row: its state, when it is due again (None once sent or
    failed), its error, and whether the message was tried (one more attempt)."""

    state: str
    next_attempt_at: datetime | None
    sent_at: datetime | None
    error: dict[str, object] | None
    tried: bool = True


def retry_delay(attempts: int) -> timedelta:
    """1 min after the first attempt, doubling, never more than 1 h."""
    doubled = RETRY_FIRST * (1 << min(max(attempts - 1, 0), 20))
    return min(doubled, RETRY_MAX)


def settle(
    failure: DeliveryFailure | None,
    created_at: datetime,
    attempts: int,
    now: datetime,
    *,
    tried: bool = True,
    wait: timedelta | None = None,
) -> Settled:
    """The one rule of an answer: accepted → `sent`; a temporary failure (a 4xx, a refused
    or dropped connection, a timeout) → `retrying` after `wait` (by default the back-off of
    `attempts`, the attempts made so far), until 48 h after the message was written, then
    `failed` (`expired`); anything else → `failed`. A message not tried because its relay
    is down takes the relay's failure with `tried` false (no attempt counted)."""
    if failure is None:
        return Settled("sent", None, now, None)
    error: dict[str, object] = {
        "kind": failure.kind.value,
        "code": failure.code,
        "detail": failure.detail[:300],
    }
    if failure.kind not in _RETRIED:
        return Settled("failed", None, None, error, tried)
    if now >= created_at + RETRY_WINDOW:
        last = f"{failure.kind.value}: {failure.detail}"[:250]
        expired = {**error, "kind": "expired", "detail": f"retried for 48 h; last {last}"}
        return Settled("failed", None, None, expired, tried)
    delay = wait if wait is not None else retry_delay(attempts)
    return Settled("retrying", now + delay, None, error, tried)


def give_back(row: Claimed, now: datetime) -> Settled:
    """A claimed message the drainer did not try (its batch ran out of time): back to the
    state it was claimed from, due now, its attempts and last error unchanged."""
    state = row.was
    if state == "sending":  # claimed from a drainer that died: as it was before that
        state = "retrying" if row.attempts else "queued"
    return Settled(state, now, None, None, tried=False)


def _message(row: dict[str, object]) -> QueuedMessage:
    raw = row["attachments"]
    attachments = json.loads(raw) if isinstance(raw, str) else raw
    return QueuedMessage(
        id=row["id"],  # type: ignore[arg-type]
        channel=str(row["channel"]),
        message_id=str(row["message_id"]),
        recipient=str(row["recipient"]),
        sender=str(row["sender"]),
        reply_to=str(row["reply_to"]),
        subject=str(row["subject"]),
        body=str(row["body"]),
        attachments=tuple(attachments or ()),  # type: ignore[arg-type]
        event_id=row["event_id"],  # type: ignore[arg-type]
        registration_id=row["registration_id"],  # type: ignore[arg-type]
    )


async def claim_due(
    pool: Pool, channels: list[str], now: datetime, limit: int, lease: timedelta
) -> Claim:
    """Claim up to `limit` due messages of `channels` until `now + lease`."""
    lease_until = now + lease
    async with transaction(pool) as conn:
        rows = await conn.fetch(_CLAIM, now, channels, limit, lease_until)
    claimed = [
        Claimed(_message(dict(r)), r["created_at"], r["attempts"], r["was"])
        for r in sorted(rows, key=lambda r: (r["created_at"], r["id"]))
    ]
    return Claim(lease_until, claimed)


async def record(pool: Pool, claim: Claim, answers: list[tuple[UUID, Settled]]) -> int:
    """Write the answers of one claim in one statement; answers how many rows it still
    held (a row whose lease ran out and was claimed again is left to its new holder)."""
    if not answers:
        return 0
    ids, states, next_at, sent_at, errors, tried = [], [], [], [], [], []
    for row_id, settled in answers:
        ids.append(row_id)
        states.append(settled.state)
        next_at.append(settled.next_attempt_at)
        sent_at.append(settled.sent_at)
        errors.append(json.dumps(settled.error) if settled.error is not None else None)
        tried.append(settled.tried)
    async with transaction(pool) as conn:
        status = await conn.execute(
            _RECORD, ids, states, next_at, sent_at, errors, tried, claim.lease_until
        )
    return affected(status)


async def next_delivery_due(pool: Pool, channels: list[str]) -> datetime | None:
    """When the earliest unsent message of `channels` is due (None: none is waiting)."""
    async with connection(pool) as conn:
        due: datetime | None = await conn.fetchval(_NEXT_DUE, channels)
    return due
