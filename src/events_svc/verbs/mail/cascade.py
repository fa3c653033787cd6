"""The ONE template cascade verb, for both channels: when a template of the store is
deleted, the scheduler lines and type lines of that (kind, template) pair go with it, and
so does a trigger purpose's mapping to it (the dispatcher then parks that purpose as
unmapped until another template is mapped), and an event's waiting-list offer template
(its offers are then sent with the built-in text).

No foreign key can cross the template store's boundary (a host may keep its templates
elsewhere), so the cascade is a verb the template side calls: `DELETE
/admin/templates/{id}` calls it in its own transaction, a host calls
`EventSurface.on_template_deleted(kind, ref)`. One set-based statement deletes the
lines and writes one `mail_deleted` audit row per scheduler line; the cascade itself is
audited as `template_lines_cascaded`. It touches only what the actor sees: the
scheduler lines of events within the actor's company fence (`event.visible_to`), the
type lines (types are shared), and the dispatcher's mapping only for a platform operator
(a company actor never sees it; it maps platform templates only anyway). Locks: the
scheduler rows of the pair, by id (the lock order the pass shares), before they are
deleted.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from events_svc.actors import Actor
from events_svc.db import Connection, Pool, must, transaction
from events_svc.models.base import Channel
from events_svc.verbs.audit import write_audit

# $3: the actor's company (NULL: a platform operator, who sees every event)
_LOCK_LINES = """
SELECT m.id FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE m.template_ref = $2 AND m.template_kind = $1::event.template_kind
  AND event.visible_to(e.company_id, $3)
ORDER BY m.id FOR UPDATE OF m  -- deleted next
"""
_CASCADE = """
WITH gone AS (
    DELETE FROM event.mails m USING event.events e
    WHERE e.id = m.event_id AND m.template_ref = $2 AND m.template_kind = $1::event.template_kind
      AND event.visible_to(e.company_id, $5)  -- only the lines of events the actor sees
    RETURNING m.id, m.event_id
), typed AS (
    DELETE FROM event.type_mails  -- types are shared: every company sees them
    WHERE template_ref = $2 AND template_kind = $1::event.template_kind
    RETURNING id
), mapped AS (
    DELETE FROM event.trigger_templates  -- the dispatcher maps mail templates only
    WHERE template_id = $2 AND $1::event.template_kind = 'mail'
      AND $5::uuid IS NULL  -- the mapping is the platform's: a company actor never sees it
    RETURNING purpose
), offers AS (
    UPDATE event.waitlist_settings s SET offer_template_id = NULL  -- the built-in text then
    FROM event.events e
    WHERE e.id = s.event_id AND s.offer_template_id = $2
      AND $1::event.template_kind = 'mail' AND event.visible_to(e.company_id, $5)
    RETURNING s.event_id
), audit AS (
    INSERT INTO event.event_audit_log
        (actor_id, actor_kind, company_id, verb, object_kind, object_id, event_id, summary)
    SELECT $3, $4, $5, 'mail_deleted', 'mail', id, event_id,
        '{"reason": "template_deleted"}'::jsonb
    FROM gone
)
SELECT (SELECT count(*) FROM gone) AS mails, (SELECT count(*) FROM typed) AS type_lines,
    (SELECT coalesce(array_agg(purpose::text ORDER BY purpose), '{}') FROM mapped) AS purposes,
    (SELECT count(*) FROM offers) AS offers
"""


async def cascade_in(conn: Connection, actor: Actor, kind: Channel, ref: UUID) -> dict[str, Any]:
    """Delete the (kind, ref) pair's scheduler and type lines inside the caller's
    transaction; answers {mails_deleted, type_lines_deleted}."""
    await conn.fetch(_LOCK_LINES, kind, ref, actor.company_id)
    row = must(await conn.fetchrow(_CASCADE, kind, ref, actor.id, actor.kind, actor.company_id))
    summary: dict[str, Any] = {
        "mails_deleted": int(row["mails"]),
        "type_lines_deleted": int(row["type_lines"]),
        "trigger_purposes_unmapped": list(row["purposes"]),
        "waitlist_offer_templates_unset": int(row["offers"]),
    }
    await write_audit(
        conn,
        actor,
        "template_lines_cascaded",
        "template",
        ref,
        summary={"kind": kind, **summary},
    )
    return summary


async def on_template_deleted(pool: Pool, actor: Actor, kind: Channel, ref: UUID) -> dict[str, Any]:
    """The cascade in its own transaction (a host's template store deleted `ref`)."""
    async with transaction(pool) as conn:
        return await cascade_in(conn, actor, kind, ref)
