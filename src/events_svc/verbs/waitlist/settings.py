"""An event's waiting-list settings: whether it takes entries, how long an offer is held,
and the mail template of an offer (none: the built-in text).

No row means the defaults (off, 48 hours, no template). Turning the list off stops new
entries only: the entries already waiting keep their place and are still offered seats
as they free up (an operator removes the ones that should not be served).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.ports import TemplateRenderer
from events_svc.verbs.audit import write_audit
from events_svc.verbs.fence import get_event_row
from events_svc.verbs.mail import check_template_company

DEFAULTS: dict[str, Any] = {"enabled": False, "offer_hours": 48, "offer_template_id": None}
_GET = """
SELECT enabled, offer_hours, offer_template_id FROM event.waitlist_settings WHERE event_id = $1
"""
_PUT = """
INSERT INTO event.waitlist_settings (event_id, enabled, offer_hours, offer_template_id, updated_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (event_id) DO UPDATE SET enabled = excluded.enabled,
    offer_hours = excluded.offer_hours, offer_template_id = excluded.offer_template_id,
    updated_at = excluded.updated_at
RETURNING enabled, offer_hours, offer_template_id
"""


async def _check_template(
    conn: Connection, templates: TemplateRenderer, ref: UUID, company_id: UUID | None
) -> None:
    field = "offer_template_id"
    kind = await templates.template_kind(conn, ref)
    if kind is None:
        raise errors.TemplateNotFound(field=field, template_ref=str(ref))
    if kind != "mail":
        raise errors.ChannelKindMismatch(
            "An offer is sent by mail: choose a mail template.",
            field=field,
            given=kind,
            template_kind="mail",
        )
    await check_template_company(templates, conn, ref, company_id, field=field)


async def read_settings(conn: Connection, event_id: UUID) -> dict[str, Any]:
    row = await conn.fetchrow(_GET, event_id)
    return {**DEFAULTS, **(dict(row) if row is not None else {}), "event_id": event_id}


async def get_settings(pool: Pool, actor: Actor, event_id: UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        await get_event_row(conn, actor, event_id)
        return await read_settings(conn, event_id)


async def put_settings(
    pool: Pool,
    templates: TemplateRenderer,
    actor: Actor,
    event_id: UUID,
    settings: dict[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """Replace the settings (audited). An offer template must be a mail template the
    event's company may use (422 `template_not_found`, `channel_kind_mismatch`,
    `template_not_in_company`)."""
    async with transaction(pool) as conn:
        event = await get_event_row(conn, actor, event_id)
        template = settings.get("offer_template_id")
        if template is not None:
            await _check_template(conn, templates, template, event["company_id"])
        row = must(
            await conn.fetchrow(
                _PUT, event_id, settings["enabled"], settings["offer_hours"], template, now
            )
        )
        saved = {**dict(row), "event_id": event_id}
        summary = {k: str(v) if isinstance(v, UUID) else v for k, v in dict(row).items()}
        await write_audit(
            conn,
            actor,
            "waitlist_settings_changed",
            "event",
            event_id,
            event_id=event_id,
            summary=summary,
        )
        return saved
