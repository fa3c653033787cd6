"""The lead pass: claims queued lead requests with a lease and works each one.

**Claim.** One `UPDATE … SET claimed_at = now, claimed_by = <this pass>` over up to
`batch` requests chosen `FOR UPDATE SKIP LOCKED` (simultaneous claims never wait inside
the statement): not done, not backing off, and not leased, or leased longer ago than the
lease (900 s): a dead walker's request is claimed again, at least once. The lease column
holds the exclusion for the walker's whole per-event work: the loop's pass and the
officer's `POST /admin/lead-requests/run` share it. At most `cap` requests per pass. A
company actor's run claims only the requests of its company's events.

**Work** (each request on its own, each step its own transaction): the event's active
rules that admit it and whose company sees it (`event.visible_to(event company, rule
company)`: a company's rule never reaches another company's event, whatever its
predicates name), each walked to the end (`walk.walk_rule`), then every undelivered
group number of the event handed to the sink (`walk.deliver_pending`), after its rows
committed. **Finish** clears the lease, and marks the request done unless it was queued
again meanwhile (`generation` moved: it stays due). **A refusal parks it loudly:** done
stays false, `error_detail` holds the reason, and it backs off like a failing mail line
(1 minute, doubling to 1 hour; the officer's run ignores the back-off). Any other error
of one request is recorded the same way (its type only), and the pass goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from events_svc.db import Pool, transaction
from events_svc.diagnostics import error_fields
from events_svc.ports import LeadSink
from events_svc.settings import Settings
from events_svc.verbs.leads.walk import deliver_pending, walk_rule
from events_svc.verbs.mail import backoff

log = logging.getLogger("events_svc.leads")

LEASE_S = 900.0

_CLAIM = """
WITH picked AS (
    SELECT id FROM event.lead_requests
    WHERE NOT done
      AND ($4::boolean OR next_attempt_at IS NULL OR next_attempt_at <= $1)
      AND (claimed_at IS NULL OR claimed_at <= $1 - $2::float8 * interval '1 second')
      AND ($6::uuid IS NULL OR event_id = $6)
      AND NOT (id = ANY($7::uuid[]))  -- worked once in this pass already
      AND ($8::uuid IS NULL OR EXISTS (  -- a company's run: its company's events only
          SELECT 1 FROM event.events e WHERE e.id = event_id AND e.company_id = $8))
    ORDER BY queued_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED  -- a request another pass is claiming is left to it
)
UPDATE event.lead_requests q
SET claimed_at = $1, claimed_by = $5, claimed_generation = q.generation, updated_at = $1
FROM picked WHERE q.id = picked.id
RETURNING q.id, q.event_id, q.attempts, q.error_detail
"""
# renewed before each request of a claimed batch: the lease covers the work of the request
# in hand, not the batch's first; a request whose claim was lost is left alone
_RENEW = """
UPDATE event.lead_requests SET claimed_at = greatest($3::timestamptz, clock_timestamp())
WHERE id = $1 AND claimed_by = $2
RETURNING id
"""
_EVENT = "SELECT id, date_tz FROM event.events WHERE id = $1"
_RULES = """
SELECT r.id FROM event.lead_rules r, event.events e
WHERE e.id = $1 AND r.active
  AND event.visible_to(e.company_id, r.company_id)  -- a rule reaches its company's events
  AND NOT EXISTS (
    SELECT 1 FROM event.lead_rule_predicates p
    WHERE p.rule_id = r.id AND NOT event.lead_admits_event(
        p.axis, p.value_ids, p.question_id, e.id, e.event_type_id, e.company_id))
ORDER BY r.id
"""
_FINISH = """
UPDATE event.lead_requests
SET done = (generation = claimed_generation),
    done_at = CASE WHEN generation = claimed_generation THEN $2::timestamptz END,
    claimed_at = NULL, claimed_by = NULL, claimed_generation = NULL, error_detail = NULL,
    error_at = NULL, attempts = 0, next_attempt_at = NULL, updated_at = $2
WHERE id = $1 AND claimed_by = $3
"""
_PARK = """
UPDATE event.lead_requests
SET claimed_at = NULL, claimed_by = NULL, claimed_generation = NULL, error_detail = $4,
    error_at = $2, attempts = attempts + 1, next_attempt_at = $5, updated_at = $2
WHERE id = $1 AND claimed_by = $3
"""
_RELEASE = """
UPDATE event.lead_requests SET claimed_at = NULL, claimed_by = NULL, claimed_generation = NULL
WHERE claimed_by = $1 AND id = ANY($2::uuid[])
"""
_NEXT_DUE = """
SELECT min(greatest(coalesce(next_attempt_at, $2),
                    coalesce(claimed_at + $1::float8 * interval '1 second', $2)))
