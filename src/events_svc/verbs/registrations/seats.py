"""Seat truth: the ONE seat counter of the service.

A seat is a registration for which `event.holds_seat_at(state, active, sale_status,
hold_expires_at, now())` holds (the one definition, in SQL: an active `open` or `done`
row, an active `draft` of an unpaid order, `sale_status = to_pay`, or an active `draft`
held for a waiting-list offer whose hold has not ended); nothing is stored. The counts
read it in its two halves, each over its own partial index with nothing tested per row
(`holds_seat_for_good`, and `holds_seat_held` with a hold not ended: migration 0039). The time is
the transaction's start: a writer that counts under the event lock never counts a hold
as ended later than one that locked after it. `reserved` counts open rows, `used` done
rows, `held` the drafts (unpaid or offered), `taken` all three, and `available = cap -
taken` only when the cap is above 0 (0 or less is unlimited, everywhere). On a
multi-slot event the event cap applies per slot, so the event-level cap is
`seats_max * slot count`. Every read of seats comes from `get_seat_view`; the register
verb counts with a `SeatLedger` (once per scope for a whole combined batch) and the
state machine with `ensure_seats`, under their locks; a lowered cap is checked by
`ensure_cap_covers_taken`. The waiting list is not a counter: its entries' seats are
only set aside from what the public intake may take (`SeatLedger.take(behind_queue=)`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.db import Connection

# The seat-holding rows are read in the two halves of `holds_seat_at` (migration 0039):
# the rows that hold their seat for good (`holds_seat_for_good`), over their partial
# indexes with nothing tested per row, and the held drafts whose hold has not ended
# (`holds_seat_held` and `hold_expires_at > now()`), a range of their own small index.
# One grouped read: registrations_seat_event_idx and registrations_seat_held_idx.
_TAKEN_BY_SCOPE = """
SELECT event_ticket_id, event_slot_id, state::text AS state, count(*) AS n
FROM (SELECT event_ticket_id, event_slot_id, state FROM event.registrations
      WHERE event_id = $1
        AND event.holds_seat_for_good(state, active, sale_status, hold_expires_at)
      UNION ALL
      SELECT event_ticket_id, event_slot_id, state FROM event.registrations
      WHERE event_id = $1
        AND event.holds_seat_held(state, active, sale_status, hold_expires_at)
        AND hold_expires_at > now()) AS seat
