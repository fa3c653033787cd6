"""Events: create (with the one-time template apply), read, list, patch, delete.
Publication lives in `publication`, the stage axis's terminal writes in `lifecycle`.

Lock order everywhere: the event row first (`FOR NO KEY UPDATE`), then what hangs
off it. `revision` is bumped by every write of the row and checked against
If-Match when the caller sends one; `ics_sequence` is bumped when something a
calendar shows changes. The publication pair is written only by publish and
unpublish. Every write leaves one audit row.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.models import EVENT_PUBLISH_FENCE, EVENT_READ_ONLY, EventCreate, EventPatch
from events_svc.verbs.audit import write_audit
from events_svc.verbs.catalog import set_event_tags
from events_svc.verbs.common import (
    check_if_match,
    check_timezone,
    clamp_limit,
    decode_cursor,
    merge_patch,
    page,
)
from events_svc.verbs.mail.schedules import reschedule_event
from events_svc.verbs.seats import ensure_cap_covers_taken, event_cap, get_seat_view
from events_svc.verbs.type_apply import apply_type

# The company fence: a company actor sees its own rows and shared (NULL) rows.
_GET = """
SELECT * FROM event.event_view e WHERE e.id = $1 AND event.visible_to(e.company_id, $2)
"""
_LOCK = """
SELECT id, company_id FROM event.events
WHERE id = $1 AND event.visible_to(company_id, $2)
FOR NO KEY UPDATE  -- serialises every writer of this event (lock order: event first)
"""
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
_PIPE_END = "SELECT pipe_end FROM event.stages WHERE id = $1"
# a company change: the event's registrations follow it (one company per event and rows)
_REGISTRATIONS_COMPANY = """
UPDATE event.registrations SET company_id = $2, updated_at = $3
WHERE event_id = $1 AND company_id IS DISTINCT FROM $2
"""
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
_UPDATE = """
UPDATE event.events SET
    name = $2, description = $3, date_begin = $4, date_end = $5, date_tz = $6,
    seats_limited = $7, seats_max = $8, is_multi_slots = $9, event_type_id = $10,
    stage_id = $11, kanban_state = $12::event.kanban_state, company_id = $13,
    organizer_id = $14, address_id = $15, location = $16, event_url = $17,
    badge_format = $18::event.badge_format, active = $19, ics_sequence = $20,
    revision = revision + 1, updated_at = $21
WHERE id = $1
"""
_SLOTS_OUTSIDE = """
SELECT count(*) FROM event.slots WHERE event_id = $1 AND (date_begin < $2 OR date_end > $3)
"""
_SLOTLESS_REGISTRATIONS = """
SELECT EXISTS (SELECT 1 FROM event.registrations WHERE event_id = $1 AND event_slot_id IS NULL)
"""
_HAS_REGISTRATIONS = "SELECT EXISTS (SELECT 1 FROM event.registrations WHERE event_id = $1)"
_DELETE = "DELETE FROM event.events WHERE id = $1"

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s]+")
_NOT_NULL = frozenset(
    {
        "name",
        "description",
        "date_begin",
        "date_end",
        "date_tz",
        "seats_limited",
        "seats_max",
        "is_multi_slots",
        "kanban_state",
        "location",
        "badge_format",
        "active",
    }
)
# fields a calendar shows: a change bumps ics_sequence (RFC 5545 SEQUENCE)
_CALENDAR_FIELDS = frozenset(
    {"name", "description", "date_begin", "date_end", "date_tz", "location", "event_url"}
)


def is_finished(event: dict[str, Any], now: datetime) -> bool:
    return bool(event["date_end"] <= now)


def is_ongoing(event: dict[str, Any], now: datetime) -> bool:
    return bool(event["date_begin"] <= now < event["date_end"])


async def event_view(conn: Connection, row: dict[str, Any], now: datetime) -> dict[str, Any]:
    view = dict(row)
    view["is_ongoing"] = is_ongoing(row, now)
    view["is_finished"] = is_finished(row, now)
    view["seats"] = await get_seat_view(conn, row)
    return view


async def get_event_row(conn: Connection, actor: Actor, event_id: UUID) -> dict[str, Any]:
    row = await conn.fetchrow(_GET, event_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such event.")
    return dict(row)


async def lock_event(conn: Connection, actor: Actor, event_id: UUID) -> dict[str, Any]:
    """Lock the event row (FOR NO KEY UPDATE) within the actor's company fence; 404 otherwise."""
    if await conn.fetchrow(_LOCK, event_id, actor.company_id) is None:
        raise errors.NotFound("No such event.")
    return await get_event_row(conn, actor, event_id)


async def _refuse_terminal_stage(conn: Connection, stage_id: UUID | None) -> None:
    """A pipe_end stage is reached only through mark-done (422 use_mark_done)."""
    if stage_id is not None and await conn.fetchval(_PIPE_END, stage_id):
        raise errors.UseMarkDone(field="stage_id")


