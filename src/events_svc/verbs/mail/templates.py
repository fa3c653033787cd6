"""The standalone template store (event.message_templates).

Templates are checked when written (`templating.check_template`: they compile and
name only the documented context). Editing one clears the back-off of the lines
that use it and wakes the scheduler; deleting one deletes those lines (one audited
verb). Locks: the template row, then the scheduler rows naming it, by id.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, connection, must, transaction
from events_svc.models import TemplateCreate
from events_svc.templating import check_template
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, merge_patch, page
from events_svc.verbs.mail.arming import wake_schedulers
from events_svc.verbs.mail.cascade import cascade_in

_T_GET = "SELECT * FROM event.template_view WHERE id = $1"
_T_LOCK = """
SELECT id, kind::text AS kind, name, subject, body FROM event.message_templates
WHERE id = $1 FOR UPDATE
"""
_T_LIST = """
SELECT * FROM event.template_view
WHERE ($1::text IS NULL OR (name, id) > ($1, $2::uuid)) ORDER BY name, id LIMIT $3
"""
_T_INSERT = """
INSERT INTO event.message_templates (kind, name, subject, body, created_at, updated_at)
VALUES ($1::event.template_kind, $2, $3, $4, $5, $5) RETURNING id
"""
_T_UPDATE = """
UPDATE event.message_templates SET name = $2, subject = $3, body = $4, updated_at = $5
WHERE id = $1
"""
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
        template_id = await conn.fetchval(_T_INSERT, cmd.kind, cmd.name, cmd.subject, cmd.body, now)
        await write_audit(conn, actor, "template_created", "template", template_id)
        return _template_view(must(await conn.fetchrow(_T_GET, template_id)), links_unavailable)


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
        rows = [
            _template_view(r, links_unavailable)
            for r in await conn.fetch(_T_LIST, key, after, size + 1)
        ]
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
        await conn.execute(_T_UPDATE, template_id, new["name"], new["subject"], new["body"], now)
        lines = [r["id"] for r in await conn.fetch(_T_LOCK_LINES, template_id)]
        for event_id in {r["event_id"] for r in await conn.fetch(_T_CLEAR_BACKOFF, lines)}:
            await wake_schedulers(conn, event_id)
        await write_audit(
            conn,
            actor,
            "template_updated",
            "template",
            template_id,
            summary={"fields": sorted(changes)},
        )
        return _template_view(must(await conn.fetchrow(_T_GET, template_id)), links_unavailable)


async def delete_template(pool: Pool, actor: Actor, template_id: UUID) -> dict[str, Any]:
    """Delete a template and the scheduler lines that use it; answers what went (locks:
    the template row, then those scheduler rows by id)."""
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_T_LOCK, template_id)
        if row is None:
            raise errors.NotFound("No such template.")
        summary = await cascade_in(conn, actor, row["kind"], template_id)
        await conn.execute(_T_DELETE, template_id)
        await write_audit(conn, actor, "template_deleted", "template", template_id, summary=summary)
    return summary