GROUP BY event_ticket_id, event_slot_id, state
"""
_TICKETS = "SELECT id, seats_max FROM event.tickets WHERE event_id = $1 ORDER BY created_at, id"
_SLOTS = "SELECT id FROM event.slots WHERE event_id = $1 ORDER BY date_begin, id"


def scope_view(cap: int, counts: Counter[str]) -> dict[str, Any]:
    """{limited, cap, reserved, used, held, taken, available} from the seat-holding rows
    counted by state; available is None when unlimited."""
    limited = cap > 0
    reserved, used, held = counts["open"], counts["done"], counts["draft"]
    taken = reserved + used + held
    return {
        "limited": limited,
        "cap": cap if limited else 0,
        "reserved": reserved,
        "used": used,
        "held": held,
        "taken": taken,
        "available": max(cap - taken, 0) if limited else None,
    }


def event_cap(event: dict[str, Any]) -> int:
    """The per-scope event cap: 0 (unlimited) unless seats are limited with a positive max."""
    return int(event["seats_max"]) if event["seats_limited"] and event["seats_max"] > 0 else 0


async def get_seat_view(
    conn: Connection, event: dict[str, Any], tickets: list[Any] | None = None
) -> dict[str, Any]:
    """The seat read model of one event: event, tickets, slots, available_min, is_sold_out.
    `tickets`: the event's every ticket (`id`, `seats_max`, in creation order) when the
    caller has just read them in its own statement."""
    event_id: UUID = event["id"]
    counts = await conn.fetch(_TAKEN_BY_SCOPE, event_id)
    if tickets is None:
        tickets = list(await conn.fetch(_TICKETS, event_id))
    multi = bool(event["is_multi_slots"])
    slots = await conn.fetch(_SLOTS, event_id) if multi else []
    by_event: Counter[str] = Counter()
    by_ticket: dict[UUID, Counter[str]] = {}
    by_slot: dict[UUID, Counter[str]] = {}
    for row in counts:
        n = int(row["n"])
        by_event[row["state"]] += n
        if row["event_ticket_id"] is not None:
            by_ticket.setdefault(row["event_ticket_id"], Counter())[row["state"]] += n
        if row["event_slot_id"] is not None:
            by_slot.setdefault(row["event_slot_id"], Counter())[row["state"]] += n
    per_slot_cap = event_cap(event)
    factor = max(len(slots), 1) if multi else 1
    event_view = scope_view(per_slot_cap * factor, by_event)
    event_full = event_view["limited"] and event_view["available"] == 0
    ticket_views = []
    for t in tickets:
        c = by_ticket.get(t["id"], Counter())
        view = scope_view(max(int(t["seats_max"]), 0) * factor, c)
        own_full = view["limited"] and view["available"] == 0
        ticket_views.append({"ticket_id": t["id"], **view, "is_sold_out": event_full or own_full})
    slot_views = []
    for s in slots:
        c = by_slot.get(s["id"], Counter())
        view = scope_view(per_slot_cap, c)
        own_full = view["limited"] and view["available"] == 0
        slot_views.append({"slot_id": s["id"], **view, "is_sold_out": own_full})
    limited_avail = [v["available"] for v in [event_view, *ticket_views] if v["limited"]]
    available_min = min(limited_avail) if limited_avail else None
    all_tickets_full = bool(ticket_views) and all(t["is_sold_out"] for t in ticket_views)
    all_slots_full = bool(slot_views) and all(s["is_sold_out"] for s in slot_views)
    return {
        "event": event_view,
        "tickets": ticket_views,
        "slots": slot_views,
        "available_min": available_min,
        "is_sold_out": bool(event_full or all_tickets_full or all_slots_full),
    }


# The locked counts of the register verb and the state machine: one statement per scope,
# each the two halves: an index-only count of the scope's partial index of the rows held
# for good (registrations_seat_event/ticket/slot_idx), nothing tested per row, plus the
# held drafts whose hold has not ended (registrations_seat_held_idx, a handful of rows).
_COUNT_EVENT = """
SELECT (SELECT count(*) FROM event.registrations
        WHERE event_id = $1
          AND event.holds_seat_for_good(state, active, sale_status, hold_expires_at))
     + (SELECT count(*) FROM event.registrations
        WHERE event_id = $1
          AND event.holds_seat_held(state, active, sale_status, hold_expires_at)
          AND hold_expires_at > now())
"""
_COUNT_TICKET = """
SELECT (SELECT count(*) FROM event.registrations
        WHERE event_ticket_id = $1
          AND event.holds_seat_for_good(state, active, sale_status, hold_expires_at))
     + (SELECT count(*) FROM event.registrations
        WHERE event_ticket_id = $1
          AND event.holds_seat_held(state, active, sale_status, hold_expires_at)
          AND hold_expires_at > now())
"""
_COUNT_SLOT = """
SELECT (SELECT count(*) FROM event.registrations
        WHERE event_slot_id = $1
          AND event.holds_seat_for_good(state, active, sale_status, hold_expires_at))
     + (SELECT count(*) FROM event.registrations
        WHERE event_slot_id = $1
          AND event.holds_seat_held(state, active, sale_status, hold_expires_at)
          AND hold_expires_at > now())
"""
_COUNT_SLOT_TICKET = """
SELECT (SELECT count(*) FROM event.registrations
        WHERE event_slot_id = $1 AND event_ticket_id = $2
          AND event.holds_seat_for_good(state, active, sale_status, hold_expires_at))
     + (SELECT count(*) FROM event.registrations
        WHERE event_slot_id = $1 AND event_ticket_id = $2
          AND event.holds_seat_held(state, active, sale_status, hold_expires_at)
          AND hold_expires_at > now())
"""


# The entries waiting in an event that could be served: their ticket still sells, and no
# more seats than its per-order cap (grouped by size: a handful of rows whatever the list)
_WAITING = """
SELECT w.event_ticket_id, w.event_slot_id, w.seats, count(*)::int AS n,
    t.seats_max AS ticket_cap