def _check_company(actor: Actor, company_id: UUID | None) -> None:
    if actor.company_id is not None and company_id not in (None, actor.company_id):
        raise errors.CompanyNotAllowed(field="company_id")


def _check_url(url: str | None) -> None:
    if url is not None and not _URL.match(url):
        raise errors.EventUrlNotAbsolute(field="event_url")


async def create_event(pool: Pool, actor: Actor, cmd: EventCreate, now: datetime) -> dict[str, Any]:
    """Create an event and apply its type's template once (mails, tickets, questions,
    booths; see `type_apply`)."""
    company_id = cmd.company_id if "company_id" in cmd.model_fields_set else actor.company_id
    _check_company(actor, company_id)
    _check_url(cmd.event_url)
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
        await _refuse_terminal_stage(conn, cmd.stage_id)
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
    """Write the fields sent; a stage change resets kanban_state unless it is cancel."""
    _check_fences(cmd)
    changes = {k: v for k, v in cmd.given().items() if k not in (*EVENT_PUBLISH_FENCE, "tag_ids")}
    async with transaction(pool) as conn:
        current = await lock_event(conn, actor, event_id)
        check_if_match(current["revision"], if_match, name="revision")
        new = merge_patch(current, changes, _NOT_NULL)
        if "stage_id" in changes and new["stage_id"] != current["stage_id"]:
            await _refuse_terminal_stage(conn, new["stage_id"])
        if "company_id" in changes:
            _check_company(actor, new["company_id"])
        if "event_url" in changes:
            _check_url(new["event_url"])
        if "date_tz" in changes:
            check_timezone(new["date_tz"])
        if new["date_end"] < new["date_begin"]:
            raise errors.DateOrder(field="date_end")
        if "date_begin" in changes or "date_end" in changes:
            outside = await conn.fetchval(
                _SLOTS_OUTSIDE, event_id, new["date_begin"], new["date_end"]
            )
            if outside:
                raise errors.SlotsOutsideEventRange(slots=int(outside))
        if {"seats_max", "seats_limited", "is_multi_slots"}.intersection(changes):
            await ensure_cap_covers_taken(conn, new, None, event_cap(new))
        turning_multi = new["is_multi_slots"] and not current["is_multi_slots"]
        if turning_multi and await conn.fetchval(_SLOTLESS_REGISTRATIONS, event_id):
            raise errors.RegistrationsWithoutSlot()
        if new["stage_id"] != current["stage_id"] and "kanban_state" not in changes:
            new["kanban_state"] = reset_kanban(current["kanban_state"])
        changed = sorted(k for k in new if k != "tag_ids" and new[k] != current[k])
        tags_changed = cmd.tag_ids is not None and sorted(cmd.tag_ids) != current["tag_ids"]
        if not changed and not tags_changed:
            return await event_view(conn, current, now)
        ics_sequence = current["ics_sequence"]
        if _CALENDAR_FIELDS.intersection(changed) or (
            "kanban_state" in changed and "cancel" in (new["kanban_state"], current["kanban_state"])
        ):
            ics_sequence += 1
        await conn.execute(
            _UPDATE,
            event_id,
            new["name"],
            new["description"],
            new["date_begin"],
            new["date_end"],
            new["date_tz"],
            new["seats_limited"],
            new["seats_max"],
            new["is_multi_slots"],
            new["event_type_id"],
            new["stage_id"],
            new["kanban_state"],
            new["company_id"],
            new["organizer_id"],
            new["address_id"],
            new["location"],
            new["event_url"],
            new["badge_format"],
            new["active"],
            ics_sequence,
            now,
        )
        if "company_id" in changed:  # registrations before scheduler rows: the lock order
            await conn.execute(_REGISTRATIONS_COMPANY, event_id, new["company_id"], now)
        if {"date_begin", "date_end", "is_multi_slots"}.intersection(changed):
            await reschedule_event(conn, event_id, now)
        if tags_changed and cmd.tag_ids is not None:
            await set_event_tags(conn, event_id, cmd.tag_ids)
            changed.append("tag_ids")
        await write_audit(
            conn,
            actor,
            "event_updated",
            "event",
            event_id,
            event_id=event_id,
            summary={"fields": changed, "revision": current["revision"] + 1},
        )
        return await event_view(conn, await get_event_row(conn, actor, event_id), now)


def reset_kanban(kanban_state: str) -> str:
    """A stage change resets the kanban mark to normal; cancel is sticky."""
    return "cancel" if kanban_state == "cancel" else "normal"


async def delete_event(pool: Pool, actor: Actor, event_id: UUID) -> None:
    """Delete an event without registrations (with registrations: archive it instead)."""
    async with transaction(pool) as conn:
        await lock_event(conn, actor, event_id)
        if await conn.fetchval(_HAS_REGISTRATIONS, event_id):
            raise errors.EventHasRegistrations()
        await conn.execute(_DELETE, event_id)
        await write_audit(conn, actor, "event_deleted", "event", event_id, event_id=event_id)
