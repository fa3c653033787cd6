"""The standalone template store (event.message_templates), fenced by company.

A template belongs to the company of the actor who created it (`company_id`), or to
none: a platform template, created by an actor without a company. A company actor
lists, reads, edits and deletes its company's templates and reads the platform ones;
another company's template answers 404 like a missing one; editing or deleting a
platform template is for platform operators (403 `missing_scope`). An actor without a
company sees and writes every template. The rule is `event.visible_to`, the company
fence of every row.

Templates are checked when written (`templating.check_texts`: their tree is bounded,
they compile, they name only the documented context), in a template worker thread and
before any row is locked: a large template never holds the event loop, nor a lock.
Editing one bumps its `revision` (the renderer's compiled templates are keyed by it),
clears the back-off of the lines that use it and wakes the scheduler; deleting one
deletes those lines (one audited verb, `cascade`). Locks: the template row, then the
scheduler rows naming it, by id.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.models import TemplateCreate
from events_svc.templating import check_texts
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, merge_patch, page
from events_svc.verbs.mail.arming import wake_schedulers
from events_svc.verbs.mail.cascade import cascade_in

_T_GET = """
SELECT * FROM event.template_view WHERE id = $1 AND event.visible_to(company_id, $2)
"""
_T_FIND = """
SELECT id, company_id FROM event.message_templates
WHERE id = $1 AND event.visible_to(company_id, $2)
"""
_T_LOCK = """
SELECT id, kind::text AS kind, name, subject, body, attach_tickets, company_id
FROM event.message_templates
WHERE id = $1 AND event.visible_to(company_id, $2)
FOR UPDATE  -- one writer of a template at a time
"""
_T_LIST = """
SELECT * FROM event.template_view
WHERE event.visible_to(company_id, $3)
  AND ($1::text IS NULL OR (name, id) > ($1, $2::uuid))
ORDER BY name, id LIMIT $4
"""
_T_INSERT = """
INSERT INTO event.message_templates (kind, name, subject, body, company_id, created_at,
    updated_at, attach_tickets)
VALUES ($1::event.template_kind, $2, $3, $4, $5, $6, $6, $7) RETURNING id
"""
_T_UPDATE = """
UPDATE event.message_templates
SET name = $2, subject = $3, body = $4, updated_at = $5, attach_tickets = $6,
    revision = revision + 1
