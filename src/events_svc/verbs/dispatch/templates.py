"""The dispatcher's templates: which mail template each trigger purpose renders.

Setting one asks the composed renderer that the template exists (422
`template_not_found`) and is a mail template (422 `channel_kind_mismatch`), like a
scheduler line's write; locks the purpose's row (then its parked receipts); writes the
mapping and an audit row; and releases the purpose's parked receipts at once (their
back-off cleared, the dispatcher woken), as editing a line's template does. The
mapping is shared by every company, so only a platform operator (an actor without a
company) sets it, and only to a platform template (422 `template_not_in_company` for a
company's template, when the renderer fences templates by company): a company's text
would otherwise reach every other company's attendees. Reading lists every purpose,
mapped or not, with its open receipts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, affected, connection, must, transaction
from events_svc.errors.dispatch import TRIGGER_PURPOSES
from events_svc.ports import TemplateRenderer
from events_svc.verbs.audit import write_audit
from events_svc.verbs.dispatch.feed import WAKE_CHANNEL
from events_svc.verbs.mail import check_template_company

_LIST = """
SELECT p.purpose::text AS purpose, tt.template_id, tt.updated_at, tt.updated_by,
    coalesce(c.pending, 0) AS pending, coalesce(c.parked, 0) AS parked,
    coalesce(c.kinds, '{}') AS parked_kinds
FROM unnest(enum_range(NULL::event.trigger_purpose)) AS p(purpose)
LEFT JOIN event.trigger_templates tt ON tt.purpose = p.purpose
LEFT JOIN (
    SELECT purpose, count(*) FILTER (WHERE state = 'pending') AS pending,
        count(*) FILTER (WHERE state = 'parked') AS parked,
        array_agg(DISTINCT error_kind ORDER BY error_kind)
            FILTER (WHERE state = 'parked') AS kinds
    FROM event.trigger_dispatch_receipts
    WHERE state IN ('pending', 'parked')  -- the open receipts (trigger_dispatch_receipts_due_idx)
    GROUP BY purpose
) c ON c.purpose = p.purpose
WHERE $1::text IS NULL OR p.purpose = $1::event.trigger_purpose
ORDER BY p.purpose
"""
_LOCK = """
SELECT template_id FROM event.trigger_templates WHERE purpose = $1::event.trigger_purpose
FOR UPDATE  -- one write of a purpose at a time
"""
_UPSERT = """
INSERT INTO event.trigger_templates (purpose, template_id, updated_at, updated_by)
VALUES ($1::event.trigger_purpose, $2, $3, $4)
ON CONFLICT ON CONSTRAINT trigger_templates_pkey DO UPDATE
SET template_id = EXCLUDED.template_id, updated_at = EXCLUDED.updated_at,
    updated_by = EXCLUDED.updated_by
"""
# the purpose's parked receipts start afresh and are due now
_RELEASE = """
UPDATE event.trigger_dispatch_receipts
SET next_attempt_at = $2, attempts = 0, updated_at = $2
WHERE purpose = $1::event.trigger_purpose AND state = 'parked' AND next_attempt_at > $2
  AND lease_token IS NULL  -- a receipt a dispatcher holds is settled by it
"""
_NOTIFY = "SELECT pg_notify($1, $2)"


def _purpose(purpose: str) -> str:
    if purpose not in TRIGGER_PURPOSES:
        raise errors.TriggerPurposeUnknown()
    return purpose


def _platform_only(actor: Actor) -> None:
    """The mapping (and its receipt counts) spans every company: platform operators only."""
    if actor.company_id is not None:
        raise errors.MissingScope(
            "The trigger templates are shared by every company: platform operators set them.",
            scope="template:write",
        )


async def list_trigger_templates(
    pool: Pool, actor: Actor, purpose: str | None = None
) -> list[dict[str, Any]]:
    """Every purpose (or the one named): its template or null, and its open receipts."""
    _platform_only(actor)
    async with connection(pool) as conn:
        return [dict(r) for r in await conn.fetch(_LIST, purpose)]


async def set_trigger_template(
    pool: Pool,
    actor: Actor,
    purpose: str,
    template_id: UUID,
    now: datetime,
    *,
    templates: TemplateRenderer,
) -> dict[str, Any]:
    """Map a purpose to a mail template (its row locked, then its parked receipts, which
    are released); audited."""
    _purpose(purpose)
    _platform_only(actor)
    async with transaction(pool) as conn:
        kind = await templates.template_kind(conn, template_id)
        if kind is None:
            raise errors.TemplateNotFound(field="template_id", template_ref=str(template_id))
        # the mapping serves the triggers of every company's events: a platform template
        await check_template_company(
            templates,
            conn,
            template_id,
            None,
            field="template_id",
            detail="The trigger templates serve every company: map a platform template.",
        )
        if kind != "mail":
            raise errors.ChannelKindMismatch(
                "The dispatcher sends mail: the template must be a mail template.",
                field="template_id",
                given="mail",
                template_kind=kind,
            )
        previous = await conn.fetchval(_LOCK, purpose)
        await conn.execute(_UPSERT, purpose, template_id, now, actor.id)
        released = affected(await conn.execute(_RELEASE, purpose, now))
        if released:
            await conn.execute(_NOTIFY, WAKE_CHANNEL, "trigger_templates")
        summary = {
            "purpose": purpose,
            "template_id": str(template_id),
            "previous": str(previous) if previous else None,
            "released": released,
        }
        await write_audit(
            conn, actor, "trigger_template_set", "trigger_template", template_id, summary=summary
        )
        return must(await conn.fetchrow(_LIST, purpose))
