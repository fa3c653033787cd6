"""The one composition of the passes, and what a run of it answers.

`compose_passes` builds every pass in its one order: `offers`, `mail`, `leads`, `imports`,
`operations`, `dispatch`, `sweep` (`PASSES`); beside them the outbound channels,
`delivery_mail` and `delivery_sms` (the outbox's two channels, each with a drainer of its
own) and `webhooks` (`CHANNELS`). The loop runs each of
both in its lane. `POST /admin/schedulers/run`, `events-svc scheduler run-once` and the
host surface run the passes once (`Composition.run`), so the four entry points cannot
drift: each lists every pass, in this order, as it ran or why it did not (`disabled`,
`not_due`). The channels talk to partners, so they are not run inside a request: the loop
sends, and `events-svc outbox drain --once` sends the outbox by hand. `run_view` is the
route's and the surface's answer: the mail pass's summary keys of before, the offers'
counts, `passes` and `more`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from events_svc.adapters.webhook_sender import WebhookSender
from events_svc.egress import EgressGuard
from events_svc.loops.delivery import DeliveryPass, Drainer, DrainOptions
from events_svc.loops.passes import Entry, Pass, PassReport, run_passes
from events_svc.loops.scheduled import (
    DispatchPass,
    ImportsPass,
    LeadsPass,
    MailPass,
    OffersPass,
    OperationsPass,
    Services,
    SweepPass,
)
from events_svc.loops.webhooks import WebhookOptions, WebhookPass

PASSES = ("offers", "mail", "leads", "imports", "operations", "dispatch", "sweep")
CHANNELS = ("delivery_mail", "delivery_sms", "webhooks")
OUTBOX_CHANNELS = ("mail", "sms")
# the run summary's keys of before, read off the mail pass (and the offers)
_MAIL_KEYS = ("schedulers", "sent", "dropped", "failed", "pruned", "recipients_failed")


class Composition:
    """The passes and channels of one process (or of one one-shot run), in their order;
    `close` lets their work in hand end and releases what they made (the webhooks'
    client). The ports' own connections (relay sessions, the lead sink's client) belong to
    whoever made the ports (`ports.close_ports`)."""

    def __init__(
        self, services: Services, passes: Sequence[Pass], channels: Sequence[Pass]
    ) -> None:
        self.services = services
        self.passes = tuple(passes)
        self.channels = tuple(channels)
        self.by_name = {p.name: p for p in (*self.passes, *self.channels)}

    @property
    def lanes(self) -> tuple[Pass, ...]:
        """What the loop runs: every pass, then every channel."""
        return (*self.passes, *self.channels)

    async def run(
        self, entry: Entry, stopping: Callable[[], bool] = lambda: False
    ) -> list[PassReport]:
        """Every pass once, in order, for a one-shot entry point."""
        return await run_passes(self.passes, entry, self.services.clock, stopping)

    async def close(self) -> None:
        for job in self.lanes:
            await job.close()


def compose_passes(services: Services) -> Composition:
    """Every pass, in the one order (see the module docstring)."""
    s = services
    guard = s.egress or EgressGuard(allow_private=s.settings.webhook_allow_private)
    options = DrainOptions.from_settings(s.settings)
    drainers = [
        DeliveryPass(
            channel,
            Drainer(
                s.pool,
                tuple(t for t in s.ports.transports if t.channel == channel),
                options,
                s.clock,
                s.metrics,
            ),
        )
        for channel in OUTBOX_CHANNELS
    ]
    hooks = WebhookPass(
        s.pool,
        WebhookSender(guard),
        WebhookOptions.from_settings(s.settings),
        s.clock,
        s.metrics,
        s.load,
    )
    passes: list[Pass] = [
        OffersPass(s),
        MailPass(s),
        LeadsPass(s),
        ImportsPass(s),
        OperationsPass(s),
        DispatchPass(s),
        SweepPass(s),
    ]
    channels: list[Pass] = [*drainers, hooks]
    assert tuple(p.name for p in passes) == PASSES
    assert tuple(c.name for c in channels) == CHANNELS
    return Composition(s, passes, channels)


def run_view(reports: list[PassReport]) -> dict[str, Any]:
    """A run's answer: the summary keys of before (the mail pass's, the offers' counts,
    `failures`), `passes` (every pass, in order) and `more` (a pass stopped with work
    left)."""
    by_name = {r.name: r for r in reports}
    mail = by_name.get("mail")
    offers = by_name.get("offers")
    counts = mail.counts if mail is not None else {}
    summary = mail.ran.summary if mail is not None and mail.ran is not None else None
    view: dict[str, Any] = {key: int(counts.get(key, 0)) for key in _MAIL_KEYS}
    view["failures"] = dict(summary.failures) if summary is not None else {}
    made = offers.counts if offers is not None else {}
    view["offers_made"] = int(made.get("offered", 0))
    view["offers_expired"] = int(made.get("expired", 0))
    view["offers_closed"] = int(made.get("closed", 0))
    view["more"] = any(r.more for r in reports)
    view["passes"] = [r.view() for r in reports]
    return view
