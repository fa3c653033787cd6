"""The scheduler's passes, each a `Pass` over its verb: the waiting list's offers, the mail
lines, the lead requests, the attendance imports, the event operations, the trigger
dispatcher and the done sweep.

Each takes `Services` (what the composition hands every pass) and the options its verb
reads from the settings; each says which NOTIFY channel brings it work. The done sweep runs
in the loop once a day at `EVENT_DONE_SWEEP_AT` (UTC) and in `scheduler run-once --sweep`;
the dispatcher only with `EVENT_TRIGGER_DISPATCH=true`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from events_svc.capabilities import CapabilityCodec
from events_svc.db import Pool
from events_svc.egress import EgressGuard
from events_svc.links import AttendeeLinks
from events_svc.loops.passes import Entry, Pass, Ran, counts_of
from events_svc.observability import Load, Metrics
from events_svc.ports import Ports
from events_svc.settings import Settings
from events_svc.verbs import jobs
from events_svc.verbs.attendance import ImportOptions, next_import_due, run_import_pass
from events_svc.verbs.dispatch import WAKE_CHANNEL as DISPATCH_CHANNEL
from events_svc.verbs.dispatch import next_dispatch_due, run_dispatch_pass
from events_svc.verbs.events import sweep_done_events
from events_svc.verbs.leads import WAKE_CHANNEL as LEAD_CHANNEL
from events_svc.verbs.leads import LeadOptions, next_lead_due, run_lead_pass
from events_svc.verbs.mail import CHANNEL as MAIL_CHANNEL
from events_svc.verbs.mail import PassOptions, next_due, run_mail_pass
from events_svc.verbs.operations import OperationOptions, next_operation_due, run_operation_pass
from events_svc.verbs.waitlist import WAKE_CHANNEL as WAITLIST_CHANNEL
from events_svc.verbs.waitlist import OfferOptions, next_offer_due, run_offer_pass

log = logging.getLogger("events_svc.loops")


@dataclass
class Services:
    """What the composition hands its passes: the pool, the host's ports, the settings,
    the clock, and the process's metrics, request load and egress guard."""

    pool: Callable[[], Pool]
    ports: Ports
    settings: Settings
    clock: Callable[[], datetime]
    metrics: Metrics | None = None
    load: Load | None = None
    egress: EgressGuard | None = None


def attendee_links(settings: Settings) -> AttendeeLinks:
    """The links mail templates carry, as this deployment can mint them."""
    codec = CapabilityCodec(settings.capability_secrets)
    return AttendeeLinks(codec, settings.public_base_url, settings.ics_ttl_s)


def pass_options(settings: Settings) -> PassOptions:
    """How the mail and dispatch passes work: batch, cap, fallback sender, links."""
    return PassOptions(
        batch=settings.mail_batch,
        cap=settings.mail_cron_limit,
        default_sender=settings.mail_sender,
        links=attendee_links(settings),
    )


def offer_options(settings: Settings) -> OfferOptions:
    """How waiting-list offers are made (the pass's, and an operator's out of turn)."""
    links = attendee_links(settings)
    return OfferOptions(
        links=links, waitlist_links=links.waitlist, default_sender=settings.mail_sender
    )


def next_sweep(now: datetime, at: str) -> datetime:
    """The next daily sweep instant (UTC) strictly after `now`."""
    hh, mm = (int(x) for x in at.split(":"))
    today = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    return today if today > now else today + timedelta(days=1)


class _Scheduled(Pass):
    def __init__(self, services: Services) -> None:
        super().__init__()
        self.services = services
        self.floor_s = float(services.settings.scheduler_floor_s)

    def pool(self) -> Pool:
        return self.services.pool()


class OffersPass(_Scheduled):
    """Waiting-list offers made in queue order, expired offers released, the lists of
    events that take no one closed; an event whose offers fail backs off on its own."""

    name = "offers"
    wakes = (WAITLIST_CHANNEL,)

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        s = self.services
        summary = await run_offer_pass(
            self.pool(), s.ports, offer_options(s.settings), now, stopping=stopping
        )
        if s.metrics is not None:
            s.metrics.waitlist_offers.labels("offered").inc(summary.offered)
            s.metrics.waitlist_offers.labels("expired").inc(summary.expired)
        return Ran(counts_of(summary), summary.more, summary.progressed, summary=summary)

    async def next_due(self, now: datetime) -> datetime | None:
        return await next_offer_due(self.pool(), now)


