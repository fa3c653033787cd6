"""Scheduler rows (event.mails), the standalone template store, and the outbox.

A scheduler row's `mail_state` is derived, never stored: `cancelled` when its
event is cancelled, `error` while a failure is recorded, `sent` once done,
`running` when some attendees got it, else `scheduled`. Writes lock the event
row, then its scheduler rows by id (the lock order the pass shares), and
recompute the due times of unsent work (`schedules.reschedule_event`). A line's
template must exist when the line is written (asked of the composed template
renderer); templates are checked when written (`templating.check_template`).
Editing a line, or the template it uses, clears the line's back-off. Deleting a
template deletes the scheduler lines that use it (one audited verb).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.models import MailCreate, TemplateCreate
from events_svc.ports import TemplateRenderer
from events_svc.templating import check_template
from events_svc.verbs.arming import lock_schedulers, wake_schedulers
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, merge_patch, page
from events_svc.verbs.events import get_event_row, lock_event
from events_svc.verbs.pii import mask_email, mask_phone
from events_svc.verbs.schedules import reschedule_event

_VIEW = """
SELECT m.id, m.event_id, m.sequence, m.interval_nbr, m.interval_unit::text AS interval_unit,
    m.interval_kind::text AS interval_kind, m.template_ref,
    m.notification_channel::text AS notification_channel, m.scheduled_date, m.mail_done,
    m.error_kind::text AS error_kind, m.error_datetime, m.error_detail, m.attempts,
    m.next_attempt_at, m.created_at, m.updated_at,
    sent.n AS count_sent, dropped.n AS count_dropped, failed.n AS count_failed,
    (SELECT count(*) FROM event.registrations r
     WHERE r.event_id = m.event_id AND r.state IN ('open', 'done') AND r.active
       AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x WHERE x.scheduler_id = m.id
                       AND x.registration_id = r.id AND x.outcome <> 'pending')) AS count_pending,
    CASE WHEN e.kanban_state = 'cancel' THEN 'cancelled'
         WHEN m.error_datetime IS NOT NULL THEN 'error'
         WHEN m.mail_done THEN 'sent'
         WHEN sent.n > 0 THEN 'running'
         ELSE 'scheduled' END AS mail_state
FROM event.mails m
JOIN event.events e ON e.id = m.event_id
CROSS JOIN LATERAL (SELECT count(*) AS n FROM event.mail_registrations x
                    WHERE x.scheduler_id = m.id AND x.mail_sent) sent
CROSS JOIN LATERAL (SELECT count(*) AS n FROM event.mail_registrations x
                    WHERE x.scheduler_id = m.id AND x.outcome = 'dropped_window_closed') dropped
CROSS JOIN LATERAL (SELECT count(*) AS n FROM event.mail_registrations x
                    WHERE x.scheduler_id = m.id AND x.outcome = 'failed') failed
"""
_GET = (
    _VIEW
    + """
WHERE m.id = $1 AND ($2::uuid IS NULL OR e.company_id IS NULL OR e.company_id = $2)
"""
)
_LIST = (
    _VIEW
    + """
WHERE m.event_id = $1 ORDER BY m.sequence, m.id
"""
)
_FIND = """
SELECT m.event_id FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE m.id = $1 AND ($2::uuid IS NULL OR e.company_id IS NULL OR e.company_id = $2)
"""
_ROW = "SELECT * FROM event.mails WHERE id = $1"  # locked by lock_schedulers
_INSERT = """
INSERT INTO event.mails (event_id, sequence, interval_nbr, interval_unit, interval_kind,
    template_ref, template_kind, notification_channel, created_at, updated_at)
VALUES ($1, $2, $3, $4::event.interval_unit, $5::event.interval_kind, $6,
    $7::text::event.template_kind, $7::text::event.notification_channel, $8, $8)
RETURNING id
"""
_UPDATE = """
UPDATE event.mails SET sequence = $2, interval_nbr = $3, interval_unit = $4::event.interval_unit,
    interval_kind = $5::event.interval_kind, template_ref = $6,
    template_kind = $7::text::event.template_kind,
    notification_channel = $7::text::event.notification_channel,
    updated_at = $8,
    -- an edited line starts afresh: its back-off is cleared (the error shows until a success)
    attempts = 0, next_attempt_at = NULL
