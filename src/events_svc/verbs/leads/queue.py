"""The lead queue as operators read it, and the relink of a merged lead.

`relink_lead(old, new)` is the seam the host's lead merge calls: it moves every
provenance row naming the old lead to the new one in ONE update (404 `lead_not_found`
when none names it); no lead schema is touched from here (LEAD-TYPE-SPLIT).

Both are fenced: the queue lists the requests of events the actor sees
(`event.visible_to`); relink moves only the provenance rows the actor sees, those of a
rule the actor sees (`event.lead_rule_visible_to`: a company actor's own company's
rules) on an event it sees. An old lead id named only outside the actor's scope answers
the same 404 `lead_not_found` as an unknown one, and nothing outside it moves: a guessed
CRM id (often a small integer) tells nothing about other companies.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, page

_LIST = """
SELECT q.id, q.event_id, q.done, q.claimed_at, q.error_detail, q.attempts, q.next_attempt_at,
    q.queued_at, q.updated_at
FROM event.lead_requests q JOIN event.events e ON e.id = q.event_id
WHERE ($1::uuid IS NULL OR q.event_id = $1) AND event.visible_to(e.company_id, $2)
  AND ($3::timestamptz IS NULL OR (q.queued_at, q.id) > ($3, $4::uuid))
ORDER BY q.queued_at, q.id LIMIT $5
"""
_EVENT_VISIBLE = """
SELECT EXISTS (SELECT 1 FROM event.events WHERE id = $1 AND event.visible_to(company_id, $2))
"""
_RELINK = """
WITH moved AS (
    UPDATE event.lead_provenances v SET lead_id = $2, updated_at = $3
    FROM event.lead_rules r, event.events e
    WHERE v.lead_id = $1 AND r.id = v.rule_id AND e.id = v.event_id
      AND event.lead_rule_visible_to(r.company_id, $4)  -- the actor's rules only
      AND event.visible_to(e.company_id, $4)
    RETURNING v.id
)
SELECT count(*) FROM moved
"""


async def list_requests(
    pool: Pool,
    actor: Actor,
    *,
    event_id: UUID | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """The queue (of one event, or of every event the actor sees), oldest first."""
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, datetime)
    async with transaction(pool) as conn:
        if event_id is not None and not await conn.fetchval(
            _EVENT_VISIBLE, event_id, actor.company_id
        ):
            raise errors.NotFound("No such event.")
        rows = await conn.fetch(_LIST, event_id, actor.company_id, key, after, size + 1)
    return page([dict(r) for r in rows], size, "queued_at")


async def relink_lead(pool: Pool, actor: Actor, old: str, new: str, now: datetime) -> int:
    """Move the old lead's provenance the actor sees to the new lead (one update); how
    many rows moved. None in the actor's scope: 404 `lead_not_found`, as for an unknown
    id."""
    async with transaction(pool) as conn:
        moved = int(await conn.fetchval(_RELINK, old, new, now, actor.company_id))
        if not moved:
            raise errors.LeadNotFound(field="old_lead_id")
        await write_audit(
            conn, actor, "lead_relinked", "lead_provenance", None, summary={"moved": moved}
        )
    return moved
