"""The in-process scheduler loop, started by the app lifespan.

It runs the mail pass (and the lead, import, operation and waiting-list offer passes),
sleeps until the earliest workable scheduler row (its due time, or the end of its
back-off), the earliest offer deadline or the floor tick, whichever is sooner, and
wakes early on `NOTIFY event_mail_due` from the arming verbs and on `NOTIFY
event_waitlist_due` when seats are freed where somebody waits. Once a day at
`EVENT_DONE_SWEEP_AT` (UTC) it also runs the done sweep. With
`EVENT_TRIGGER_DISPATCH=true` it also runs the trigger dispatcher's pass (`verbs.dispatch`),
woken by the `NOTIFY` of written triggers. Any number of instances
may run it: every claim is `FOR UPDATE SKIP LOCKED`. Stopping lets the batch in
hand finish and commit.

It never spins. A failing line backs itself off (see `verbs.mail.failures`), so a loop
whose only due work is failing sleeps. A pass that itself fails, or one that finds
due work it cannot take (rows locked by another instance), makes the loop wait
longer each time (seconds, doubling); a lost LISTEN connection (its server gone: a
crash, a failover) is noticed when it closes and opened again the same way, on the new
primary when the URL names several hosts. Each kind of failure is logged when it starts
and when it clears.

LISTEN runs on a connection of its own (outside the pool) when the database URL is
known; a host that hands in only a pool lends one pooled connection to it. The same
connection listens for the other loops of the lifespan (`also_listen`: the outbox
drainer's `event_outbox_due`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from events_svc.capabilities import CapabilityCodec
from events_svc.db import Pool, connect_host_by_host
from events_svc.diagnostics import doubling, error_fields
from events_svc.links import AttendeeLinks
from events_svc.observability import Metrics
from events_svc.ports import Ports
from events_svc.settings import Settings
from events_svc.verbs.attendance import ImportOptions, next_import_due, run_import_pass
from events_svc.verbs.dispatch import next_dispatch_due, run_dispatch_pass
from events_svc.verbs.events import sweep_done_events
from events_svc.verbs.leads import LeadOptions, next_lead_due, run_lead_pass
from events_svc.verbs.mail import CHANNEL, PassOptions, RunSummary, next_due, run_mail_pass
from events_svc.verbs.operations import OperationOptions, next_operation_due, run_operation_pass
from events_svc.verbs.waitlist import OfferOptions, next_offer_due, run_offer_pass

log = logging.getLogger("events_svc.scheduler")

WAITLIST_CHANNEL = "event_waitlist_due"  # seats freed where somebody waits

FAILED_PASS_FIRST_S = 5.0  # a failed pass: wait 5 s, doubling up to 5 minutes
FAILED_PASS_MAX_S = 300.0
BLOCKED_FIRST_S = 1.0  # due work that could not be taken: 1 s, doubling up to 1 minute
BLOCKED_MAX_S = 60.0


def attendee_links(settings: Settings) -> AttendeeLinks:
    """The links mail templates carry, as this deployment can mint them."""
    codec = CapabilityCodec(settings.capability_secrets)
    return AttendeeLinks(codec, settings.public_base_url, settings.ics_ttl_s)


def pass_options(settings: Settings) -> PassOptions:
    return PassOptions(
        batch=settings.mail_batch,
        cap=settings.mail_cron_limit,
        default_sender=settings.mail_sender,
        links=attendee_links(settings),
    )


def offer_options(settings: Settings) -> OfferOptions:
    links = attendee_links(settings)
    return OfferOptions(
        links=links, waitlist_links=links.waitlist, default_sender=settings.mail_sender
    )


def next_sweep(now: datetime, at: str) -> datetime:
    """The next daily sweep instant (UTC) strictly after `now`."""
    hh, mm = (int(x) for x in at.split(":"))
    today = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    return today if today > now else today + timedelta(days=1)


class SchedulerLoop:
    """Runs passes until stopped; `passes`, `failures` and `last` are for observation."""

    def __init__(
        self,
        pool: Callable[[], Pool],
        ports: Ports,
        settings: Settings,
        clock: Callable[[], datetime],
        metrics: Metrics | None = None,
        also_listen: dict[str, Callable[..., None]] | None = None,
    ) -> None:
        self.pool, self.ports, self.settings, self.clock = pool, ports, settings, clock
        # other loops woken through this loop's LISTEN connection (the outbox drainer)
        self.also_listen = dict(also_listen or {})
        self.metrics = metrics
        self.wake = asyncio.Event()
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.passes = 0
        self.failures = 0
        self.last: RunSummary | None = None
        self.sweep_at = next_sweep(clock(), settings.done_sweep_at)
        self.failing = 0  # consecutive failed passes
        self.blocked = 0  # consecutive passes that found due work and could take none
        self.lost = 0  # consecutive failures to hold a LISTEN connection

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="events-scheduler")

    async def stop(self) -> None:
        """Finish the batch in hand, then return."""
        self.stopping.set()
        self.wake.set()
        if self.task is not None:
            await self.task

    def _notified(self, *_: Any) -> None:
        self.wake.set()

    async def run_once(self) -> RunSummary:
        """One pass (and the sweep when it is due)."""
        now = self.clock()
        # first, the waiting list's offers (freed seats to the queue, expired offers
        # released): a failing pass after it cannot hold a freed seat back
        offers = await run_offer_pass(
            self.pool(),
            self.ports,
            offer_options(self.settings),
            now,
            stopping=self.stopping.is_set,
        )
        if self.metrics is not None:
            self.metrics.waitlist_offers.labels("offered").inc(offers.offered)
            self.metrics.waitlist_offers.labels("expired").inc(offers.expired)
        summary = await run_mail_pass(
            self.pool(), self.ports, pass_options(self.settings), now, stopping=self.stopping.is_set
        )
        # the lead pass, next to the mail pass: its requests park and back off on their own
        leads = await run_lead_pass(
            self.pool(),
            self.ports.lead_sink,
            LeadOptions.from_settings(self.settings),
            now,
            stopping=self.stopping.is_set,
        )
        summary.more = summary.more or leads.more
        summary.advanced += leads.requests
        # the attendance import pass: a failing batch backs its own job off
        imports = await run_import_pass(
            self.pool(),
            ImportOptions.from_settings(self.settings),
            now,
            stopping=self.stopping.is_set,
        )
        summary.more = summary.more or imports.more
        summary.advanced += imports.batches
        # the event operations pass: writes triggers, never a message
        operations = await run_operation_pass(
            self.pool(),
            OperationOptions.from_settings(self.settings),
            now,
            stopping=self.stopping.is_set,
        )
        summary.more = summary.more or operations.more or offers.more
        summary.advanced += operations.batches + offers.offered + offers.expired + offers.closed
        if self.settings.trigger_dispatch:  # the optional dispatcher: triggers into mail
            dispatched = await run_dispatch_pass(
                self.pool(),
                self.ports,
                pass_options(self.settings),
                now,
                stopping=self.stopping.is_set,
            )
            summary.more = summary.more or dispatched.more
            summary.advanced += dispatched.batches
            summary.sent += dispatched.sent
            for kind, n in dispatched.failures.items():
                summary.count(kind, n)
        if now >= self.sweep_at and not self.stopping.is_set():
            moved = await sweep_done_events(self.pool(), now)
            log.info("done sweep moved %d event(s)", moved)
            self.sweep_at = next_sweep(now, self.settings.done_sweep_at)
        self.passes += 1
        self.last = summary
        if self.metrics is not None:
            self.metrics.observe_pass(summary)
        return summary

    async def _until_due(self) -> float:
        now = self.clock()
        floor = float(self.settings.scheduler_floor_s)
        due = await next_due(self.pool(), now)
        until_due = (due - now).total_seconds() if due is not None else floor
        lead_due = await next_lead_due(self.pool(), LeadOptions.from_settings(self.settings), now)
        if lead_due is not None:
            until_due = min(until_due, (lead_due - now).total_seconds())
        import_due = await next_import_due(self.pool(), now)
        if import_due is not None:
            until_due = min(until_due, (import_due - now).total_seconds())
        offer_due = await next_offer_due(self.pool(), now)
        if offer_due is not None:
            until_due = min(until_due, (offer_due - now).total_seconds())
        operation_due = await next_operation_due(self.pool(), now)
        if operation_due is not None:
            until_due = min(until_due, (operation_due - now).total_seconds())
        if self.settings.trigger_dispatch:
            dispatch_due = await next_dispatch_due(self.pool(), now)
            if dispatch_due is not None:
                until_due = min(until_due, (dispatch_due - now).total_seconds())
        until_sweep = (self.sweep_at - now).total_seconds()
        return max(0.0, min(floor, until_due, until_sweep))

    async def tick(self) -> float:
        """One turn of the loop: a pass, then the seconds to sleep before the next one.

        Zero only when the pass stopped at its cap, or made progress with work still
        due; never after a failure or a pass that could not take the work it found."""
        floor = float(self.settings.scheduler_floor_s)
        try:
            summary = await self.run_once()
            delay = 0.0 if summary.more else await self._until_due()
        except Exception as exc:
            self.failures += 1
            self.failing += 1
            if self.metrics is not None:
                self.metrics.pass_errors.inc()
            wait = min(doubling(FAILED_PASS_FIRST_S, FAILED_PASS_MAX_S, self.failing), floor)
            level = logging.ERROR if self.failing == 1 else logging.DEBUG
            fields = {**error_fields(exc), "failed_passes": self.failing, "retry_in_s": wait}
            log.log(level, "scheduler pass failed", extra={"fields": fields})
            return wait
        if self.failing:
            log.info("scheduler pass recovered", extra={"fields": {"failed_passes": self.failing}})
            self.failing = 0
        if delay <= 0.0 and not summary.more and not summary.progressed:
            self.blocked += 1  # due work it could not take: another instance holds it
            return min(doubling(BLOCKED_FIRST_S, BLOCKED_MAX_S, self.blocked), floor)
        self.blocked = 0
        return delay

    async def _run(self) -> None:
        """Serve until stopped; a lost database (no LISTEN connection) is retried, backing
        off."""
        while not self.stopping.is_set():
            try:
                await self._serve()
            except Exception as exc:
                self.failures += 1
                self.lost += 1
                wait = doubling(BLOCKED_FIRST_S, BLOCKED_MAX_S, self.lost)
                level = logging.ERROR if self.lost == 1 else logging.DEBUG
                log.log(
                    level,
                    "scheduler loop lost its database connection",
                    extra={
                        "fields": {**error_fields(exc), "attempts": self.lost, "retry_in_s": wait}
                    },
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), timeout=wait)

    async def _listener(self, stack: contextlib.AsyncExitStack) -> Any:
        """A connection for LISTEN: its own when the URL is known (the direct one behind a
        transaction pooler), else one from the pool."""
        url = self.settings.session_url
        if url:
            conn = await connect_host_by_host(url, timeout=self.settings.connect_timeout_s)
            stack.push_async_callback(conn.close)
            return conn
        return await stack.enter_async_context(self.pool().acquire())

    async def _serve(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            listener = await self._listener(stack)
            closed = asyncio.Event()

            def on_close(_: object) -> None:  # its server went away (a crash, a failover)
                closed.set()
                self.wake.set()

            listener.add_termination_listener(on_close)
            stack.callback(listener.remove_termination_listener, on_close)
            for own in (CHANNEL, WAITLIST_CHANNEL):
                await listener.add_listener(own, self._notified)
                stack.push_async_callback(listener.remove_listener, own, self._notified)
            for channel, callback in self.also_listen.items():
                await listener.add_listener(channel, callback)
                stack.push_async_callback(listener.remove_listener, channel, callback)
                callback()  # what was written while nobody listened is looked at now
            if self.lost:
                log.info("scheduler loop reconnected", extra={"fields": {"attempts": self.lost}})
                self.lost = 0
            while not self.stopping.is_set():
                if closed.is_set():  # no wake-up would reach this loop: listen again
                    raise ConnectionError("the LISTEN connection closed")
                self.wake.clear()
                delay = await self.tick()
                if delay <= 0.0:
                    continue
                # after a failed pass only a stop interrupts the wait: new registrations
                # must not turn a failing pass into a busy one
                event = self.stopping if self.failing else self.wake
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=delay)
