"""The check-in desk: one scan verb with the FROZEN branch order.

1. unknown or archived barcode -> `invalid_ticket`
2. `cancel` -> `canceled_registration`
3. `draft` -> `unconfirmed_registration`
4. the registration's OWN event is not ongoing (`kanban_state` `done` or `cancel`, or
   `date_end` passed) -> `not_ongoing_event` (a scan before the start is allowed)
5. the registration belongs to another event than the desk's -> `need_manual_confirmation`
6. `done` -> `already_registered`
7. `open` -> `confirmed_registration`, the only write: `done` through the one state
   transition (`states.write_state`), `date_closed` stamped.

The lookup is an exact match on the trimmed barcode. The branches are decided on the
locked row (event row, then registration row: the lock order), so two desks scanning
one open ticket at once give one `confirmed_registration` and one
`already_registered`. Every scan writes one `desk_scan` audit row, failures too, with
the barcode masked to its last 4 digits. Outcomes are results, not errors: 200.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc.actors import Actor
from events_svc.db import Connection, Pool, must, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.registrations import lock_for_change, write_state

_FIND = """
SELECT id FROM event.registrations r
WHERE r.barcode = $1 AND r.active AND event.visible_to(r.company_id, $2)
"""
_SEEN = """
SELECT r.id, r.event_id, r.name, r.state::text AS state,
    CASE WHEN t.id IS NOT NULL THEN jsonb_build_object('id', t.id, 'name', t.name) END
        AS ticket,
    CASE WHEN s.id IS NOT NULL THEN jsonb_build_object('id', s.id,
        'date_begin', s.date_begin, 'date_end', s.date_end) END AS slot
FROM event.registrations r
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE r.id = $1
"""


def mask_barcode(barcode: str) -> str:
    """Only the last 4 characters of a barcode are kept in an audit row (none of a
    barcode of 4 or fewer)."""
    kept = 4 if len(barcode) > 4 else 0
    return "*" * (len(barcode) - kept) + barcode[len(barcode) - kept :]


def _branch(event: dict[str, Any], reg: dict[str, Any], desk_event: UUID, now: datetime) -> str:
    """The frozen branch order on the locked rows (the barcode was found and active)."""
    if reg["state"] == "cancel":
        return "canceled_registration"
    if reg["state"] == "draft":
        return "unconfirmed_registration"
    if event["kanban_state"] in ("done", "cancel") or event["date_end"] <= now:
        return "not_ongoing_event"
    if event["id"] != desk_event:
        return "need_manual_confirmation"
    if reg["state"] == "done":
        return "already_registered"
    return "confirmed_registration"


async def _audit(
    conn: Connection,
    actor: Actor,
    outcome: str,
    registration_id: UUID | None,
    desk_event: UUID,
    barcode: str,
) -> None:
    await write_audit(
        conn,
        actor,
        "desk_scan",
        "registration",
        registration_id,
        event_id=desk_event,
        summary={"outcome": outcome, "barcode": mask_barcode(barcode)},
    )


async def scan(
    pool: Pool, actor: Actor, desk_event: UUID, barcode: str, now: datetime
) -> dict[str, Any]:
    """{outcome, registration} of one scan at the desk of `desk_event`."""
    code = barcode.strip()
    async with transaction(pool) as conn:
        found = await conn.fetchval(_FIND, code, actor.company_id)
        if found is None:
            await _audit(conn, actor, "invalid_ticket", None, desk_event, code)
            return {"outcome": "invalid_ticket", "registration": None}
        event, _, reg = await lock_for_change(conn, actor, found, seats=False)
        if not reg["active"]:  # archived while we waited for the lock
            await _audit(conn, actor, "invalid_ticket", None, desk_event, code)
            return {"outcome": "invalid_ticket", "registration": None}
        outcome = _branch(event, reg, desk_event, now)
        if outcome == "confirmed_registration":
            await write_state(
                conn,
                actor,
                event,
                None,
                reg,
                "done",
                now,
                origin="officer",
                sale_status=reg["sale_status"],
                note={"source": "desk"},
            )
        await _audit(conn, actor, outcome, reg["id"], desk_event, code)
        seen = must(await conn.fetchrow(_SEEN, reg["id"]))
    return {"outcome": outcome, "registration": seen}
