"""A change of an event row, checked then written: the one path of a PATCH and of an
event operation (reschedule, cancellation).

`plan_change` checks a change against the locked row (every refusal of a patch) and
answers what would differ; `write_change` writes it: `revision` + 1, `ics_sequence` + 1
when something a calendar shows changed, the former start when a published event's start
moves (`previous_date_begin`: the public page's "rescheduled"), the registrations'
company, the scheduler lines' times (`mail.schedules.reschedule_event`), the tags, one
audit row, and the webhook facts: `event.updated` naming the changed fields, and
`event.cancelled` when the event's kanban state becomes `cancel` (an operation's change
names the operation).
Callers hold the event row lock (`verbs.fence.lock_event`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import check_timezone, merge_patch
from events_svc.verbs.events.catalog import set_event_tags
from events_svc.verbs.facts import record_event_fact
from events_svc.verbs.mail import check_lines_fit_company, reschedule_event
from events_svc.verbs.registrations import ensure_cap_covers_taken, event_cap

_PIPE_END = "SELECT pipe_end FROM event.stages WHERE id = $1"
# a company change: the event's registrations follow it (one company per event and rows)
_REGISTRATIONS_COMPANY = """
UPDATE event.registrations SET company_id = $2, updated_at = $3
WHERE id IN (SELECT id FROM event.registrations
             WHERE event_id = $1 AND company_id IS DISTINCT FROM $2
             ORDER BY id
             FOR NO KEY UPDATE)  -- in id order, as every batch locks them: no deadlock
"""
_UPDATE = """
UPDATE event.events SET
    name = $2, description = $3, date_begin = $4, date_end = $5, date_tz = $6,
    seats_limited = $7, seats_max = $8, is_multi_slots = $9, event_type_id = $10,
    stage_id = $11, kanban_state = $12::event.kanban_state, company_id = $13,
    organizer_id = $14, address_id = $15, location = $16, event_url = $17,
    badge_format = $18::event.badge_format, active = $19, ics_sequence = $20,
    revision = revision + 1, updated_at = $21,
    -- a start the public saw (published, its publication date passed), moved: the
    -- public page calls the event rescheduled
    previous_date_begin = CASE
        WHEN is_published AND (date_publish IS NULL OR date_publish <= $21)
             AND date_begin <> $4 THEN date_begin
        ELSE previous_date_begin END
WHERE id = $1
"""
_SLOTS_OUTSIDE = """
SELECT count(*) FROM event.slots WHERE event_id = $1 AND (date_begin < $2 OR date_end > $3)
"""
_SLOTLESS_REGISTRATIONS = """
SELECT EXISTS (SELECT 1 FROM event.registrations WHERE event_id = $1 AND event_slot_id IS NULL)
"""
_HAS_ATTENDEES = """
SELECT EXISTS (SELECT 1 FROM event.registrations
               WHERE event_id = $1
                 AND event.holds_seat_for_good(state, active, sale_status, hold_expires_at))
    OR EXISTS (SELECT 1 FROM event.registrations
               WHERE event_id = $1
                 AND event.holds_seat_held(state, active, sale_status, hold_expires_at)
                 AND hold_expires_at > now())