FROM event.waitlist_entry w LEFT JOIN event.tickets t ON t.id = w.event_ticket_id
WHERE w.event_id = $1 AND w.status = 'waiting'
  AND (t.id IS NULL OR ((t.end_sale_datetime IS NULL OR t.end_sale_datetime > now())
       AND (t.limit_max_per_order <= 0 OR w.seats <= t.limit_max_per_order)))
GROUP BY w.event_ticket_id, w.event_slot_id, w.seats, t.seats_max
"""
Key = tuple[str, UUID, UUID | None]  # (scope, scope id, slot of a slot-ticket scope)


class SeatLedger:
    """The seat counts of one locked event while a transaction decides registrations.

    Each limited scope is counted once, under the locks (an index-only scan of its partial
    index); every registration the transaction accepts then adds to the running count, so
    a combined batch decides each request in arrival order against what the ones before it
    took, exactly as if each had counted for itself. A request that lets the waiting list
    go first (the public intake) also needs room past the seats of every entry still
    waiting in the scope (read once, when such a request comes).
    """

    def __init__(self, conn: Connection, event: dict[str, Any]) -> None:
        self._conn = conn
        self._event = event
        self._taken: dict[Key, int] = {}
        self._queued: Counter[Key] | None = None

    def _scopes(
        self, slot_id: UUID | None, ticket: dict[str, Any] | None
    ) -> list[tuple[str, UUID, UUID | None, int, str]]:
        """(scope, scope id, slot of a slot-ticket scope, cap, count statement) of every
        limited scope a registration of this slot and ticket takes a seat in."""
        cap = event_cap(self._event)
        multi = bool(self._event["is_multi_slots"]) and slot_id is not None
        scopes: list[tuple[str, UUID, UUID | None, int, str]] = []
        if cap > 0:
            if multi:
                assert slot_id is not None
                scopes.append(("slot", slot_id, None, cap, _COUNT_SLOT))
            else:
                scopes.append(("event", self._event["id"], None, cap, _COUNT_EVENT))
        if ticket is not None and int(ticket["seats_max"]) > 0:
            t_cap = int(ticket["seats_max"])
            if multi:
                scopes.append(("slot_ticket", ticket["id"], slot_id, t_cap, _COUNT_SLOT_TICKET))
            else:
                scopes.append(("ticket", ticket["id"], None, t_cap, _COUNT_TICKET))
        return scopes

    def _keys(self, slot_id: UUID | None, ticket_id: UUID | None) -> list[Key]:
        """Every scope (limited or not) a seat of this slot and ticket is counted in."""
        multi = bool(self._event["is_multi_slots"]) and slot_id is not None
        if multi:
            assert slot_id is not None
            keys: list[Key] = [("slot", slot_id, None)]
        else:
            keys = [("event", self._event["id"], None)]
        if ticket_id is not None:
            key: Key = ("slot_ticket", ticket_id, slot_id) if multi else ("ticket", ticket_id, None)
            keys.append(key)
        return keys

    async def _count(self, key: Key, sql: str) -> int:
        """The seats taken in one scope: counted once under the locks, then kept running."""
        if key not in self._taken:
            scope_id, slot = key[1], key[2]
            args = (slot, scope_id) if slot is not None else (scope_id,)
            self._taken[key] = int(await self._conn.fetchval(sql, *args))
        return self._taken[key]

    async def queued(self) -> Counter[Key]:
        """The seats set aside for the waiting list in each scope (read once per
        transaction). An entry's seats are set aside in every scope it takes a seat in,
        while it could ever be served: in the event's slot mode (a slot on a multi-slot
        event, none on another), not above the event's cap or its ticket's, its ticket still
        selling; and no more seats in all than its ticket has room for now (the entries of
        a full ticket wait for that ticket, not for the seats of others)."""
        if self._queued is None:
            self._queued = Counter()
            cap = event_cap(self._event)
            multi = bool(self._event["is_multi_slots"])
            groups: dict[tuple[UUID | None, UUID | None], list[Any]] = {}
            for row in await self._conn.fetch(_WAITING, self._event["id"]):
                ticket_cap = int(row["ticket_cap"] or 0)
                if (
                    (row["event_slot_id"] is not None) == multi
                    and (cap <= 0 or row["seats"] <= cap)
                    and (ticket_cap <= 0 or row["seats"] <= ticket_cap)
                ):
                    scope_of = (row["event_ticket_id"], row["event_slot_id"])
                    groups.setdefault(scope_of, []).append(row)
            for (ticket_id, slot_id), rows in groups.items():
                seats = sum(int(r["seats"]) * int(r["n"]) for r in rows)
                ticket_cap = int(rows[0]["ticket_cap"] or 0)
                if ticket_id is not None and ticket_cap > 0:
                    ticket = {"id": ticket_id, "seats_max": ticket_cap}
                    scope, sid, slot, t_cap, sql = self._scopes(slot_id, ticket)[-1]
                    room = max(t_cap - await self._count((scope, sid, slot), sql), 0)
                    seats = min(seats, room)
                for key in self._keys(slot_id, ticket_id):
                    self._queued[key] += seats
        return self._queued

    async def waiting_for(self, slot_id: UUID | None, ticket: dict[str, Any] | None) -> int:
        """The seats set aside for the waiting list in the limited scopes a request of this
        slot and ticket takes."""
        queued = await self.queued()
        return sum(queued[(s, sid, slot)] for s, sid, slot, _, _ in self._scopes(slot_id, ticket))

    def smallest_cap(self, slot_id: UUID | None, ticket: dict[str, Any] | None) -> int | None:
        """The smallest cap of the limited scopes a registration of this slot and ticket
        takes a seat in (None: all unlimited): no request may ever want more."""
        caps = [cap for _, _, _, cap, _ in self._scopes(slot_id, ticket)]
        return min(caps) if caps else None

    async def take(
        self,
        slot_id: UUID | None,
        ticket: dict[str, Any] | None,
        wanted: int,
        *,
        behind_queue: bool = False,
        keep: bool = True,
    ) -> None:
        """Take `wanted` seats in every limited scope, or refuse `event_seats_exhausted`
        (naming the first scope that lacks them) and take none. `behind_queue`: the seats
        of the entries waiting in a scope are not there for this request. `keep=False`
        only asks (nothing is taken)."""
        scopes = self._scopes(slot_id, ticket)
        queued = await self.queued() if behind_queue and scopes else Counter[Key]()
        for scope, scope_id, slot, cap, sql in scopes:
            key = (scope, scope_id, slot)
            taken = await self._count(key, sql) + queued[key]
            if taken + wanted > cap:
                available = max(cap - taken, 0)
                raise errors.SeatsExhausted(
                    f"Only {available} seat(s) left for this {scope.replace('_', ' and ')}.",
                    scope=scope,
                    scope_id=str(scope_id),
                    requested=wanted,
                    available=available,
                    missing=wanted - available,
                )
        if keep:
            for scope, scope_id, slot, _, _ in scopes:
                self._taken[(scope, scope_id, slot)] += wanted


async def ensure_seats(
    conn: Connection,
    event: dict[str, Any],
    slot_id: UUID | None,
    ticket: dict[str, Any] | None,
    wanted: int,
) -> None:
    """Refuse `event_seats_exhausted` unless `wanted` more seats fit every limited scope.

    The caller holds the locks (event row, then slot row, then ticket row). An
    unlimited scope is not counted at all. On a multi-slot event the event cap
    and a ticket's cap apply per slot.
    """
    await SeatLedger(conn, event).take(slot_id, ticket, wanted)


async def ensure_cap_covers_taken(
    conn: Connection, event: dict[str, Any], ticket_id: UUID | None, cap: int
) -> None:
    """Refuse `seats_below_taken` when a limited cap (`cap > 0`) for the event (or one of
    its tickets) is below the seats already taken in the fullest scope it caps: per slot
    on a multi-slot event. The caller holds the event lock; the count is the read model's."""
    if cap <= 0:
        return
    multi = bool(event["is_multi_slots"])
    taken: Counter[UUID | None] = Counter()
    for row in await conn.fetch(_TAKEN_BY_SCOPE, event["id"]):
        if ticket_id is None or row["event_ticket_id"] == ticket_id:
            taken[row["event_slot_id"] if multi else None] += int(row["n"])
    most = max(taken.values(), default=0)
    if most > cap:
        raise errors.SeatsBelowTaken(
            f"{most} seat(s) are taken; seats_max cannot go below that.",
            field="seats_max",
            seats_max=cap,
            taken=most,
        )
