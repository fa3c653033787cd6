"""Scheduler lines (event.mails): create, edit, read, with their derived state.

A line's `mail_state` is derived, never stored (the view `event.mail_line_view`):
`cancelled` when its event is cancelled, `error` while a failure is recorded, `sent`
once done, `running` when some attendees got it, else `scheduled`. Writes lock the
event row, then its scheduler rows by id (the lock order the pass shares), and recompute
the due times of unsent work (`schedules.reschedule_event`). A line's template must exist when the
line is written (asked of the composed template renderer) and be of the event's company
or a platform template (422 `template_not_in_company`, when the renderer fences its
templates by company, as the standalone store does), and the line's
`notification_channel` follows the template's kind: omitted, it is the kind; named and
different, 422 `channel_kind_mismatch` (`line_channel`, shared with the type lines).
Editing a line clears its back-off.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, transaction
from events_svc.models import MailCreate
from events_svc.ports import TemplateRenderer, template_company
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import merge_patch
from events_svc.verbs.fence import get_event_row, lock_event
from events_svc.verbs.mail.arming import lock_schedulers
from events_svc.verbs.mail.schedules import reschedule_event

_GET = """
SELECT * FROM event.mail_line_view v
WHERE v.id = $1 AND event.visible_to(v.event_company_id, $2)
"""
_LIST = "SELECT * FROM event.mail_line_view v WHERE v.event_id = $1 ORDER BY v.sequence, v.id"
_FIND = """
SELECT m.event_id FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE m.id = $1 AND event.visible_to(e.company_id, $2)
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
_MAIL_FIELDS = (
    "sequence",
    "interval_nbr",
    "interval_unit",
    "interval_kind",
    "template_ref",
    "notification_channel",
)


async def _mail(conn: Connection, actor: Actor, mail_id: UUID) -> dict[str, Any]:
    row = await conn.fetchrow(_GET, mail_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such scheduler.")
    return dict(row)


async def check_template_company(
    templates: TemplateRenderer,
    conn: Connection,
    ref: UUID,
    company_id: UUID | None,
    *,
    field: str,
    detail: str | None = None,
) -> None:
    """A template serves the lines of `company_id` (None: of every company, or of a shared
    event) only when it is that company's or a platform template: the rule of SQL's
    `event.template_serves`, asked of the renderer when it fences its templates by
    company (`ports.TemplateCompanies`); else 422 `template_not_in_company`."""
    fenced, owner = await template_company(templates, conn, ref)
    if fenced and owner is not None and owner != company_id:
        raise errors.TemplateNotInCompany(detail, field=field, template_ref=str(ref))


async def line_channel(
    conn: Connection,
    templates: TemplateRenderer,
    ref: UUID,
    *,
    company_id: UUID | None,
    channel: str | None = None,
    kind: str | None = None,
) -> str:
    """The channel of a line naming template `ref`: the template's kind. A template the
    composed renderer does not know is 422 `template_not_found`; one of a company other
    than `company_id` (the company whose line it is; None: only platform templates) is
    422 `template_not_in_company`, when the renderer fences its templates by company
    (`ports.TemplateCompanies`) (the contract names that refusal for another company's
    template: template ids are random, so it tells nothing that could be guessed); a named
    kind or channel that disagrees with it is 422 `channel_kind_mismatch`."""
    actual = await templates.template_kind(conn, ref)
    if actual is None:
        raise errors.TemplateNotFound(field="template_ref", template_ref=str(ref))
    await check_template_company(templates, conn, ref, company_id, field="template_ref")
    for name, given in (("template_kind", kind), ("notification_channel", channel)):
        if given is not None and given != actual:
            raise errors.ChannelKindMismatch(field=name, given=given, template_kind=actual)
    return actual


async def create_mail(
    pool: Pool, actor: Actor, cmd: MailCreate, now: datetime, *, templates: TemplateRenderer
) -> dict[str, Any]:
    """Add a scheduler line to an event (event row locked) and compute its due time."""
    async with transaction(pool) as conn:
        event = await lock_event(conn, actor, cmd.event_id)
        channel = await line_channel(
            conn,
            templates,
            cmd.template_ref,
            company_id=event["company_id"],
            channel=cmd.notification_channel,
        )
        mail_id = await conn.fetchval(
            _INSERT,
            cmd.event_id,
            cmd.sequence,
            cmd.interval_nbr,
            cmd.interval_unit,
            cmd.interval_kind,
            cmd.template_ref,
            channel,
            now,
        )
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
        event = await lock_event(conn, actor, found["event_id"])
        await lock_schedulers(conn, found["event_id"])
        row = await conn.fetchrow(_ROW, mail_id)
        if row is None:  # deleted (with its template) while we waited for the locks
            raise errors.NotFound("No such scheduler.")
        current = dict(row)
        for key in ("interval_unit", "interval_kind", "notification_channel"):
            current[key] = str(current[key])
        new = merge_patch(current, changes, frozenset(_MAIL_FIELDS))
        if "template_ref" in changes or "notification_channel" in changes:
            new["notification_channel"] = await line_channel(
                conn,
                templates,
                new["template_ref"],
                company_id=event["company_id"],
                channel=changes.get("notification_channel"),
            )
        await conn.execute(_UPDATE, mail_id, *(new[f] for f in _MAIL_FIELDS), now)
        await reschedule_event(conn, found["event_id"], now)
        summary = {"fields": sorted(changes)}
        await write_audit(
            conn,
            actor,
            "mail_updated",
            "mail",
            mail_id,
            event_id=found["event_id"],
            summary=summary,
        )
        return await _mail(conn, actor, mail_id)


async def get_mail(pool: Pool, actor: Actor, mail_id: UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        return await _mail(conn, actor, mail_id)


async def list_mails(pool: Pool, actor: Actor, event_id: UUID) -> dict[str, Any]:
    async with transaction(pool) as conn:
        await get_event_row(conn, actor, event_id)
        rows = [dict(r) for r in await conn.fetch(_LIST, event_id)]
    return {"items": rows, "next_cursor": None}
