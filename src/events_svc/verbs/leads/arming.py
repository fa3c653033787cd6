"""Lead arming: the ONE place that queues lead requests (`event.lead_requests`, one per
event, upserted `done = false` with a new `generation`).

- A rule created, re-activated, or edited while active queues every event it can match
  (`queue_for_rule`): its events, the events of its types or companies, the events its
  question is linked to, as `event.lead_admits_event` says, within the rule's company
  fence (`event.visible_to(event company, rule company)`: a company's rule never queues
  another company's event, even on a shared type or question).
- A registration minted or entering `open` queues its event when an active rule matches
  it (`queue_for_registrations`, the same fence): trigger `create` on mint, `confirm` on
  entering open. A
  row minted `open` is both; a row entering `open` later queues the rules of both
  triggers, since the walk takes only `open`/`done` rows (a `create` rule's draft became
  eligible only now). The register verb (and so the sale seam's mints) and
  `states.write_state` call it. When no rule is active it costs one probe of the partial
  index `lead_rules_active_idx` (one short statement: about 0.1 ms, as `SELECT 1`).
- Bulk imports do not arm leads (IMPORT-EXEMPT): their verb passes `arm_leads=False` to
  the register verb, a declared parameter, never a hidden path.

Queueing wakes the lead pass of every process (`NOTIFY event_lead_due`) when the
transaction commits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from events_svc.db import Connection

WAKE_CHANNEL = "event_lead_due"  # the lead pass LISTENs here

Trigger = Literal["create", "confirm"]

# the rules a mint answers (`create`), and those a row entering open answers (both)
_TRIGGERS: dict[Trigger, list[str]] = {"create": ["create"], "confirm": ["create", "confirm"]}

# the hot path's whole cost when no rule is active: one probe of the partial index
_ANY_ACTIVE = "SELECT EXISTS (SELECT 1 FROM event.lead_rules WHERE active)"
# One statement: is an active rule of these triggers matching the event and at least one
# of the registrations? Then upsert the event's request and NOTIFY.
_QUEUE_FOR_REGISTRATIONS = """
WITH matched AS (
    SELECT e.id FROM event.events e
    WHERE e.id = $1 AND EXISTS (
        SELECT 1 FROM event.lead_rules r
        WHERE r.active AND r.trigger = ANY($3::event.lead_trigger[])
          AND event.visible_to(e.company_id, r.company_id)  -- the rule's company fence
          AND NOT EXISTS (
              SELECT 1 FROM event.lead_rule_predicates p
              WHERE p.rule_id = r.id AND NOT event.lead_admits_event(
                  p.axis, p.value_ids, p.question_id, e.id, e.event_type_id, e.company_id))
          AND EXISTS (
              SELECT 1 FROM unnest($2::uuid[]) AS g(registration_id)
              WHERE NOT EXISTS (
                  SELECT 1 FROM event.lead_rule_predicates p
                  WHERE p.rule_id = r.id AND NOT event.lead_admits_registration(
                      p.axis, p.value_ids, p.question_id, g.registration_id))))
), queued AS (
    INSERT INTO event.lead_requests AS q (event_id, queued_at, updated_at)
    SELECT id, $4, $4 FROM matched
    ON CONFLICT ON CONSTRAINT lead_requests_event_key DO UPDATE
    SET done = false, generation = q.generation + 1, queued_at = $4, updated_at = $4,
        done_at = NULL
    RETURNING q.event_id
)
SELECT count(pg_notify($5, event_id::text)) FROM queued
"""
# every event an active rule can match, queued at once (rule create, activate, edit)
_QUEUE_FOR_RULE = """
WITH matched AS (
    SELECT e.id FROM event.events e JOIN event.lead_rules r ON r.id = $1 AND r.active
    WHERE event.visible_to(e.company_id, r.company_id)  -- the rule's company fence
      AND NOT EXISTS (
          SELECT 1 FROM event.lead_rule_predicates p
          WHERE p.rule_id = $1 AND NOT event.lead_admits_event(
              p.axis, p.value_ids, p.question_id, e.id, e.event_type_id, e.company_id))
), queued AS (
    INSERT INTO event.lead_requests AS q (event_id, queued_at, updated_at)
    SELECT id, $2, $2 FROM matched ORDER BY id  -- request rows upserted by event id
    ON CONFLICT ON CONSTRAINT lead_requests_event_key DO UPDATE
    SET done = false, generation = q.generation + 1, queued_at = $2, updated_at = $2,
        done_at = NULL
    RETURNING q.event_id
)
SELECT count(*) FROM queued
"""
_NOTIFY = "SELECT pg_notify($1, 'lead_rule')"


async def queue_for_registrations(
    conn: Connection,
    event_id: UUID,
    registration_ids: list[UUID],
    trigger: Trigger,
    now: datetime,
) -> bool:
    """Queue the event's lead request when an active rule of `trigger` matches it and one
    of the registrations (minted, or entering open); whether it queued. Runs inside the
    caller's transaction, after the registrations are written (answers included)."""
    if not registration_ids or not await conn.fetchval(_ANY_ACTIVE):
        return False
    queued = await conn.fetchval(
        _QUEUE_FOR_REGISTRATIONS, event_id, registration_ids, _TRIGGERS[trigger], now, WAKE_CHANNEL
    )
    return bool(queued)


async def queue_for_rule(conn: Connection, rule_id: UUID, now: datetime) -> int:
    """Queue every event the (active) rule can match; how many were queued."""
    queued = int(await conn.fetchval(_QUEUE_FOR_RULE, rule_id, now))
    if queued:
        await conn.execute(_NOTIFY, WAKE_CHANNEL)
    return queued