FROM event.lead_requests WHERE NOT done
"""


@dataclass(frozen=True)
class LeadOptions:
    """`batch`: requests per claim and registrations per walk batch; `cap`: requests per
    pass; `lease_s`: how long a claim excludes other walkers."""

    batch: int = 200
    cap: int = 1000
    lease_s: float = LEASE_S

    @classmethod
    def from_settings(cls, settings: Settings) -> LeadOptions:
        return cls(batch=settings.lead_batch, cap=settings.lead_cron_limit)


@dataclass
class LeadSummary:
    requests: int = 0
    finished: int = 0
    parked: int = 0
    groups_created: int = 0
    groups_updated: int = 0
    registrations: int = 0
    more: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


async def _park(
    pool: Pool, req: dict[str, Any], token: UUID, reason: str, now: datetime, trace: Any = None
) -> None:
    attempts = int(req["attempts"]) + 1
    retry_at = now + backoff(attempts)
    async with transaction(pool) as conn:
        await conn.execute(_PARK, req["id"], now, token, reason, retry_at)
    fields = {
        "event_id": str(req["event_id"]),
        "reason": reason,
        "attempts": attempts,
        "next_attempt_at": retry_at.isoformat(),
        **(trace or {}),
    }
    level = logging.WARNING if req["error_detail"] != reason else logging.DEBUG
    log.log(level, "lead request parked", extra={"fields": fields})


async def _finish(pool: Pool, req: dict[str, Any], token: UUID, now: datetime) -> None:
    async with transaction(pool) as conn:
        await conn.execute(_FINISH, req["id"], now, token)
    if req["error_detail"] is not None:
        fields = {"event_id": str(req["event_id"]), "after_attempts": int(req["attempts"])}
        log.info("lead request recovered", extra={"fields": fields})


async def _work(
    pool: Pool,
    sink: LeadSink,
    options: LeadOptions,
    req: dict[str, Any],
    token: UUID,
    now: datetime,
    summary: LeadSummary,
    stopping: Callable[[], bool],
) -> None:
    """One request: walk every admitting rule, deliver, then finish or park."""
    async with transaction(pool) as conn:
        event = await conn.fetchrow(_EVENT, req["event_id"])
        rules = [r["id"] for r in await conn.fetch(_RULES, req["event_id"])] if event else []
    if event is not None:
        for rule_id in rules:
            summary.registrations += await walk_rule(
                pool, event["id"], event["date_tz"], rule_id, options.batch, now
            )
        out = await deliver_pending(pool, sink, event["id"], now, stopping=stopping)
        summary.groups_created += out.created
        summary.groups_updated += out.updated
        if out.refused is not None:
            summary.parked += 1
            await _park(pool, req, token, out.refused, now)
            return
        if out.stopped:
            async with transaction(pool) as conn:
                await conn.execute(_RELEASE, token, [req["id"]])
            return
    summary.finished += 1
    await _finish(pool, req, token, now)


async def run_lead_pass(
    pool: Pool,
    sink: LeadSink,
    options: LeadOptions,
    now: datetime,
    *,
    stopping: Callable[[], bool] = lambda: False,
    force: bool = False,
    event_id: UUID | None = None,
    company_id: UUID | None = None,
) -> LeadSummary:
    """Claim and work requests until none is due or `cap` were taken (`more` then says
    work may be left). `force` ignores the back-off of parked requests (never a lease);
    `event_id` works that event's request only; `company_id` (a company actor's run) only
    the requests of that company's events (not the shared ones: they may carry other
    companies' rules, and are left to the scheduled pass or a platform run)."""
    summary = LeadSummary()
    token = uuid4()
    worked: list[UUID] = []
    while summary.requests < options.cap and not stopping():
        take = min(options.batch, options.cap - summary.requests)
        async with transaction(pool) as conn:
            claimed = [
                dict(r)
                for r in await conn.fetch(
                    _CLAIM, now, options.lease_s, take, force, token, event_id, worked, company_id
                )
            ]
        for index, req in enumerate(claimed):
            if stopping():
                async with transaction(pool) as conn:
                    await conn.execute(_RELEASE, token, [r["id"] for r in claimed[index:]])
                return summary
            summary.requests += 1
            worked.append(req["id"])
            async with transaction(pool) as conn:
                if await conn.fetchval(_RENEW, req["id"], token, now) is None:
                    continue  # the claim was lost (a lease that lapsed): another walker has it
            try:
                await _work(pool, sink, options, req, token, now, summary, stopping)
            except Exception as exc:  # recorded on its request; the pass goes on
                summary.parked += 1
                reason = f"lead request failed: {type(exc).__name__}"
                await _park(pool, req, token, reason, now, error_fields(exc))
        if len(claimed) < take:
            return summary
    summary.more = summary.requests >= options.cap
    return summary


async def next_lead_due(pool: Pool, options: LeadOptions, now: datetime) -> datetime | None:
    """When the earliest open request may be claimed (its back-off or lease ends; `now`
    when it may be claimed already), or None when the queue is empty."""
    async with transaction(pool) as conn:
        due: datetime | None = await conn.fetchval(_NEXT_DUE, options.lease_s, now)
    return due
