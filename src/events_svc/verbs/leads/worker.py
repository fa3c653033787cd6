"""The lead pass: claims queued lead requests from the one leased queue and works each.

**Claim** (`verbs.leases.LEAD_REQUESTS`): up to `batch` requests that are not done, not
backing off and not leased (or whose lease ran out: a dead walker's request is claimed
again, at least once), `FOR UPDATE SKIP LOCKED`, leased for `lease_s` under a token (a
pass renews what it still holds once half the lease is spent). The lease holds the
exclusion for the walker's whole per-event work: the loop's pass and the officer's
`POST /admin/lead-requests/run` share it. A company actor's run claims only
the requests of its company's events.

**Work** (each request on its own, each step its own transaction): the event's active
rules that admit it and whose company sees it (`event.visible_to(event company, rule
company)`: a company's rule never reaches another company's event, whatever its
predicates name), each walked to the end (`walk.walk_rule`), then every undelivered
group number of the event handed to the sink (`walk.deliver_pending`), after its rows
committed. The sink is tried once per number: a refusal, a transport error, a 429 or a
5xx, or no answer in time parks the request. **Finish** (onto a request the token still
holds) clears the lease and marks it done unless it was queued again meanwhile
(`generation` moved: it stays due). **A refusal parks it loudly:** done stays false,
`error_detail` holds the reason, `attempts` + 1, and it backs off (`backoff.LEAD_REQUESTS`:
1 minute, doubling to 1 hour; the officer's run ignores the back-off). Any other error of
one request is recorded the same way (its type only), and the pass goes on.

**Bounded in time:** the pass asks `stopping` before each request, each walk batch and
each sink call; a request it stops in is given back as it was (what its groups delivered
is recorded), and the loop's pass is bounded (`loops.passes.PASS_BUDGET_S`), so a CRM
that never answers delays only the lead requests.

A parked (or recovered) request's log line names the event, the reason, the channel
(`lead_sink`) and the sink's host and port: never the sink's URL path or query.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from events_svc.backoff import LEAD_REQUESTS
from events_svc.db import Pool, transaction
from events_svc.diagnostics import error_fields
from events_svc.ports import LeadSink
from events_svc.settings import Settings
from events_svc.verbs.leads.arming import WAKE_CHANNEL
from events_svc.verbs.leads.walk import deliver_pending, walk_rule
from events_svc.verbs.leases import LEAD_REQUESTS as QUEUE
from events_svc.verbs.leases import Claim

log = logging.getLogger("events_svc.leads")

# a claim's hold: longer than a bounded pass and one sink call, so a pass that runs renews
# it rarely; short enough that what a killed process claimed is due again in minutes
LEASE_S = 120.0

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
# both written onto a request the claim's token still holds (`QUEUE.holding`)
_FINISH = """
UPDATE event.lead_requests
SET done = (generation = claimed_generation),
    done_at = CASE WHEN generation = claimed_generation THEN $2::timestamptz END,
    claimed_at = NULL, lease_until = NULL, lease_token = NULL, claimed_generation = NULL,
    error_detail = NULL, error_at = NULL, attempts = 0, next_attempt_at = NULL,
    updated_at = $2
WHERE id = $1
"""
_PARK = """
UPDATE event.lead_requests
SET claimed_at = NULL, lease_until = NULL, lease_token = NULL, claimed_generation = NULL,
    error_detail = $3, error_at = $2, attempts = attempts + 1, next_attempt_at = $4,
    updated_at = $2
WHERE id = $1
RETURNING attempts
"""
_NEXT_DUE = """
SELECT min(greatest(coalesce(next_attempt_at, $1), coalesce(lease_until, $1)))
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


def _sink_fields(sink: LeadSink) -> dict[str, Any]:
    """What a lead request's log line names of the sink: the channel and, for a sink that
    sends to a URL (`adapters.lead_webhook`), its host and port: never the URL's path or
    query, never its secret."""
    host = getattr(sink, "host", None)  # a host's own sink may have none
    return {"channel": "lead_sink", **({"host": host} if isinstance(host, str) else {})}


async def _park(
    pool: Pool,
    claim: Claim,
    req: dict[str, Any],
    reason: str,
    now: datetime,
    trace: dict[str, Any] | None = None,
) -> None:
    """The request waits: its reason, one more attempt, its back-off (if the claim still
    holds it). `trace`: more fields of its log line (the sink's, an error's)."""
    attempts = int(req["attempts"]) + 1
    retry_at = now + LEAD_REQUESTS.delay(attempts)
    async with QUEUE.holding(pool, [(req["id"], claim.lease.token)]) as (conn, held):
        if not held:
            return  # the lease ran out under this work: another walker has it
        await conn.execute(_PARK, req["id"], now, reason, retry_at)
    fields = {
        "event_id": str(req["event_id"]),
        "reason": reason,
        "attempts": attempts,
        "next_attempt_at": retry_at.isoformat(),
        **(trace or {}),
    }
    level = logging.WARNING if req["error_detail"] != reason else logging.DEBUG
    log.log(level, "lead request parked", extra={"fields": fields})


