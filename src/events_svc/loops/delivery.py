"""The outbox's delivery pass (the drainer): sends what the standalone outbox holds, run by
the loop (and by hand with `events-svc outbox drain --once`).

A batch: claim due rows from the one leased queue (`verbs.delivery.claim_due`: one short
transaction, `SKIP LOCKED`, an operator's retried messages first), send them outside any
transaction through the composed transports (SMTP, the sms gateway), concurrently within
each transport's own session limit, at most `PER_DOMAIN` at once per recipient domain and
at most `EVENTS_SMTP_RATE` mails a second, then record every answer in one statement onto
the rows the claim still holds (`record`, the rule in `outcome_of`). When a transport says
its relay is down (refused, dropped, TLS or AUTH refused, silent), the batch's other
messages of that channel are not tried: they take the relay's failure without an attempt
counted, and the channel pauses in this process (`backoff.CHANNEL_PAUSE`: 1 min, doubling
to 1 h while the relay stays down; the first message sent ends it), so a broken relay
costs one connection attempt per pause, not one per message or per batch. An operator's
retry (`verbs.delivery.retried`, heard by every process) ends the pause of the message's
channel and puts that message first in the next claim: it is tried within seconds, and if
the relay is still down it fails again and the pause resumes. A batch stops starting sends
once half its lease has passed, or when a stop is asked (the pass's budget, a shutdown):
what it did not try is given back as it was, so a slow relay never lets a lease run out
under messages still being sent, and a stop never waits for a whole batch of sends. When
the database is away as the answers are recorded (a failover mid-batch), the answers are
kept and recorded again (`backoff.ANSWERS_KEPT`) until the claim's lease runs out: what
was sent is not sent again, and the rows do not wait for the lease; past the lease (or at
a stop) they are given up, and the lease puts them back.

Limits are per process: `EVENTS_SMTP_RATE` mails a second and `PER_DOMAIN` messages at
once per recipient domain (N processes send at most N times as much).

Its log lines (a failed attempt, a pause, a resume) name the channel, the transport's
`host` (host and port: never a URL's path or query, never a credential) and the outcome;
never the recipient, the body or the relay's reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from events_svc.backoff import ANSWERS_KEPT, CHANNEL_PAUSE
from events_svc.db import Pool
from events_svc.diagnostics import error_fields
from events_svc.errors import DatabaseUnavailable
from events_svc.loops.passes import Entry, Pass, Ran, counts_of
from events_svc.observability import Metrics
from events_svc.ports import DeliveryErrorKind, DeliveryFailure, Transport
from events_svc.settings import Settings
from events_svc.verbs import delivery
from events_svc.verbs.delivery import Claim, Claimed, Outcome

log = logging.getLogger("events_svc.delivery")

PER_DOMAIN = 2  # messages in flight at once to one recipient domain
FLOOR_S = 300.0  # the longest sleep with nothing due (a safety net under the wake-ups)


@dataclass(frozen=True)
class DrainOptions:
    batch: int = 100
    lease: timedelta = timedelta(minutes=5)
    rate: float = 20.0  # mails per second; 0: no limit

    @classmethod
    def from_settings(cls, settings: Settings) -> DrainOptions:
        return cls(
            batch=settings.delivery_batch,
            lease=timedelta(seconds=settings.delivery_lease_s),
            rate=float(settings.smtp_rate),
        )


@dataclass
class DrainSummary:
    """What drains did: messages claimed, and how their attempts ended."""

    claimed: int = 0
    sent: int = 0
    retrying: int = 0
    failed: int = 0
    released: int = 0  # claimed but not tried in the batch's time: given back as they were
    recorded: int = 0
    batches: int = 0
    more: bool = False  # the last batch was full, or gave messages back: more is due

    def add(self, other: DrainSummary) -> None:
        for name in ("claimed", "sent", "retrying", "failed", "released", "recorded", "batches"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.more = other.more

    def as_dict(self) -> dict[str, Any]:
        return counts_of(self)


class Pacer:
    """At most `rate` messages a second, spread evenly (0: no limit)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.next = 0.0

    async def take(self) -> None:
        if not self.interval:
            return
        now = time.monotonic()
        at = max(now, self.next)
        self.next = at + self.interval
        if at > now:
            await asyncio.sleep(at - now)


def _domain(recipient: str) -> str:
    return recipient.rpartition("@")[2].strip().lower()


@dataclass
class _Batch:
    """The state one batch shares between its sends."""

    sessions: dict[str, asyncio.Semaphore]
    deadline: float  # time.monotonic() after which no new send starts
    stopping: Callable[[], bool]  # a stop asked: no new send starts either
    down: dict[str, DeliveryFailure] = field(default_factory=dict)
    domains: dict[str, asyncio.Semaphore] = field(default_factory=dict)
    untried: list[UUID] = field(default_factory=list)

    def slot(self, channel: str, recipient: str) -> asyncio.Semaphore | None:
        if channel != "mail":
            return None
        key = _domain(recipient)
        if key not in self.domains:
            self.domains[key] = asyncio.Semaphore(PER_DOMAIN)
        return self.domains[key]