"""
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
# once the event has attendees, these (and a cancellation) change only through an operation
OPERATION_FIELDS = frozenset({"date_begin", "date_end", "date_tz", "location"})


async def refuse_terminal_stage(conn: Connection, stage_id: UUID | None) -> None:
    """A pipe_end stage is reached only through mark-done (422 use_mark_done)."""
    if stage_id is not None and await conn.fetchval(_PIPE_END, stage_id):
        raise errors.UseMarkDone(field="stage_id")


def check_company(actor: Actor, company_id: UUID | None) -> None:
    if actor.company_id is not None and company_id not in (None, actor.company_id):
        raise errors.CompanyNotAllowed(field="company_id")


def check_url(url: str | None) -> None:
    if url is not None and not _URL.match(url):
        raise errors.EventUrlNotAbsolute(field="event_url")


@dataclass(frozen=True)
class EventChange:
    """A checked change of an event row: the row after it, the fields that differ, and
    whether a calendar shows the difference (ics_sequence then moves by one)."""

    new: dict[str, Any]
    changed: list[str]
    bumps_sequence: bool

    def is_calendar_change(self) -> bool:
        """The fields an event with attendees changes only through an event operation."""
        return bool(OPERATION_FIELDS.intersection(self.changed)) or (
            "kanban_state" in self.changed and self.new["kanban_state"] == "cancel"
        )


async def plan_change(
    conn: Connection, actor: Actor, current: dict[str, Any], changes: dict[str, Any]
) -> EventChange:
    """Check `changes` against the locked row `current` (every refusal of a patch) and
    answer what writing them would change; writes nothing."""
    new = merge_patch(current, changes, _NOT_NULL)
    if "stage_id" in changes and new["stage_id"] != current["stage_id"]:
        await refuse_terminal_stage(conn, new["stage_id"])
    if "company_id" in changes:
        check_company(actor, new["company_id"])
        if new["company_id"] != current["company_id"]:
            await check_lines_fit_company(conn, current["id"], new["company_id"])
    if "event_url" in changes:
        check_url(new["event_url"])
    if "date_tz" in changes:
        check_timezone(new["date_tz"])
    if new["date_end"] < new["date_begin"]:
        raise errors.DateOrder(field="date_end")
    if "date_begin" in changes or "date_end" in changes:
        outside = await conn.fetchval(
            _SLOTS_OUTSIDE, current["id"], new["date_begin"], new["date_end"]
        )
        if outside:
            raise errors.SlotsOutsideEventRange(slots=int(outside))
    if {"seats_max", "seats_limited", "is_multi_slots"}.intersection(changes):
        await ensure_cap_covers_taken(conn, new, None, event_cap(new))
    turning_multi = new["is_multi_slots"] and not current["is_multi_slots"]
    if turning_multi and await conn.fetchval(_SLOTLESS_REGISTRATIONS, current["id"]):
        raise errors.RegistrationsWithoutSlot()
    if new["stage_id"] != current["stage_id"] and "kanban_state" not in changes:
        new["kanban_state"] = reset_kanban(current["kanban_state"])
    changed = sorted(k for k in new if k != "tag_ids" and new[k] != current[k])
    bumps = bool(_CALENDAR_FIELDS.intersection(changed)) or (
        "kanban_state" in changed and "cancel" in (new["kanban_state"], current["kanban_state"])
    )
    return EventChange(new, changed, bumps)


async def write_change(
    conn: Connection,
    actor: Actor,
    current: dict[str, Any],
    change: EventChange,
    now: datetime,
    *,
    tag_ids: list[UUID] | None = None,
    audit: dict[str, Any] | None = None,
) -> None:
    """Write a planned change of the locked row: revision + 1, ics_sequence + 1 when a
    calendar shows it, the registrations' company, the scheduler lines' times, the tags;
    one audit row (field names, the revision after, and `audit`)."""
    new, event_id = change.new, current["id"]
    ics_sequence = current["ics_sequence"] + (1 if change.bumps_sequence else 0)
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
    changed = list(change.changed)
    if "company_id" in changed:  # registrations before scheduler rows: the lock order
        await conn.execute(_REGISTRATIONS_COMPANY, event_id, new["company_id"], now)
    if {"date_begin", "date_end", "is_multi_slots"}.intersection(changed):
        await reschedule_event(conn, event_id, now)
    if tag_ids is not None:
        await set_event_tags(conn, event_id, tag_ids)
        changed.append("tag_ids")
    summary = {"fields": changed, "revision": current["revision"] + 1, **(audit or {})}
    await write_audit(
        conn, actor, "event_updated", "event", event_id, event_id=event_id, summary=summary
    )
    await _record_change(conn, event_id, change, changed, now, (audit or {}).get("operation_id"))


async def _record_change(
    conn: Connection,
    event_id: UUID,
    change: EventChange,
    changed: list[str],
    now: datetime,
    operation_id: str | None,
) -> None:
    """The webhook facts of a written change: `event.updated` (the fields' names), and
    `event.cancelled` when the kanban state became `cancel`."""
    by = {"operation_id": operation_id} if operation_id else {}
    await record_event_fact(conn, "event.updated", event_id, now, {"changed": changed, **by})
    if "kanban_state" in change.changed and change.new["kanban_state"] == "cancel":
        await record_event_fact(conn, "event.cancelled", event_id, now, by)


async def has_attendees(conn: Connection, event_id: UUID) -> bool:
    """Does an active registration hold a seat of the event (open, done, a held draft)?"""
    return bool(await conn.fetchval(_HAS_ATTENDEES, event_id))


def reset_kanban(kanban_state: str) -> str:
    """A stage change resets the kanban mark to normal; cancel is sticky."""
    return "cancel" if kanban_state == "cancel" else "normal"