WHERE id = $1
"""
_MAIL_FIELDS = ("sequence", "interval_nbr", "interval_unit", "interval_kind", "template_ref",
                "notification_channel")  # fmt: skip

_T_COLS = "id, kind::text AS kind, name, subject, body, created_at, updated_at"
_T_GET = f"SELECT {_T_COLS} FROM event.message_templates WHERE id = $1"  # noqa: S608
_T_LOCK = f"SELECT {_T_COLS} FROM event.message_templates WHERE id = $1 FOR UPDATE"  # noqa: S608
_T_LIST = f"""
SELECT {_T_COLS} FROM event.message_templates
WHERE ($1::text IS NULL OR (name, id) > ($1, $2::uuid)) ORDER BY name, id LIMIT $3
"""  # noqa: S608 - constant text only
_T_INSERT = f"""
INSERT INTO event.message_templates (kind, name, subject, body, created_at, updated_at)
VALUES ($1::event.template_kind, $2, $3, $4, $5, $5) RETURNING {_T_COLS}
"""  # noqa: S608 - constant text only
_T_UPDATE = f"""
UPDATE event.message_templates SET name = $2, subject = $3, body = $4, updated_at = $5
WHERE id = $1 RETURNING {_T_COLS}
"""  # noqa: S608 - constant text only
_T_DELETE = "DELETE FROM event.message_templates WHERE id = $1"
# scheduler rows that use a template, locked by id (the lock order) before they are written
_T_LOCK_LINES = """
SELECT id FROM event.mails WHERE template_ref = $1 ORDER BY id
FOR UPDATE  -- deleted next (or their back-off cleared)
"""
_T_CLEAR_BACKOFF = """
UPDATE event.mails SET attempts = 0, next_attempt_at = NULL
WHERE id = ANY($1::uuid[]) AND (attempts > 0 OR next_attempt_at IS NOT NULL)
RETURNING event_id
"""
# the cascade: scheduler lines (and type template lines) naming a deleted template go too
_T_CASCADE_MAILS = "DELETE FROM event.mails WHERE template_ref = $1 RETURNING id, event_id"
_T_CASCADE_TYPE_MAILS = "DELETE FROM event.type_mails WHERE template_ref = $1"

_OUTBOX = """
SELECT o.id, o.channel::text AS channel, o.recipient, o.sender, o.subject, o.body,
    o.attachments, o.event_id, o.registration_id, o.scheduler_id, o.trigger_id, o.created_at
