"""The lead pass's two steps for one event: walk, then deliver.

**Walk** (`walk_rule`): for one active rule, the event's eligible registrations (state
`open`/`done`, active, admitted by the rule's registration-level predicates, anti-joined
against the rule's junction) in batches, on an id cursor, until drained (or the pass
stops: the anti-join makes a later walk go on where this one ended). Each batch is
ONE statement and its own transaction: it groups the rows (grouping is strategy, not
schema: a sale-linked row groups per order, `group_key` = the order id; a walk-in per
event-local day, `{event_id}:{YYYY-MM-DD}` of its `created_at` in the event's `date_tz`),
upserts each group's provenance row and links the rows to it, numbered with the
group's open delivery (a group whose latest delivery was already handed to the sink
opens the next number).

**The rule's company fence, again at the row.** The pass picks only rules whose company
sees the event; the walk's own statement also takes only registrations visible to the
rule's company (`event.visible_to(registration company, rule company)`: its own and
shared rows; every row for a platform rule), so no rule ever links another company's
registration, whatever its predicates name (defence in depth).

**Deliver** (`deliver_pending`): each of the event's groups with an undelivered number,
one number at a time: one short transaction marks the number sent (from then on new rows
open the next number, so a delivery's content never changes) and reads its rows; the
transaction COMMITS, and only then is the sink called (never under a lock), with the key
`<provenance id>:<number>`. A group without a lead gets `create_lead` and records the lead
id; a known lead gets `update_lead`. A refusal (or any error of the sink) stops the
event's delivery and is answered to the pass, which parks the request; the number stays
undelivered and is sent again, with the same key and the same rows, by a later pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc.db import Pool, must, transaction
from events_svc.ports import LeadDelivery, LeadRefused, LeadSink

NIL = UUID(int=0)

# One batch of one rule on one event: pick, group, upsert the groups, link the rows.
# $1 event, $2 rule, $3 the event's date_tz, $4 cursor, $5 batch size, $6 now.
_WALK = """
WITH batch AS (
    SELECT r.id,
        CASE WHEN r.sale_order_id IS NOT NULL THEN r.sale_order_id::text
             ELSE $1::uuid::text || ':' || to_char(r.created_at AT TIME ZONE $3::text, 'YYYY-MM-DD')
        END AS group_key,
        CASE WHEN r.sale_order_id IS NOT NULL THEN 'per_order' ELSE 'per_event_day'
        END::event.lead_grain AS grain
    FROM event.registrations r
    WHERE r.event_id = $1::uuid AND r.id > $4::uuid AND r.state IN ('open', 'done') AND r.active
      -- the rule's company fence, at the statement that picks rows (defence in depth)
      AND EXISTS (SELECT 1 FROM event.lead_rules lr
                  WHERE lr.id = $2 AND event.visible_to(r.company_id, lr.company_id))
      AND NOT EXISTS (SELECT 1 FROM event.lead_provenance_registrations j
                      WHERE j.rule_id = $2 AND j.registration_id = r.id)
      AND NOT EXISTS (SELECT 1 FROM event.lead_rule_predicates p
                      WHERE p.rule_id = $2 AND NOT event.lead_admits_registration(
                          p.axis, p.value_ids, p.question_id, r.id))
    ORDER BY r.id
    LIMIT $5
), groups AS (
    -- a group whose open number was handed to the sink opens the next one
    INSERT INTO event.lead_provenances AS v (rule_id, group_key, grain, event_id, created_at,
        updated_at)
    SELECT DISTINCT $2::uuid, group_key, grain, $1::uuid, $6::timestamptz, $6::timestamptz
    FROM batch
    ON CONFLICT ON CONSTRAINT lead_provenances_rule_group_key DO UPDATE
    SET delivery_no = CASE WHEN v.delivery_no > v.sent_no THEN v.delivery_no
                           ELSE v.delivery_no + 1 END,
        event_id = excluded.event_id, sink_state = 'pending', updated_at = excluded.updated_at
    RETURNING v.id, v.group_key, v.delivery_no
), linked AS (
    INSERT INTO event.lead_provenance_registrations (provenance_id, registration_id, rule_id,
        delivery_no)
    SELECT g.id, b.id, $2, g.delivery_no FROM batch b JOIN groups g USING (group_key)
    ON CONFLICT DO NOTHING  -- a walker whose lease expired under it: first link wins
)
SELECT (SELECT count(*) FROM batch) AS walked,
       (SELECT id FROM batch ORDER BY id DESC LIMIT 1) AS last_id
"""
_PENDING = """
SELECT id FROM event.lead_provenances
WHERE event_id = $1 AND delivered_no < delivery_no
ORDER BY created_at, id
"""
# the next undelivered number, marked sent: its content is frozen from this commit on
_MARK_SENT = """
UPDATE event.lead_provenances SET sent_no = greatest(sent_no, delivered_no + 1), updated_at = $2
WHERE id = $1 AND delivered_no < delivery_no
RETURNING id, rule_id, event_id, grain::text AS grain, group_key, lead_id,
    delivered_no + 1 AS number