class Drainer:
    """Claims, sends and records batches (see the module docstring)."""

    def __init__(
        self,
        pool: Callable[[], Pool],
        transports: tuple[Transport, ...],
        options: DrainOptions,
        clock: Callable[[], datetime],
        metrics: Metrics | None = None,
    ) -> None:
        self.pool, self.options, self.clock, self.metrics = pool, options, clock, metrics
        self.transports = {t.channel: t for t in transports}
        self.channels = sorted(self.transports)
        self.pacer = Pacer(options.rate)
        self.paused: dict[str, tuple[datetime, int]] = {}  # channel: (until, times in a row)
        self.retried: set[UUID] = set()  # an operator's retries, claimed first

    def active_channels(self, now: datetime) -> list[str]:
        """The channels not paused for a relay that is down."""
        return [c for c in self.channels if c not in self.paused or self.paused[c][0] <= now]

    def resume(self, channel: str, message_id: UUID) -> bool:
        """An operator retried `message_id`: its channel's pause ends now (the streak is
        kept: if the relay is still down the next pause is longer) and the message is
        claimed first. False when this process does not send that channel."""
        if channel not in self.transports:
            return False
        if channel in self.paused:
            until, streak = self.paused[channel]
            self.paused[channel] = (min(until, self.clock()), streak)
        self.retried.add(message_id)
        return True

    def _host(self, channel: str) -> str:
        """Where a channel sends, as its log lines name it (`host:port`); a host's own
        transport may not say."""
        host = getattr(self.transports.get(channel), "host", None)
        return host if isinstance(host, str) else "unknown"

    def _pause(self, channel: str, now: datetime) -> datetime:
        """Pause a channel whose relay is down (longer each time in a row); until when."""
        streak = self.paused[channel][1] + 1 if channel in self.paused else 1
        until = now + CHANNEL_PAUSE.delay(streak)
        self.paused[channel] = (until, streak)
        fields = {
            "channel": channel,
            "host": self._host(channel),
            "until": until.isoformat(),
            "times": streak,
        }
        log.warning("outbox channel paused: its relay is down", extra={"fields": fields})
        return until

    async def _send(self, batch: _Batch, row: Claimed) -> tuple[UUID, Outcome | None]:
        """Send one message; its outcome, or None when it was not tried in time."""
        message = row.message
        channel = message.channel
        slot = batch.slot(channel, message.recipient)
        async with slot if slot is not None else contextlib.nullcontext(), batch.sessions[channel]:
            down = batch.down.get(channel)  # looked at once a session is free
            if down is not None:  # not tried: the relay's failure, until it resumes
                now = self.clock()
                until = self.paused[channel][0] if channel in self.paused else now
                held = delivery.outcome_of(
                    down, row.created_at, row.attempts, now, tried=False, wait=until - now
                )
                return message.id, held
            if time.monotonic() >= batch.deadline or batch.stopping():
                return message.id, None
            if channel == "mail":
                await self.pacer.take()
            failure = await self._attempt(channel, row)
        now = self.clock()
        if failure is None:
            if channel in self.paused:
                fields = {"channel": channel, "host": self._host(channel)}
                log.info("outbox channel resumed", extra={"fields": fields})
            self.paused.pop(channel, None)
        elif failure.relay_down and channel not in batch.down:
            batch.down[channel] = failure
            self._pause(channel, now)
        outcome = delivery.outcome_of(failure, row.created_at, row.attempts + 1, now)
        self._observe(row, channel, failure, outcome)
        return message.id, outcome

    async def _attempt(self, channel: str, row: Claimed) -> DeliveryFailure | None:
        transport = self.transports[channel]
        try:
            return await transport.send(row.message)
        except Exception as exc:  # a transport bug: this message waits and retries
            fields = {
                **error_fields(exc),  # its types and frames, never its message
                "outbox_id": str(row.message.id),
                "channel": channel,
                "host": self._host(channel),
            }
            log.error("outbox transport raised", extra={"fields": fields})  # no traceback
            detail = f"the transport raised {type(exc).__name__}"
            return DeliveryFailure(DeliveryErrorKind.TEMPORARY, None, detail)

    def _observe(
        self, row: Claimed, channel: str, failure: DeliveryFailure | None, outcome: Outcome
    ) -> None:
        result = "sent" if failure is None else failure.kind.value
        if self.metrics is not None:
            self.metrics.delivery_attempts.labels(channel, result).inc()
        if failure is not None:
            fields = {
                "outbox_id": str(row.message.id),
                "message_id": row.message.message_id,
                "channel": channel,
                "host": self._host(channel),  # never the URL: its query may hold a key
                "error_kind": failure.kind.value,
                "code": failure.code,
                "attempts": row.attempts + 1,
                "delivery_state": outcome.state,
            }
            log.warning("outbox delivery attempt failed", extra={"fields": fields})

    async def _record(
        self, claim: Claim, answers: list[tuple[UUID, Outcome]], stopping: Callable[[], bool]
    ) -> int:
        """Record a batch's answers; while the database is unavailable, keep them and try
        again (backing off) until the claim's lease runs out or a stop is asked."""
        tries = 0
        while True:
            try:
                return await delivery.record(self.pool(), claim, answers)
            except DatabaseUnavailable as exc:
                tries += 1
                wait = ANSWERS_KEPT.seconds(tries)
                if stopping() or self.clock() + timedelta(seconds=wait) >= claim.lease.until:
                    raise
                level = logging.WARNING if tries == 1 else logging.DEBUG
                fields = {**error_fields(exc), "answers": len(answers), "retry_in_s": wait}
                log.log(level, "outbox answers kept", extra={"fields": fields})
                await asyncio.sleep(wait)

    async def drain_batch(self, stopping: Callable[[], bool] = lambda: False) -> DrainSummary:
        """Claim one batch, send it, record the answers."""
        summary = DrainSummary()
        now = self.clock()
        channels = self.active_channels(now)
        if not channels:
            return summary
        lease = self.options.lease
        first = sorted(self.retried)
        claim = await delivery.claim_due(
            self.pool(), channels, now, self.options.batch, lease, first
        )
        # the retries were asked of every process: what this claim did not take, another
        # process took (or it is not due); none is kept for later. A retry heard while the
        # claim ran is kept for the next one.
        self.retried.difference_update(first)
        if not claim.rows:
            return summary
        sessions = {c: asyncio.Semaphore(t.sessions) for c, t in self.transports.items()}
        batch = _Batch(sessions, time.monotonic() + lease.total_seconds() / 2, stopping)
        sent = await asyncio.gather(*(self._send(batch, row) for row in claim.rows))
        answers = [(i, outcome) for i, outcome in sent if outcome is not None]
        untried = [i for i, outcome in sent if outcome is None]
        try:
            summary.recorded = await self._record(claim, answers, stopping)
        finally:  # even when the answers could not be recorded: the untried go back now
            if untried:
                with contextlib.suppress(Exception):  # else their lease puts them back
                    await delivery.give_back(self.pool(), claim, untried, self.clock())
        summary.claimed, summary.batches, summary.released = len(claim.rows), 1, len(untried)
        for _, outcome in answers:
            # sent, retrying or failed (a message not tried for a relay that is down counts
            # where its outcome puts it: retrying)
            setattr(summary, outcome.state, getattr(summary, outcome.state) + 1)
        # a full batch, or messages given back untried: more is due now
        summary.more = len(claim.rows) >= self.options.batch or bool(untried)
        return summary

    async def drain(self, stopping: Callable[[], bool] = lambda: False) -> DrainSummary:
        """Batches until one comes back short with nothing given back (or a stop is
        asked)."""
        total = DrainSummary()
        while not stopping():
            summary = await self.drain_batch(stopping)
            total.add(summary)
            if not summary.more:
                break
        else:
            total.more = True
        return total

    async def next_due(self) -> datetime | None:
        """When the earliest unsent message of an active channel is due, or a paused
        channel resumes (None: nothing is waiting)."""
        now = self.clock()
        active = self.active_channels(now)
        due = await delivery.next_delivery_due(self.pool(), active) if active else None
        resumes = [until for until, _ in self.paused.values() if until > now]
        found = [d for d in (due, *resumes) if d is not None]
        return min(found) if found else None

    async def close(self) -> None:
        """Close the transports it was given (a drainer made by hand: `outbox drain --once`,
        a probe); the app's are closed with its ports."""
        for transport in self.transports.values():
            await transport.close()


class DeliveryPass(Pass):
    """One outbox channel's delivery (`mail` or `sms`) as a channel of the loop, with a
    drainer of its own: a relay or gateway that is slow or silent holds only its own
    channel's lane, never the other's. Switched off where the channel has no transport
    (its messages are held in the outbox)."""

    wakes = (delivery.WAKE_CHANNEL,)
    floor_s = FLOOR_S

    def __init__(self, channel: str, drainer: Drainer) -> None:
        super().__init__()
        self.name = f"delivery_{channel}"
        self.drainer = drainer

    def skip(self, entry: Entry) -> str | None:
        return None if self.drainer.transports else "disabled"

    def heard(self, channel: str, payload: str) -> bool:
        retry = delivery.retry_of(payload)
        return retry is not None and self.drainer.resume(*retry)

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        summary = await self.drainer.drain(stopping)
        return Ran(counts_of(summary), summary.more, summary.claimed > 0, summary=summary)

    async def next_due(self, now: datetime) -> datetime | None:
        return await self.drainer.next_due()