FROM event.outbox_messages o
WHERE o.event_id = $1 AND ($2::timestamptz IS NULL OR (o.created_at, o.id) > ($2, $3::uuid))
ORDER BY o.created_at, o.id LIMIT $4
"""


async def _mail(conn: Connection, actor: Actor, mail_id: UUID) -> dict[str, Any]:
    row = await conn.fetchrow(_GET, mail_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such scheduler.")
    return dict(row)


async def _check_template_ref(conn: Connection, templates: TemplateRenderer, ref: UUID) -> None:
    """A line may only name a template the composed renderer knows (422 otherwise)."""
    if await templates.template_kind(conn, ref) is None:
        raise errors.TemplateNotFound(field="template_ref", template_ref=str(ref))


async def create_mail(
    pool: Pool, actor: Actor, cmd: MailCreate, now: datetime, *, templates: TemplateRenderer
) -> dict[str, Any]:
    """Add a scheduler line to an event (event row locked) and compute its due time."""
    async with transaction(pool) as conn:
        await lock_event(conn, actor, cmd.event_id)
        await _check_template_ref(conn, templates, cmd.template_ref)
        mail_id = await conn.fetchval(
            _INSERT, cmd.event_id, cmd.sequence, cmd.interval_nbr, cmd.interval_unit,
            cmd.interval_kind, cmd.template_ref, cmd.notification_channel, now,
        )  # fmt: skip
        await reschedule_event(conn, cmd.event_id, now)
        await write_audit(conn, actor, "mail_created", "mail", mail_id, event_id=cmd.event_id)
        return await _mail(conn, actor, mail_id)


async def patch_mail(
    pool: Pool,
    actor: Actor,
    mail_id: UUID,
    changes: dict[str, Any],
    now: datetime,
    *,
    templates: TemplateRenderer,
) -> dict[str, Any]:
    """Edit interval or template; unsent work is re-timed, sent mail stays sent, the
    back-off is cleared (locks: event row, then its scheduler rows by id)."""
    async with transaction(pool) as conn:
        found = await conn.fetchrow(_FIND, mail_id, actor.company_id)
        if found is None:
            raise errors.NotFound("No such scheduler.")
        await lock_event(conn, actor, found["event_id"])
        await lock_schedulers(conn, found["event_id"])
        row = await conn.fetchrow(_ROW, mail_id)
        if row is None:  # deleted (with its template) while we waited for the locks
            raise errors.NotFound("No such scheduler.")
        current = dict(row)
        if changes.get("template_ref") not in (None, current["template_ref"]):
            await _check_template_ref(conn, templates, changes["template_ref"])
        for key in ("interval_unit", "interval_kind", "notification_channel"):
            current[key] = str(current[key])
        new = merge_patch(current, changes, frozenset(_MAIL_FIELDS))
        await conn.execute(_UPDATE, mail_id, *(new[f] for f in _MAIL_FIELDS), now)
        await reschedule_event(conn, found["event_id"], now)
        summary = {"fields": sorted(changes)}
        await write_audit(conn, actor, "mail_updated", "mail", mail_id,
                          event_id=found["event_id"], summary=summary)  # fmt: skip
        return await _mail(conn, actor, mail_id)


async def get_mail(pool: Pool, actor: Actor, mail_id: UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        return await _mail(conn, actor, mail_id)


async def list_mails(pool: Pool, actor: Actor, event_id: UUID) -> dict[str, Any]:
    async with transaction(pool) as conn:
        await get_event_row(conn, actor, event_id)
        rows = [dict(r) for r in await conn.fetch(_LIST, event_id)]
    return {"items": rows, "next_cursor": None}


# --- templates --------------------------------------------------------------------------------


def _template_view(row: Any, links_unavailable: list[str]) -> dict[str, Any]:
    """A template row plus the context links that render as empty text here."""
    return {**dict(row), "links_unavailable": list(links_unavailable)}


def _check_texts(subject: str, body: str) -> None:
    check_template(subject, field="subject")
    check_template(body, field="body")


async def create_template(
    pool: Pool, actor: Actor, cmd: TemplateCreate, now: datetime, *, links_unavailable: list[str]
) -> dict[str, Any]:
    """Store a template once both texts compile and name only the documented context."""
    _check_texts(cmd.subject, cmd.body)
    async with transaction(pool) as conn:
        row = must(await conn.fetchrow(_T_INSERT, cmd.kind, cmd.name, cmd.subject, cmd.body, now))
        await write_audit(conn, actor, "template_created", "template", row["id"])
        return _template_view(row, links_unavailable)


async def get_template(
    pool: Pool, template_id: UUID, *, links_unavailable: list[str]
) -> dict[str, Any]:
    async with connection(pool) as conn:
        row = await conn.fetchrow(_T_GET, template_id)
    if row is None:
        raise errors.NotFound("No such template.")
    return _template_view(row, links_unavailable)


async def list_templates(
    pool: Pool,
    *,
    links_unavailable: list[str],
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, str)
    async with connection(pool) as conn:
        rows = [_template_view(r, links_unavailable)
                for r in await conn.fetch(_T_LIST, key, after, size + 1)]  # fmt: skip
    return page(rows, size, "name")


async def patch_template(
    pool: Pool,
    actor: Actor,
    template_id: UUID,
    changes: dict[str, Any],
    now: datetime,
    *,
    links_unavailable: list[str],
) -> dict[str, Any]:
    """Edit a template (checked like a new one); the lines using it lose their back-off
    and are tried at once (locks: the template row, then its scheduler rows by id)."""
    async with transaction(pool) as conn:
        current = await conn.fetchrow(_T_LOCK, template_id)
        if current is None:
            raise errors.NotFound("No such template.")
        new = merge_patch(dict(current), changes, frozenset({"name", "subject", "body"}))
        _check_texts(new["subject"], new["body"])
        row = must(await conn.fetchrow(_T_UPDATE, template_id, new["name"], new["subject"],
                                       new["body"], now))  # fmt: skip
        lines = [r["id"] for r in await conn.fetch(_T_LOCK_LINES, template_id)]
        for event_id in {r["event_id"] for r in await conn.fetch(_T_CLEAR_BACKOFF, lines)}:
            await wake_schedulers(conn, event_id)
        await write_audit(conn, actor, "template_updated", "template", template_id,
                          summary={"fields": sorted(changes)})  # fmt: skip
        return _template_view(row, links_unavailable)


async def delete_template(pool: Pool, actor: Actor, template_id: UUID) -> dict[str, Any]:
    """Delete a template and the scheduler lines that use it; answers what went (locks:
    the template row, then those scheduler rows by id)."""
    async with transaction(pool) as conn:
        if await conn.fetchrow(_T_LOCK, template_id) is None:
            raise errors.NotFound("No such template.")
        await conn.fetch(_T_LOCK_LINES, template_id)
        mails = await conn.fetch(_T_CASCADE_MAILS, template_id)
        type_lines = int((await conn.execute(_T_CASCADE_TYPE_MAILS, template_id)).split()[-1])
        await conn.execute(_T_DELETE, template_id)
        reason = {"reason": "template_deleted"}
        for mail in mails:
            await write_audit(conn, actor, "mail_deleted", "mail", mail["id"],
                              event_id=mail["event_id"], summary=reason)  # fmt: skip
        summary = {"mails_deleted": len(mails), "type_lines_deleted": type_lines}
        await write_audit(conn, actor, "template_deleted", "template", template_id, summary=summary)
    return summary


# --- outbox -----------------------------------------------------------------------------------


async def list_outbox(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    *,
    pii_full: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """What the standalone queue holds for an event. Rendered text carries attendee data:
    without `pii_full` the recipient is masked and subject, body and attachments' contents
    are withheld (null); a full read is audited."""
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, datetime)
    async with transaction(pool) as conn:
        await get_event_row(conn, actor, event_id)
        rows = [dict(r) for r in await conn.fetch(_OUTBOX, event_id, key, after, size + 1)]
        if pii_full and rows:
            await write_audit(conn, actor, "outbox_pii_read", "outbox", None, event_id=event_id,
                              summary={"rows": min(len(rows), size)})  # fmt: skip
    if not pii_full:
        for row in rows:
            mask = mask_email if row["channel"] == "mail" else mask_phone
            row["recipient"] = mask(row["recipient"])
            row["subject"] = row["body"] = None
            row["attachments"] = [
                {k: v for k, v in a.items() if k != "content"} | {"content": None}
                for a in row["attachments"]
            ]
    return page(rows, size, "created_at")