"""
_GROUP_ROWS = """
SELECT registration_id, delivery_no = $2 AS new FROM event.lead_provenance_registrations
WHERE provenance_id = $1 AND delivery_no <= $2
ORDER BY registration_id
"""
_DELIVERED = """
UPDATE event.lead_provenances SET delivered_no = greatest(delivered_no, $2),
    lead_id = coalesce(lead_id, $3),
    sink_state = CASE WHEN greatest(delivered_no, $2) >= delivery_no
                      THEN 'delivered' ELSE 'pending' END::event.lead_sink_state,
    last_error = NULL, updated_at = $4
WHERE id = $1
"""
# the rule's last error clears once none of its groups is still refused
_RULE_RECOVERED = """
UPDATE event.lead_rules r SET last_error = NULL, last_error_at = NULL
WHERE r.id = $1 AND r.last_error IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM event.lead_provenances p WHERE p.rule_id = r.id AND p.sink_state = 'refused')
"""
_REFUSED = """
UPDATE event.lead_provenances SET sink_state = 'refused', last_error = $2, updated_at = $3
WHERE id = $1
"""
_RULE_FAILING = "UPDATE event.lead_rules SET last_error = $2, last_error_at = $3 WHERE id = $1"

MAX_REASON = 500


@dataclass
class Delivered:
    """What delivering one event's groups did; `refused` is the safe reason of a refusal."""

    created: int = 0
    updated: int = 0
    refused: str | None = None
    stopped: bool = False  # the loop is stopping: the rest is left to the next pass


async def walk_rule(
    pool: Pool,
    event_id: UUID,
    date_tz: str,
    rule_id: UUID,
    batch: int,
    now: datetime,
    stopping: Callable[[], bool] = lambda: False,
) -> tuple[int, bool]:
    """Link every eligible registration of the event to its group of the rule, a batch per
    transaction; (how many rows were linked, whether the walk reached the end: False when
    `stopping()` ended it, the rest for a later walk)."""
    cursor, total = NIL, 0
    while True:
        if stopping():
            return total, False
        async with transaction(pool) as conn:
            row = must(await conn.fetchrow(_WALK, event_id, rule_id, date_tz, cursor, batch, now))
        walked = int(row["walked"])
        total += walked
        if walked < batch or row["last_id"] is None:
            return total, True
        cursor = row["last_id"]


def safe_reason(exc: BaseException) -> str:
    """A refusal's own reason; any other error by its type only (its text may hold data)."""
    text = str(exc) if isinstance(exc, LeadRefused) else f"sink raised {type(exc).__name__}"
    return (text or type(exc).__name__)[:MAX_REASON]


async def _next(pool: Pool, provenance_id: UUID, now: datetime) -> LeadDelivery | None:
    """Mark the group's next number sent and read its rows (committed before the call)."""
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_MARK_SENT, provenance_id, now)
        if row is None:
            return None
        p: dict[str, Any] = dict(row)
        rows = await conn.fetch(_GROUP_ROWS, provenance_id, p["number"])
    return LeadDelivery(
        action="create" if p["lead_id"] is None else "update",
        rule_id=p["rule_id"],
        event_id=p["event_id"],
        grain=p["grain"],
        group_key=p["group_key"],
        lead_id=p["lead_id"],
        registration_ids=[r["registration_id"] for r in rows],
        new_registration_ids=[r["registration_id"] for r in rows if r["new"]],
        idempotency_key=f"{provenance_id}:{p['number']}",
    )


async def _record(
    pool: Pool, provenance_id: UUID, d: LeadDelivery, lead_id: str | None, now: datetime
) -> None:
    number = int(d.idempotency_key.rsplit(":", 1)[1])
    async with transaction(pool) as conn:
        await conn.execute(_DELIVERED, provenance_id, number, lead_id, now)
        await conn.execute(_RULE_RECOVERED, d.rule_id)


async def _refused(
    pool: Pool, provenance_id: UUID, rule_id: UUID, reason: str, now: datetime
) -> None:
    async with transaction(pool) as conn:
        await conn.execute(_REFUSED, provenance_id, reason, now)
        await conn.execute(_RULE_FAILING, rule_id, reason, now)


async def deliver_pending(
    pool: Pool,
    sink: LeadSink,
    event_id: UUID,
    now: datetime,
    *,
    stopping: Callable[[], bool] = lambda: False,
) -> Delivered:
    """Hand every undelivered number of the event's groups to the sink, in order."""
    out = Delivered()
    async with transaction(pool) as conn:
        pending = [r["id"] for r in await conn.fetch(_PENDING, event_id)]
    for provenance_id in pending:
        while True:
            if stopping():
                out.stopped = True
                return out
            delivery = await _next(pool, provenance_id, now)
            if delivery is None:
                break
            try:
                if delivery.action == "create":
                    lead_id: str | None = await sink.create_lead(delivery)
                    if not isinstance(lead_id, str) or not 1 <= len(lead_id) <= 200:
                        raise LeadRefused("the sink answered no usable lead id (1-200 chars)")
                else:
                    await sink.update_lead(delivery)
                    lead_id = None
            except Exception as exc:  # any sink failure parks the request: never a skip
                out.refused = safe_reason(exc)
                await _refused(pool, provenance_id, delivery.rule_id, out.refused, now)
                return out
            await _record(pool, provenance_id, delivery, lead_id, now)
            if delivery.action == "create":
                out.created += 1
            else:
                out.updated += 1
    return out
