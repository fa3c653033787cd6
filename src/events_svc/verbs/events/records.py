"""Events: create (with the one-time template apply), read, list, patch, delete.
Publication lives in `publication`, the stage axis's terminal writes in `lifecycle`, the
checked write of a change in `change` (a patch and an event operation share it); the
fenced row reads every noun starts from in `verbs.fence`.

Lock order everywhere: the event row first (`FOR NO KEY UPDATE`), then what hangs
off it. `revision` is bumped by every write of the row and checked against
If-Match when the caller sends one; `ics_sequence` is bumped when something a
calendar shows changes. The publication pair is written only by publish and
unpublish. Every write leaves one audit row. Once an active registration holds a seat,
the calendar fields (dates, zone, location) and a cancellation move only through an
event operation (`operations`): a patch of them is 409 `use_event_operation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.models import EVENT_PUBLISH_FENCE, EVENT_READ_ONLY, EventCreate, EventPatch
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import check_if_match, check_timezone, clamp_limit, decode_cursor, page
from events_svc.verbs.events.catalog import set_event_tags
from events_svc.verbs.events.change import (
    OPERATION_FIELDS,
    check_company,
    check_url,
    has_attendees,
    plan_change,
    refuse_terminal_stage,
    write_change,
)
from events_svc.verbs.events.type_apply import apply_type
from events_svc.verbs.fence import get_event_row, lock_event
from events_svc.verbs.registrations import get_seat_view

_LIST = """
SELECT * FROM event.event_view e
WHERE event.visible_to(e.company_id, $1)
  AND ($2::text IS NULL OR e.name ILIKE '%' || $2 || '%')
  AND ($3::boolean IS NULL OR e.is_published = $3)
  AND ($4::uuid IS NULL OR e.stage_id = $4)
  AND ($5::timestamptz IS NULL OR e.date_end >= $5)
  AND ($6::timestamptz IS NULL OR e.date_begin <= $6)
  AND ($7::timestamptz IS NULL OR (e.date_begin, e.id) > ($7, $8::uuid))
ORDER BY e.date_begin, e.id
LIMIT $9
"""
_TYPE = "SELECT id, date_tz, seats_limited, seats_max FROM event.types WHERE id = $1"
_FIRST_STAGE = """
SELECT id FROM event.stages WHERE NOT pipe_end ORDER BY sequence, id LIMIT 1
"""
_INSERT = """
INSERT INTO event.events (
    name, description, date_begin, date_end, date_tz, seats_limited, seats_max,
    is_multi_slots, event_type_id, stage_id, kanban_state, company_id, organizer_id,
    address_id, location, event_url, badge_format, active, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::event.kanban_state, $12, $13, $14,
    $15, $16, $17::event.badge_format, $18, $19, $19)
RETURNING id
"""
_HAS_REGISTRATIONS = "SELECT EXISTS (SELECT 1 FROM event.registrations WHERE event_id = $1)"
_DELETE = "DELETE FROM event.events WHERE id = $1"


def is_finished(event: dict[str, Any], now: datetime) -> bool:
    return bool(event["date_end"] <= now)


def closed_to_registrations(event: Mapping[str, Any], at: datetime) -> str | None:
    """The one rule of an event that takes no one now: why (`cancelled`, `finished` by
    `at`), or None while it takes registrations. The intake, the event page and the
    waiting list's offers all ask it. `event` needs `kanban_state` and `date_end`."""
    if event["kanban_state"] == "cancel":
        return "cancelled"
    if event["date_end"] <= at:
        return "finished"
    return None


def is_ongoing(event: dict[str, Any], now: datetime) -> bool:
    return bool(event["date_begin"] <= now < event["date_end"])


async def event_view(conn: Connection, row: dict[str, Any], now: datetime) -> dict[str, Any]:
    view = dict(row)
    view["is_ongoing"] = is_ongoing(row, now)
    view["is_finished"] = is_finished(row, now)
    view["seats"] = await get_seat_view(conn, row)
    return view