WHERE id = $1
"""
_T_DELETE = "DELETE FROM event.message_templates WHERE id = $1"
# the scheduler rows that use a template, on events the actor sees, locked by id (the
# lock order) before their back-off is cleared
_T_LOCK_LINES = """
SELECT m.id FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE m.template_ref = $1 AND event.visible_to(e.company_id, $2) ORDER BY m.id
FOR UPDATE OF m  -- their back-off is cleared next
"""
_T_CLEAR_BACKOFF = """
UPDATE event.mails SET attempts = 0, next_attempt_at = NULL
WHERE id = ANY($1::uuid[]) AND (attempts > 0 OR next_attempt_at IS NOT NULL)
RETURNING event_id
"""
_TEXTS = ("subject", "body")
_NOT_NULL = frozenset({"name", "subject", "body", "attach_tickets"})


# a stored template one of the event's lines names that the company may not use (another
# company's; with `company` NULL, any company's: a shared event uses platform templates)
_OUTSIDE_COMPANY = """
SELECT t.id FROM event.mails m JOIN event.message_templates t ON t.id = m.template_ref
WHERE m.event_id = $1 AND NOT event.template_serves(t.company_id, $2)
ORDER BY t.id LIMIT 1
"""


async def check_lines_fit_company(
    conn: Connection, event_id: UUID, company_id: UUID | None
) -> None:
    """An event about to belong to `company_id` (None: shared) keeps only lines whose stored
    template that company may use; else 422 `template_not_in_company` on `company_id`
    (moving the event would hand the lines to another company's attendees). Templates of
    a host's renderer are the host's to fence."""
    found = await conn.fetchval(_OUTSIDE_COMPANY, event_id, company_id)
    if found is not None:
        raise errors.TemplateNotInCompany(
            "A mail line of this event uses a template of another company: change the line first.",
            field="company_id",
            template_ref=str(found),
        )


def _template_view(row: Any, links_unavailable: list[str]) -> dict[str, Any]:
    """A template row plus the context links that render as empty text here."""
    return {**dict(row), "links_unavailable": list(links_unavailable)}


def _check_attach(kind: str, attach_tickets: bool) -> None:
    """Tickets go with mail only: an sms template cannot attach them."""
    if attach_tickets and kind != "mail":
        raise errors.FieldNotWritable(
            "attach_tickets is for mail templates: a text message carries no file.",
            field="attach_tickets",
        )


def _writable(actor: Actor, row: Any) -> None:
    """A template the actor sees is writable unless it is a platform template and the
    actor has a company: those are written by platform operators only."""
    if row is None:
        raise errors.NotFound("No such template.")
    if actor.company_id is not None and row["company_id"] is None:
        raise errors.MissingScope(
            "Platform templates are shared by every company: platform operators write them.",
            scope="template:write",
        )


async def create_template(
    pool: Pool, actor: Actor, cmd: TemplateCreate, now: datetime, *, links_unavailable: list[str]
) -> dict[str, Any]:
    """Store a template of the actor's company (a platform template for an actor without
    one) once both texts are checked, off the event loop."""
    _check_attach(cmd.kind, cmd.attach_tickets)
    await check_texts([("subject", cmd.subject), ("body", cmd.body)])
    async with transaction(pool) as conn:
        template_id = await conn.fetchval(
            _T_INSERT,
            cmd.kind,
            cmd.name,
            cmd.subject,
            cmd.body,
            actor.company_id,
            now,
            cmd.attach_tickets,
        )
        await write_audit(conn, actor, "template_created", "template", template_id)
        row = must(await conn.fetchrow(_T_GET, template_id, actor.company_id))
        return _template_view(row, links_unavailable)


async def get_template(
    pool: Pool, actor: Actor, template_id: UUID, *, links_unavailable: list[str]
) -> dict[str, Any]:
    """A template the actor sees (its company's or a platform one); 404 otherwise."""
    async with connection(pool) as conn:
        row = await conn.fetchrow(_T_GET, template_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such template.")
    return _template_view(row, links_unavailable)


async def list_templates(
    pool: Pool,
    actor: Actor,
    *,
    links_unavailable: list[str],
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """The templates the actor sees (its company's and the platform's; every one for an
    actor without a company), by name."""
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, str)
    async with connection(pool) as conn:
        found = await conn.fetch(_T_LIST, key, after, actor.company_id, size + 1)
    return page([_template_view(r, links_unavailable) for r in found], size, "name")


async def patch_template(
    pool: Pool,
    actor: Actor,
    template_id: UUID,
    changes: dict[str, Any],
    now: datetime,
    *,
    links_unavailable: list[str],
) -> dict[str, Any]:
    """Edit a template (its new texts checked like a new one's, off the loop and before
    any lock); the lines using it lose their back-off and are tried at once (locks: the
    template row, then its scheduler rows by id)."""
    async with connection(pool) as conn:
        _writable(actor, await conn.fetchrow(_T_FIND, template_id, actor.company_id))
    await check_texts([(name, changes[name]) for name in _TEXTS if changes.get(name) is not None])
    async with transaction(pool) as conn:
        current = await conn.fetchrow(_T_LOCK, template_id, actor.company_id)
        _writable(actor, current)  # re-checked under the lock: it may have gone meanwhile
        new = merge_patch(dict(must(current)), changes, _NOT_NULL)
        _check_attach(new["kind"], new["attach_tickets"])
        await conn.execute(
            _T_UPDATE,
            template_id,
            new["name"],
            new["subject"],
            new["body"],
            now,
            new["attach_tickets"],
        )
        await _clear_backoff(conn, actor, template_id)
        await write_audit(
            conn,
            actor,
            "template_updated",
            "template",
            template_id,
            summary={"fields": sorted(changes)},
        )
        row = must(await conn.fetchrow(_T_GET, template_id, actor.company_id))
        return _template_view(row, links_unavailable)


async def _clear_backoff(conn: Connection, actor: Actor, template_id: UUID) -> None:
    lines = [r["id"] for r in await conn.fetch(_T_LOCK_LINES, template_id, actor.company_id)]
    for event_id in {r["event_id"] for r in await conn.fetch(_T_CLEAR_BACKOFF, lines)}:
        await wake_schedulers(conn, event_id)


async def delete_template(pool: Pool, actor: Actor, template_id: UUID) -> dict[str, Any]:
    """Delete a template and the lines that use it where the actor sees them; answers
    what went (locks: the template row, then those scheduler rows by id)."""
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_T_LOCK, template_id, actor.company_id)
        _writable(actor, row)
        summary = await cascade_in(conn, actor, must(row)["kind"], template_id)
        await conn.execute(_T_DELETE, template_id)
        await write_audit(conn, actor, "template_deleted", "template", template_id, summary=summary)
    return summary
