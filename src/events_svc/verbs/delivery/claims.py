"""The outbox's claims and the one rule of an attempt's answer.

A claim is the one leased queue's (`verbs.leases.OUTBOX`): the due rows of the channels
this process can send (`queued`, `retrying`, or `sending` whose lease ran out: a drainer
that died holding them), an operator's retried messages first, then oldest due first,
each `sending` until the lease ends. The messages are then sent outside any transaction,
and `record` writes every answer of a batch in one statement, onto the rows the claim's
token still holds. `attempts` grows by one for each message actually tried; a message
the drainer did not try because its relay went down earlier in the batch takes the
relay's failure without an attempt; one it did not try because the batch ran out of time
is given back as it was (`give_back`). A process killed between the relay's answer and
the record sends those messages again after the lease (at least once; the same
`Message-ID`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from events_svc.backoff import OUTBOX
from events_svc.db import Pool, affected, connection
from events_svc.ports import DeliveryErrorKind, DeliveryFailure, QueuedMessage
from events_svc.verbs.leases import OUTBOX as QUEUE
from events_svc.verbs.leases import Lease

_RETRIED = frozenset(
    {DeliveryErrorKind.CONNECTION, DeliveryErrorKind.TIMEOUT, DeliveryErrorKind.TEMPORARY}
)
_RECORD = """
UPDATE event.outbox_messages o
SET delivery_state = r.state::event.delivery_state, next_attempt_at = r.next_at,
    sent_at = r.sent_at, lease_until = NULL, lease_token = NULL,
    attempts = o.attempts + CASE WHEN r.tried THEN 1 ELSE 0 END,
    -- a message not tried keeps the error of its last attempt, unless the relay's is given
    last_error = CASE WHEN r.tried OR r.error IS NOT NULL THEN r.error::jsonb
                      ELSE o.last_error END
FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::text[],
    $6::boolean[]) AS r(id, state, next_at, sent_at, error, tried)
WHERE o.id = r.id AND o.id = ANY($7::uuid[])  -- the rows the claim still holds
"""
_NEXT_DUE = """
SELECT min(next_attempt_at) FROM event.outbox_messages
WHERE delivery_state IN ('queued', 'retrying', 'sending')
  AND channel = ANY($1::event.notification_channel[])
"""


@dataclass(frozen=True)
class Claimed:
    """One message of a claim, with what the answer's rule needs: the attempts made
    before this claim, and whether an operator's retry put it first."""

    message: QueuedMessage
    created_at: datetime
    attempts: int
    retried: bool = False


@dataclass(frozen=True)
class Claim:
    """The messages one claim holds, and the lease that holds them."""

    lease: Lease
    rows: list[Claimed]


@dataclass(frozen=True)
class Outcome:
    """What an answer makes of a row: its state, when it is due again (None once sent or
    failed), its error, and whether the message was tried (one more attempt)."""

    state: str
    next_attempt_at: datetime | None
    sent_at: datetime | None
    error: dict[str, object] | None
    tried: bool = True


def outcome_of(
    failure: DeliveryFailure | None,
    created_at: datetime,
    attempts: int,
    now: datetime,
    *,
    tried: bool = True,
    wait: timedelta | None = None,
) -> Outcome:
    """The one rule of an answer: accepted → `sent`; a temporary failure (a 4xx, a refused
    or dropped connection, a timeout) → `retrying` after `wait` (by default the outbox's
    back-off after `attempts` attempts), until 48 h after the message was written, then
    `failed` (`expired`); anything else → `failed`. A message not tried because its relay
    is down takes the relay's failure with `tried` false (no attempt counted)."""
    if failure is None:
        return Outcome("sent", None, now, None)
    error: dict[str, object] = {
        "kind": failure.kind.value,
        "code": failure.code,
        "detail": failure.detail[:300],
    }
    if failure.kind not in _RETRIED:
        return Outcome("failed", None, None, error, tried)
    if OUTBOX.gives_up(0, written_at=created_at, now=now):
        last = f"{failure.kind.value}: {failure.detail}"[:250]
        expired = {**error, "kind": "expired", "detail": f"retried for 48 h; last {last}"}
        return Outcome("failed", None, None, expired, tried)
    delay = wait if wait is not None else OUTBOX.delay(attempts)
    return Outcome("retrying", now + delay, None, error, tried)


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
    pool: Pool,
    channels: list[str],
    now: datetime,
    limit: int,
    lease: timedelta,
    retried: Sequence[UUID] = (),
) -> Claim:
    """Claim up to `limit` due messages of `channels` until `now + lease`; the `retried`
    ones (an operator's retry) first."""
    claim = await QUEUE.claim(pool, now, limit, lease, channels, list(retried))
    rows = sorted(claim.rows, key=lambda r: (not r["retried"], r["created_at"], r["id"]))
    claimed = [
        Claimed(_message(r), r["created_at"], r["attempts"], bool(r["retried"])) for r in rows
    ]
    return Claim(claim.lease, claimed)


async def record(pool: Pool, claim: Claim, answers: list[tuple[UUID, Outcome]]) -> int:
    """Write the answers of one claim in one statement; answers how many rows it still
    held (a row whose lease ran out and was claimed again is left to its new holder)."""
    if not answers:
        return 0
    ids, states, next_at, sent_at, errors, tried = [], [], [], [], [], []
    for row_id, outcome in answers:
        ids.append(row_id)
        states.append(outcome.state)
        next_at.append(outcome.next_attempt_at)
        sent_at.append(outcome.sent_at)
        errors.append(json.dumps(outcome.error) if outcome.error is not None else None)
        tried.append(outcome.tried)
    token = claim.lease.token
    async with QUEUE.holding(pool, [(i, token) for i in ids]) as (conn, held):
        if not held:
            return 0
        status = await conn.execute(
            _RECORD, ids, states, next_at, sent_at, errors, tried, list(held)
        )
    return affected(status)


async def give_back(pool: Pool, claim: Claim, ids: Sequence[UUID], now: datetime) -> int:
    """Messages of the claim that were not tried (the batch ran out of time): back to
    the queue as they were, due now, their attempts and last error unchanged."""
    return await QUEUE.give_back(pool, [(i, claim.lease.token) for i in ids], now)


async def next_delivery_due(pool: Pool, channels: list[str]) -> datetime | None:
    """When the earliest unsent message of `channels` is due (None: none is waiting)."""
    async with connection(pool) as conn:
        due: datetime | None = await conn.fetchval(_NEXT_DUE, channels)
    return due