async def create_event(pool: Pool, actor: Actor, cmd: EventCreate, now: datetime) -> dict[str, Any]:
    """Create an event and apply its type's template once (mails, tickets, questions,
    booths; see `type_apply`)."""
    company_id = cmd.company_id if "company_id" in cmd.model_fields_set else actor.company_id
    check_company(actor, company_id)
    check_url(cmd.event_url)
    async with transaction(pool) as conn:
        type_row = None
        if cmd.event_type_id is not None:
            type_row = await conn.fetchrow(_TYPE, cmd.event_type_id)
            if type_row is None:
                raise errors.ReferenceNotFound("No such event type.", field="event_type_id")
        date_tz = check_timezone(cmd.date_tz or (type_row["date_tz"] if type_row else "UTC"))
        seats_limited = cmd.seats_limited
        seats_max = cmd.seats_max
        if seats_limited is None:
            seats_limited = bool(type_row["seats_limited"]) if type_row else False
        if seats_max is None:
            seats_max = int(type_row["seats_max"]) if type_row else 0
        await refuse_terminal_stage(conn, cmd.stage_id)
        stage_id = cmd.stage_id or await conn.fetchval(_FIRST_STAGE)
        event_id = await conn.fetchval(
            _INSERT,
            cmd.name,
            cmd.description,
            cmd.date_begin,
            cmd.date_end,
            date_tz,
            seats_limited,
            seats_max,
            cmd.is_multi_slots,
            cmd.event_type_id,
            stage_id,
            cmd.kanban_state,
            company_id,
            cmd.organizer_id,
            cmd.address_id,
            cmd.location,
            cmd.event_url,
            cmd.badge_format,
            cmd.active,
            now,
        )
        if cmd.tag_ids:
            await set_event_tags(conn, event_id, cmd.tag_ids)
        applied: dict[str, Any] = {"template_applied": type_row is not None}
        if type_row is not None:  # ONCE, at create: copies, never links
            applied.update(await apply_type(conn, event_id, type_row["id"], now))
        await write_audit(
            conn, actor, "event_created", "event", event_id, event_id=event_id, summary=applied
        )
        return await event_view(conn, await get_event_row(conn, actor, event_id), now)


async def get_event(pool: Pool, actor: Actor, event_id: UUID, now: datetime) -> dict[str, Any]:
    async with transaction(pool) as conn:  # one snapshot for the row and its seats
        return await event_view(conn, await get_event_row(conn, actor, event_id), now)


async def list_events(
    pool: Pool,
    actor: Actor,
    now: datetime,
    *,
    q: str | None = None,
    published: bool | None = None,
    stage_id: UUID | None = None,
    date_from: datetime | None = None,
    date_to: datetime | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Events by date_begin, each with its seat read model; keyset pagination."""
    size = clamp_limit(limit)
    after_key, after_id = decode_cursor(cursor, datetime)
    q_like = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") if q else None
    async with transaction(pool) as conn:
        rows = await conn.fetch(
            _LIST,
            actor.company_id,
            q_like,
            published,
            stage_id,
            date_from,
            date_to,
            after_key,
            after_id,
            size + 1,
        )
        items = [await event_view(conn, dict(r), now) for r in rows]
    return page(items, size, "date_begin")


def _check_fences(cmd: EventPatch) -> None:
    sent = cmd.model_fields_set
    for name in EVENT_PUBLISH_FENCE:
        if name in sent:
            raise errors.PublishFenced(field=name)
    for name in EVENT_READ_ONLY:
        if name in sent:
            raise errors.FieldNotWritable(f"{name} is read-only.", field=name)


async def patch_event(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    cmd: EventPatch,
    now: datetime,
    *,
    if_match: int | None = None,
) -> dict[str, Any]:
    """Write the fields sent; a stage change resets kanban_state unless it is cancel. Once
    the event has attendees, its calendar fields move only through an operation."""
    _check_fences(cmd)
    changes = {k: v for k, v in cmd.given().items() if k not in (*EVENT_PUBLISH_FENCE, "tag_ids")}
    async with transaction(pool) as conn:
        current = await lock_event(conn, actor, event_id)
        check_if_match(current["revision"], if_match, name="revision")
        change = await plan_change(conn, actor, current, changes)
        if change.is_calendar_change() and await has_attendees(conn, event_id):
            fenced = [f for f in change.changed if f in OPERATION_FIELDS or f == "kanban_state"]
            raise errors.UseEventOperation(fields=fenced)
        tags_changed = cmd.tag_ids is not None and sorted(cmd.tag_ids) != current["tag_ids"]
        if not change.changed and not tags_changed:
            return await event_view(conn, current, now)
        tag_ids = cmd.tag_ids if tags_changed else None
        await write_change(conn, actor, current, change, now, tag_ids=tag_ids)
        return await event_view(conn, await get_event_row(conn, actor, event_id), now)


async def delete_event(pool: Pool, actor: Actor, event_id: UUID) -> None:
    """Delete an event without registrations (with registrations: archive it instead)."""
    async with transaction(pool) as conn:
        await lock_event(conn, actor, event_id)
        if await conn.fetchval(_HAS_REGISTRATIONS, event_id):
            raise errors.EventHasRegistrations()
        await conn.execute(_DELETE, event_id)
        await write_audit(conn, actor, "event_deleted", "event", event_id, event_id=event_id)