class MailPass(_Scheduled):
    """Due scheduler lines written to the outbox, each mail once."""

    name = "mail"
    wakes = (MAIL_CHANNEL,)

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        s = self.services
        summary = await run_mail_pass(
            self.pool(), s.ports, pass_options(s.settings), now, stopping=stopping
        )
        if s.metrics is not None:
            s.metrics.observe_pass(summary)
        return Ran(counts_of(summary), summary.more, summary.progressed, summary=summary)

    async def next_due(self, now: datetime) -> datetime | None:
        return await next_due(self.pool(), now)


class LeadsPass(_Scheduled):
    """Lead requests handed to the lead sink; a refused or silent sink parks each request
    with its back-off."""

    name = "leads"
    wakes = (LEAD_CHANNEL,)

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        s = self.services
        options = LeadOptions.from_settings(s.settings)
        summary = await run_lead_pass(
            self.pool(), s.ports.lead_sink, options, now, stopping=stopping
        )
        return Ran(counts_of(summary), summary.more, summary.requests > 0, summary=summary)

    async def next_due(self, now: datetime) -> datetime | None:
        return await next_lead_due(self.pool(), now)


class ImportsPass(_Scheduled):
    """Attendance import batches; a failing batch backs its own job off."""

    name = "imports"
    wakes = (jobs.WAKE_CHANNEL,)

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        options = ImportOptions.from_settings(self.services.settings)
        summary = await run_import_pass(self.pool(), options, now, stopping=stopping)
        return Ran(counts_of(summary), summary.more, summary.batches > 0, summary=summary)

    async def next_due(self, now: datetime) -> datetime | None:
        return await next_import_due(self.pool(), now)


class OperationsPass(_Scheduled):
    """Event operation batches: triggers written, never a message."""

    name = "operations"
    wakes = (jobs.WAKE_CHANNEL,)

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        options = OperationOptions.from_settings(self.services.settings)
        summary = await run_operation_pass(self.pool(), options, now, stopping=stopping)
        return Ran(counts_of(summary), summary.more, summary.batches > 0, summary=summary)

    async def next_due(self, now: datetime) -> datetime | None:
        return await next_operation_due(self.pool(), now)


class DispatchPass(_Scheduled):
    """The optional dispatcher: triggers into mail (`EVENT_TRIGGER_DISPATCH=true`)."""

    name = "dispatch"
    wakes = (DISPATCH_CHANNEL,)

    def skip(self, entry: Entry) -> str | None:
        return None if self.services.settings.trigger_dispatch else "disabled"

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        s = self.services
        summary = await run_dispatch_pass(
            self.pool(), s.ports, pass_options(s.settings), now, stopping=stopping
        )
        if s.metrics is not None:
            s.metrics.mails.inc(summary.sent)
            for kind, n in summary.failures.items():
                s.metrics.failures.labels(kind).inc(n)
        return Ran(counts_of(summary), summary.more, summary.batches > 0, summary=summary)

    async def next_due(self, now: datetime) -> datetime | None:
        return await next_dispatch_due(self.pool(), now)


class SweepPass(_Scheduled):
    """The done sweep: events whose end has passed moved to their done stage. In the loop
    once a day at `EVENT_DONE_SWEEP_AT` (UTC); elsewhere only when asked (`--sweep`)."""

    name = "sweep"

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self.sweep_at = next_sweep(services.clock(), services.settings.done_sweep_at)

    def skip(self, entry: Entry) -> str | None:
        return None if entry.kind == "loop" or entry.sweep else "not_due"

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        if entry.kind == "loop" and now < self.sweep_at:
            return Ran({})  # not its time yet: the lane sleeps until it is
        moved = await sweep_done_events(self.pool(), now)
        log.info("done sweep moved %d event(s)", moved)
        if entry.kind == "loop":
            self.sweep_at = next_sweep(now, self.services.settings.done_sweep_at)
        return Ran({"events_marked_done": moved}, progressed=True)

    async def next_due(self, now: datetime) -> datetime | None:
        return self.sweep_at