async def _finish(
    pool: Pool, claim: Claim, req: dict[str, Any], now: datetime, where: dict[str, Any]
) -> None:
    async with QUEUE.holding(pool, [(req["id"], claim.lease.token)]) as (conn, held):
        if not held:
            return
        await conn.execute(_FINISH, req["id"], now)
    if req["error_detail"] is not None:
        fields = {
            "event_id": str(req["event_id"]),
            "after_attempts": int(req["attempts"]),
            **where,  # the sink's channel and host
        }
        log.info("lead request recovered", extra={"fields": fields})


async def _work(
    pool: Pool,
    sink: LeadSink,
    options: LeadOptions,
    claim: Claim,
    req: dict[str, Any],
    now: datetime,
    at: Callable[[], datetime],
    summary: LeadSummary,
    stopping: Callable[[], bool],
) -> bool:
    """One request: walk every admitting rule, deliver, then finish or park (at the time
    `at` says); False when it stopped in the middle (the caller gives it back)."""
    async with transaction(pool) as conn:
        event = await conn.fetchrow(_EVENT, req["event_id"])
        rules = [r["id"] for r in await conn.fetch(_RULES, req["event_id"])] if event else []
    if event is not None:
        for rule_id in rules:
            walked, whole = await walk_rule(
                pool, event["id"], event["date_tz"], rule_id, options.batch, now, stopping
            )
            summary.registrations += walked
            if not whole:
                return False
        out = await deliver_pending(pool, sink, event["id"], now, stopping=stopping)
        summary.groups_created += out.created
        summary.groups_updated += out.updated
        if out.refused is not None:
            summary.parked += 1
            await _park(pool, claim, req, out.refused, at(), _sink_fields(sink))
            return True
        if out.stopped:
            return False
    summary.finished += 1
    await _finish(pool, claim, req, at(), _sink_fields(sink))
    return True


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
    """Claim and work requests until none is due, `cap` were taken or `stopping()` (`more`
    then says work may be left). `force` ignores the back-off of parked requests (never a
    lease); `event_id` works that event's request only; `company_id` (a company actor's
    run) only the requests of that company's events (not the shared ones: they may carry
    other companies' rules, and are left to the scheduled pass or a platform run).

    A request is parked (or finished) at the pass's `now` plus the time the pass has run,
    so its back-off counts from its own try. What a claim took and the pass did not work
    (it stopped, or an error left it) is given back at once and the lead passes of every
    process are woken: no request waits for a lease that no one is using."""
    summary = LeadSummary()
    worked: list[UUID] = []
    lease = timedelta(seconds=options.lease_s)
    started = time.monotonic()

    def at() -> datetime:
        return now + timedelta(seconds=time.monotonic() - started)

    while summary.requests < options.cap:
        if stopping():
            summary.more = True
            return summary
        take = min(options.batch, options.cap - summary.requests)
        claim = await QUEUE.claim(pool, at(), take, lease, force, event_id, worked, company_id)
        done: set[UUID] = set()
        until = claim.lease.until
        try:
            for req in claim.rows:
                if stopping():
                    summary.more = True
                    return summary
                if at() >= until - lease / 2:  # half the hold is spent: renew what is left
                    until = at() + lease
                    left = [(r["id"], claim.lease.token) for r in claim.rows if r["id"] not in done]
                    kept = await QUEUE.renew(pool, left, until)
                    done.update(k for k, _ in left if k not in kept)  # another walker's now
                if req["id"] in done:
                    continue
                summary.requests += 1
                worked.append(req["id"])
                try:
                    whole = await _work(pool, sink, options, claim, req, now, at, summary, stopping)
                except Exception as exc:  # recorded on its request; the pass goes on
                    summary.parked += 1
                    reason = f"lead request failed: {type(exc).__name__}"
                    trace = {**_sink_fields(sink), **error_fields(exc)}  # never its message
                    await _park(pool, claim, req, reason, at(), trace)
                    whole = True
                if not whole:  # stopped inside it: given back as it was
                    summary.more = True
                    return summary
                done.add(req["id"])
        finally:
            left = [(r["id"], claim.lease.token) for r in claim.rows if r["id"] not in done]
            if left:  # even when cancelled: the lease would keep them from everyone
                await asyncio.shield(_give_back(pool, left, at()))
        if len(claim.rows) < take:
            return summary
    summary.more = summary.requests >= options.cap
    return summary


async def _give_back(pool: Pool, held: list[tuple[UUID, UUID]], now: datetime) -> None:
    """The requests a pass took and did not work, back to the queue; every lead pass is
    woken to look at them."""
    if await QUEUE.give_back(pool, held, now):
        async with transaction(pool) as conn:
            await conn.execute("SELECT pg_notify($1, 'given_back')", WAKE_CHANNEL)


async def next_lead_due(pool: Pool, now: datetime) -> datetime | None:
    """When the earliest open request may be claimed (its back-off or lease ends; `now`
    when it may be claimed already), or None when the queue is empty."""
    async with transaction(pool) as conn:
        due: datetime | None = await conn.fetchval(_NEXT_DUE, now)
    return due
