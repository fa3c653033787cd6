"""The revision history of a registration, and the replay store of reasoned commands.

Every reasoned write (a correction, a cancel, a reactivation, the partner sync) adds one
`event.registration_revisions` row in the writer's transaction: the version after the
change, the actor, the reason, the field names and their before/after values. The values
are attendee data: they are read only through `list_revisions`, masked unless the reader
may see PII (a full read is audited). Audit rows name the fields, never the values.

A command sent with an `Idempotency-Key` claims `event.command_replays` (the key is per
actor) before it does anything: the first claim does the work and records its answer in the
same transaction (the caller leaves the attendee data out of it); a replay (the same verb,
object and body) answers that first result; the same key with another command is
`idempotency_key_conflict`. A refused command rolls its
claim back with it, so it can be retried under the same key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, encode_cursor
from events_svc.verbs.pii import mask_email, mask_name, mask_phone

_INSERT_REVISION = """
INSERT INTO event.registration_revisions
    (registration_id, version, verb, actor_id, actor_kind, reason, fields, changes, at)
VALUES ($1, $2, $3::event.revision_verb, $4, $5, $6, $7, $8, $9)
"""
_FIND = """
SELECT event_id FROM event.registrations r
WHERE r.id = $1 AND event.visible_to(r.company_id, $2)
"""
_LIST = """
SELECT id, version, verb::text AS verb, actor_id AS actor, actor_kind, reason, fields,
    changes, at
FROM event.registration_revisions
WHERE registration_id = $1 AND ($2::integer IS NULL OR version < $2)
ORDER BY version DESC LIMIT $3
"""
_CLAIM = """
INSERT INTO event.command_replays
    (actor_id, idempotency_key, verb, object_id, fingerprint, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
RETURNING 1
"""
_FIRST = """
SELECT verb, object_id, fingerprint, answer FROM event.command_replays
WHERE actor_id = $1 AND idempotency_key = $2
"""
_ANSWER = """
UPDATE event.command_replays SET answer = $3 WHERE actor_id = $1 AND idempotency_key = $2
"""
_MASKS = {"name": mask_name, "email": mask_email, "phone": mask_phone}


def _plain(value: Any) -> Any:
    """A value as JSON holds it (instants as RFC 3339 text)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return value


async def write_revision(
    conn: Connection,
    actor: Actor,
    reg_id: UUID,
    version: int,
    verb: str,
    reason: str,
    changes: dict[str, tuple[Any, Any]],
    now: datetime,
) -> None:
    """One history row: `changes` maps each changed field to (before, after)."""
    body = {k: {"before": _plain(b), "after": _plain(a)} for k, (b, a) in changes.items()}
    await conn.execute(
        _INSERT_REVISION,
        reg_id,
        version,
        verb,
        actor.id,
        actor.kind,
        reason,
        sorted(changes),
        body,
        now,
    )


def _masked(change: dict[str, Any], field: str) -> dict[str, Any]:
    mask = _MASKS.get(field)
    if mask is None:
        return change
    return {k: mask(v) if isinstance(v, str) else v for k, v in change.items()}


async def list_revisions(
    pool: Pool,
    actor: Actor,
    registration_id: UUID,
    *,
    pii_full: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """A registration's history, newest first (keyset on version); a full read is audited."""
    size = clamp_limit(limit)
    before, _ = decode_cursor(cursor, int)
    async with transaction(pool) as conn:
        event_id = await conn.fetchval(_FIND, registration_id, actor.company_id)
        if event_id is None:
            raise errors.NotFound("No such registration.")
        rows = [dict(r) for r in await conn.fetch(_LIST, registration_id, before, size + 1)]
        if pii_full and rows:
            await write_audit(
                conn,
                actor,
                "registration_revisions_pii_read",
                "registration",
                registration_id,
                event_id=event_id,
                summary={"rows": min(len(rows), size)},
            )
    items = rows[:size]
    if not pii_full:
        for item in items:
            item["changes"] = {f: _masked(c, f) for f, c in item["changes"].items()}
    more = len(rows) > size
    nxt = encode_cursor(items[-1]["version"], items[-1]["id"]) if more else None
    return {"items": items, "next_cursor": nxt}


@dataclass(frozen=True)
class Replay:
    """An Idempotency-Key of one command: its verb, object and body's fingerprint."""

    key: str
    verb: str
    object_id: UUID
    fingerprint: str

    @classmethod
    def of(cls, key: str | None, verb: str, object_id: UUID, body: dict[str, Any]) -> Replay | None:
        if key is None:
            return None
        text = json.dumps([verb, str(object_id), body], sort_keys=True, default=str)
        return cls(key, verb, object_id, hashlib.sha256(text.encode()).hexdigest())


async def claim_replay(
    conn: Connection, actor: Actor, replay: Replay | None, now: datetime
) -> dict[str, Any] | None:
    """None when this command is to be done now (the key is claimed, or none was sent);
    the first answer when it is a replay. A key of another command: 409."""
    if replay is None:
        return None
    args = (actor.id, replay.key, replay.verb, replay.object_id, replay.fingerprint, now)
    if await conn.fetchval(_CLAIM, *args) is not None:
        return None
    # the twin that holds the key committed before the insert above returned
    first = await conn.fetchrow(_FIRST, actor.id, replay.key)
    if first is None or first["fingerprint"] != replay.fingerprint or first["answer"] is None:
        raise errors.IdempotencyKeyConflict()
    answer: dict[str, Any] = first["answer"]
    return answer


async def record_answer(
    conn: Connection, actor: Actor, replay: Replay | None, answer: dict[str, Any]
) -> None:
    """Keep the first answer of a claimed command, for its replays."""
    if replay is not None:
        await conn.execute(_ANSWER, actor.id, replay.key, answer)
