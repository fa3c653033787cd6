"""Preview an operation: check it against the event as it is, estimate its audience, and
store it `previewed` on the event revision it saw. Nothing of the event changes.

The refusals are those the start would answer on the same revision: a reschedule is
checked by `verbs.events.change.plan_change` (date order, zone, slots outside the new range)
and must change something (422 `operation_changes_nothing`); a reminder's or follow-up's
cutoff may not be in the future (422 `audience_cutoff_in_future`); an archived (409
`event_archived`) or cancelled (409 `event_cancelled`) event takes no operation.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.models import CancellationParams, CutoffParams, OperationCreate, RescheduleParams
from events_svc.models.base import Command
from events_svc.models.operations import PARAMS_OF_KIND
from events_svc.verbs.audit import write_audit
from events_svc.verbs.events import EventChange, plan_change
from events_svc.verbs.fence import get_event_row
from events_svc.verbs.operations.view import operation_view

PURPOSE = {
    "reschedule": "event_rescheduled",
    "cancellation": "event_cancelled",
    "reminder": "event_reminder",
    "follow_up": "event_follow_up",
}
CALENDAR_KINDS = ("reschedule", "cancellation")

# the audience (the one rule `event.in_audience`): active open/done registrations; for a
# reminder or a follow-up, those created at or before the cutoff
_ESTIMATE = """
SELECT count(*) FROM event.registrations r
WHERE r.event_id = $1 AND event.in_audience(r.state, r.active, r.created_at, $2)
"""
_INSERT = """
INSERT INTO event.event_operations (event_id, kind, params, revision, audience_estimate,
    actor_id, actor_kind, actor_company_id, created_at, updated_at)
VALUES ($1, $2::event.operation_kind, $3::jsonb, $4, $5, $6, $7, $8, $9, $9)
RETURNING id
"""


def parse_params(kind: str, params: dict[str, Any]) -> Command:
    """The stored parameters of an operation, as its kind's model."""
    return PARAMS_OF_KIND[kind].model_validate(params)


def event_changes(params: Command) -> dict[str, Any]:
    """What the operation changes on the event row (nothing for a reminder or follow-up)."""
    if isinstance(params, RescheduleParams):
        return params.given()
    if isinstance(params, CancellationParams):
        return {"kanban_state": "cancel"}
    return {}


def cutoff(params: Command) -> datetime | None:
    return params.audience_cutoff if isinstance(params, CutoffParams) else None


async def check_operation(
    conn: Connection, actor: Actor, event: dict[str, Any], kind: str, params: Command, now: datetime
) -> EventChange | None:
    """Refuse what neither the preview nor the start may do on this event row; the change
    of the event row (a reschedule, a cancellation), checked."""
    if not event["active"]:
        raise errors.EventArchived()
    if event["kanban_state"] == "cancel":
        raise errors.EventCancelled()
    if isinstance(params, CancellationParams) and not params.reason.strip():
        raise errors.ValidationFailed("reason cannot be blank", field="params.reason")
    if isinstance(params, CutoffParams) and params.audience_cutoff > now:
        raise errors.AudienceCutoffInFuture(field="params.audience_cutoff")
    if kind in CALENDAR_KINDS:
        change = await plan_change(conn, actor, event, event_changes(params))
        if not change.changed:
            raise errors.OperationChangesNothing()
        return change
    return None


async def create_operation(
    pool: Pool, actor: Actor, event_id: UUID, cmd: OperationCreate, now: datetime
) -> dict[str, Any]:
    """Store a `previewed` operation with its audience estimate (nothing else changes)."""
    params = cmd.params  # the kind's model (`OperationCreate` reads it so)
    stored = params.model_dump(mode="json", exclude_unset=True)
    if isinstance(params, CancellationParams):
        stored["reason"] = params.reason.strip()
    async with transaction(pool) as conn:
        event = await get_event_row(conn, actor, event_id)
        await check_operation(conn, actor, event, cmd.kind, params, now)
        estimate = int(await conn.fetchval(_ESTIMATE, event_id, cutoff(params)))
        operation_id = await conn.fetchval(
            _INSERT,
            event_id,
            cmd.kind,
            stored,
            event["revision"],
            estimate,
            actor.id,
            actor.kind,
            actor.company_id,
            now,
        )
        await write_audit(
            conn,
            actor,
            "event_operation_previewed",
            "event_operation",
            operation_id,
            event_id=event_id,
            summary={"kind": cmd.kind, "revision": event["revision"], "estimate": estimate},
        )
        return await operation_view(conn, actor, operation_id)
