"""Event-type template lines: mails, tickets, questions and booths a type carries.

They are copied onto an event once, at create (see `records.create_event`);
editing them later never touches existing events. Types are shared by every company,
so a type's mail line may name only a template of the writing actor's company or a
platform template (422 `template_not_in_company`); and at apply, a line whose template
belongs to another company than the new event's is not copied (`type_apply`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, transaction
from events_svc.models import TypeMailLine, TypeQuestionLine, TypeTicketLine
from events_svc.models.catalog import TypeBoothLine
from events_svc.ports import TemplateRenderer
from events_svc.verbs.audit import write_audit
from events_svc.verbs.events import catalog
from events_svc.verbs.events.tickets import check_per_order_cap
from events_svc.verbs.mail import line_channel

_LOCK_TYPE = "SELECT id FROM event.types WHERE id = $1 FOR UPDATE"
_ADD_MAIL = """
INSERT INTO event.type_mails (type_id, sequence, interval_nbr, interval_unit, interval_kind,
    template_ref, template_kind, notification_channel, created_at)
VALUES ($1, $2, $3, $4::event.interval_unit, $5::event.interval_kind, $6,
    $7::event.template_kind, $8::event.notification_channel, $9)
RETURNING id
"""
_ADD_TICKET = """
INSERT INTO event.type_tickets (type_id, name, description, seats_max, limit_max_per_order,
    created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id
"""
_ADD_QUESTION = """
INSERT INTO event.type_questions (type_id, question_id, sequence) VALUES ($1, $2, $3)
RETURNING question_id
"""
_ADD_BOOTH = """
INSERT INTO event.type_booths (type_id, name, booth_category_id, created_at)
VALUES ($1, $2, $3, $4) RETURNING id
"""
_CATEGORY_EXISTS = "SELECT EXISTS (SELECT 1 FROM event.booth_categories WHERE id = $1)"
_DELETE_MAIL = "DELETE FROM event.type_mails WHERE id = $1 AND type_id = $2"
_DELETE_TICKET = "DELETE FROM event.type_tickets WHERE id = $1 AND type_id = $2"
_DELETE_QUESTION = "DELETE FROM event.type_questions WHERE question_id = $1 AND type_id = $2"
_DELETE_BOOTH = "DELETE FROM event.type_booths WHERE id = $1 AND type_id = $2"

LineKind = Literal["mails", "tickets", "questions", "booths"]


async def add_type_line(
    pool: Pool,
    actor: Actor,
    type_id: UUID,
    line: TypeMailLine | TypeTicketLine | TypeQuestionLine | TypeBoothLine,
    now: datetime,
    *,
    templates: TemplateRenderer,
) -> dict[str, Any]:
    """Add a template line to a type (type row locked); answers the whole type. A mail
    line must name a template the composed renderer knows, of the actor's company or a
    platform one (422 `template_not_in_company`)."""
    async with transaction(pool) as conn:
        if await conn.fetchrow(_LOCK_TYPE, type_id) is None:
            raise errors.NotFound("No such type.")
        if isinstance(line, TypeMailLine):
            kind = "mail"
            channel = await line_channel(
                conn,
                templates,
                line.template_ref,
                company_id=actor.company_id,  # types are shared: the writer's company
                channel=line.notification_channel,
                kind=line.template_kind,
            )
            line_id = await conn.fetchval(
                _ADD_MAIL,
                type_id,
                line.sequence,
                line.interval_nbr,
                line.interval_unit,
                line.interval_kind,
                line.template_ref,
                channel,
                channel,
                now,
            )
        elif isinstance(line, TypeTicketLine):
            kind = "ticket"
            check_per_order_cap(line.seats_max, line.limit_max_per_order)
            line_id = await conn.fetchval(
                _ADD_TICKET,
                type_id,
                line.name,
                line.description,
                line.seats_max,
                line.limit_max_per_order,
                now,
            )
        elif isinstance(line, TypeBoothLine):
            kind = "booth"
            if not await conn.fetchval(_CATEGORY_EXISTS, line.booth_category_id):
                raise errors.ReferenceNotFound("No such booth category.", field="booth_category_id")
            line_id = await conn.fetchval(
                _ADD_BOOTH, type_id, line.name, line.booth_category_id, now
            )
        else:
            kind = "question"
            line_id = await conn.fetchval(_ADD_QUESTION, type_id, line.question_id, line.sequence)
        await write_audit(
            conn, actor, f"type_{kind}_added", "type", type_id, summary={"line_id": str(line_id)}
        )
    return await catalog.get(pool, catalog.TYPES, type_id)


async def delete_type_line(
    pool: Pool, actor: Actor, type_id: UUID, kind: LineKind, line_id: UUID
) -> dict[str, Any]:
    """Remove a template line; events created earlier keep their copies."""
    sql = {
        "mails": _DELETE_MAIL,
        "tickets": _DELETE_TICKET,
        "questions": _DELETE_QUESTION,
        "booths": _DELETE_BOOTH,
    }[kind]
    async with transaction(pool) as conn:
        if await conn.fetchrow(_LOCK_TYPE, type_id) is None:
            raise errors.NotFound("No such type.")
        if await conn.execute(sql, line_id, type_id) == "DELETE 0":
            raise errors.NotFound("No such line on this type.")
        await write_audit(
            conn, actor, f"type_{kind}_removed", "type", type_id, summary={"line_id": str(line_id)}
        )
    return await catalog.get(pool, catalog.TYPES, type_id)
