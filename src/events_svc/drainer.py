"""The outbox drainer: sends what the standalone outbox holds, started by the app lifespan
beside the scheduler loop (and run by hand with `events-svc outbox drain --once`).

A batch: claim due rows with a lease (`verbs.delivery.claim_due`: one short transaction,
`SKIP LOCKED`), send them outside any transaction through the composed transports
(SMTP, the sms gateway), concurrently within each transport's own session limit, at
most `PER_DOMAIN` at once per recipient domain and at most `EVENTS_SMTP_RATE` mails a
second, then record every answer in one statement (`record`, the rule in `settle`).
When a transport says its relay is down (refused, dropped, TLS or AUTH refused, silent),
the batch's other messages of that channel are not tried: they take the relay's failure
without an attempt counted, and the channel pauses in this process (1 min, doubling to
1 h while the relay stays down; the first message sent clears it), so a broken relay
costs one connection attempt per pause, not one per message or per batch. A batch stops
starting sends once half its lease has passed: what it did not try goes back as it was,
so a slow relay never lets a lease run out under messages still being sent. When the
database is away as the answers are recorded (a failover mid-batch), the answers are kept
and recorded again with a back-off (`RECORD_FIRST_S` doubling to `RECORD_MAX_S`) until the
claim's lease runs out: what was sent is not sent again, and the rows do not wait for the
lease; past the lease (or at a stop) they are given up, and the lease puts them back.

Limits are per process: `EVENTS_SMTP_RATE` mails a second and `PER_DOMAIN` messages at
once per recipient domain (N processes send at most N times as much).

It never spins. It drains while batches come back full, then sleeps until the earliest
unsent message is due (a retry's back-off, a lease that runs out, a paused channel's
resumption) or `FLOOR_S`, and wakes early when a message is written (`NOTIFY
event_outbox_due`, listened by the scheduler loop's connection). A failing pass (the
database away) waits longer each time.
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

from events_svc.db import Pool
from events_svc.diagnostics import doubling, error_fields
from events_svc.errors import DatabaseUnavailable
from events_svc.observability import Metrics
from events_svc.ports import DeliveryErrorKind, DeliveryFailure, Transport
from events_svc.settings import Settings
from events_svc.verbs.delivery import (
    Claim,
    Claimed,
    Settled,
    claim_due,
    give_back,
    next_delivery_due,
    record,
    settle,
)

log = logging.getLogger("events_svc.delivery")

WAKE_CHANNEL = "event_outbox_due"
PER_DOMAIN = 2  # messages in flight at once to one recipient domain
FLOOR_S = 300.0  # the longest sleep with nothing due (a safety net under the wake-ups)
FAILED_FIRST_S, FAILED_MAX_S = 5.0, 300.0  # a failing pass: 5 s doubling to 5 min
BLOCKED_FIRST_S, BLOCKED_MAX_S = 0.2, 10.0  # due rows another drainer is claiming
RECORD_FIRST_S, RECORD_MAX_S = 0.5, 10.0  # a batch's answers kept while the database is away
PAUSE_FIRST_S, PAUSE_MAX_S = 60.0, 3600.0  # a channel whose relay is down: 1 min to 1 h


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
    more: bool = False  # the last batch was full: more may be due

    def add(self, other: DrainSummary) -> None:
        for name in ("claimed", "sent", "retrying", "failed", "released", "recorded", "batches"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.more = other.more

    def as_dict(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed,
            "sent": self.sent,
            "retrying": self.retrying,
            "failed": self.failed,
            "released": self.released,
            "recorded": self.recorded,
            "batches": self.batches,
        }


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
    down: dict[str, DeliveryFailure] = field(default_factory=dict)
    domains: dict[str, asyncio.Semaphore] = field(default_factory=dict)

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

    def active_channels(self, now: datetime) -> list[str]:
        """The channels not paused for a relay that is down."""
        return [c for c in self.channels if c not in self.paused or self.paused[c][0] <= now]

    def _pause(self, channel: str, now: datetime) -> datetime:
        """Pause a channel whose relay is down (longer each time in a row); until when."""
        streak = self.paused[channel][1] + 1 if channel in self.paused else 1
        until = now + timedelta(seconds=doubling(PAUSE_FIRST_S, PAUSE_MAX_S, streak))
        self.paused[channel] = (until, streak)
        log.warning(
            "outbox channel paused: its relay is down",
            extra={"fields": {"channel": channel, "until": until.isoformat(), "times": streak}},
        )
        return until

    async def _send(self, batch: _Batch, row: Claimed) -> tuple[UUID, Settled]:
        message = row.message
        channel = message.channel
        slot = batch.slot(channel, message.recipient)
        async with slot if slot is not None else contextlib.nullcontext(), batch.sessions[channel]:
            down = batch.down.get(channel)  # looked at once a session is free
            if down is not None:  # not tried: the relay's failure, until it resumes
                now = self.clock()
                until = self.paused[channel][0] if channel in self.paused else now
                held = settle(
                    down, row.created_at, row.attempts, now, tried=False, wait=until - now
                )
                return message.id, held
            if time.monotonic() >= batch.deadline:
                return message.id, give_back(row, self.clock())
            if channel == "mail":
                await self.pacer.take()
            failure = await self._attempt(channel, row)
        now = self.clock()
        if failure is None:
            self.paused.pop(channel, None)
        elif failure.relay_down and channel not in batch.down:
            batch.down[channel] = failure
            self._pause(channel, now)
        settled = settle(failure, row.created_at, row.attempts + 1, now)
        self._observe(row, channel, failure, settled)
        return message.id, settled

    async def _attempt(self, channel: str, row: Claimed) -> DeliveryFailure | None:
        try:
            return await self.transports[channel].send(row.message)
        except Exception as exc:  # a transport bug: this message waits and retries
            fields = {**error_fields(exc), "outbox_id": str(row.message.id), "channel": channel}
            log.error("outbox transport raised", extra={"fields": fields})  # no traceback
            detail = f"the transport raised {type(exc).__name__}"
            return DeliveryFailure(DeliveryErrorKind.TEMPORARY, None, detail)

    def _observe(
        self, row: Claimed, channel: str, failure: DeliveryFailure | None, settled: Settled
    ) -> None:
        result = "sent" if failure is None else failure.kind.value
        if self.metrics is not None:
            self.metrics.delivery_attempts.labels(channel, result).inc()
        if failure is not None:
            fields = {
                "outbox_id": str(row.message.id),
                "message_id": row.message.message_id,
                "channel": channel,
                "error_kind": failure.kind.value,
                "code": failure.code,
                "attempts": row.attempts + 1,
                "delivery_state": settled.state,
            }
            log.warning("outbox delivery attempt failed", extra={"fields": fields})

    async def _record(
        self, claim: Claim, answers: list[tuple[UUID, Settled]], stopping: Callable[[], bool]
    ) -> int:
        """Record a batch's answers; while the database is unavailable, keep them and try
        again (backing off) until the claim's lease runs out or a stop is asked."""
        tries = 0
        while True:
            try:
                return await record(self.pool(), claim, answers)
            except DatabaseUnavailable as exc:
                tries += 1
                wait = doubling(RECORD_FIRST_S, RECORD_MAX_S, tries)
                if stopping() or self.clock() + timedelta(seconds=wait) >= claim.lease_until:
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
        claim: Claim = await claim_due(self.pool(), channels, now, self.options.batch, lease)
        if not claim.rows:
            return summary
        sessions = {c: asyncio.Semaphore(t.sessions) for c, t in self.transports.items()}
        batch = _Batch(sessions, time.monotonic() + lease.total_seconds() / 2)
        answers = await asyncio.gather(*(self._send(batch, row) for row in claim.rows))
        summary.recorded = await self._record(claim, list(answers), stopping)
        summary.claimed, summary.batches = len(claim.rows), 1
        for _, settled in answers:
            given_back = not settled.tried and settled.error is None
            name = "released" if given_back else settled.state  # sent, retrying or failed
            setattr(summary, name, getattr(summary, name) + 1)
        summary.more = len(claim.rows) >= self.options.batch
        return summary

    async def drain(self, stopping: Callable[[], bool] = lambda: False) -> DrainSummary:
        """Batches until one comes back short (or a stop is asked)."""
        total = DrainSummary()
        while not stopping():
            summary = await self.drain_batch(stopping)
            total.add(summary)
            if not summary.more:
                break
        return total

    async def next_due(self) -> datetime | None:
        """When the earliest unsent message of an active channel is due, or a paused
        channel resumes (None: nothing is waiting)."""
        now = self.clock()
        active = self.active_channels(now)
        due = await next_delivery_due(self.pool(), active) if active else None
        resumes = [until for until, _ in self.paused.values() if until > now]
        found = [d for d in (due, *resumes) if d is not None]
        return min(found) if found else None

    async def close(self) -> None:
        for transport in self.transports.values():
            await transport.close()


class DeliveryLoop:
    """Runs the drainer until stopped; `notify` wakes it (a written message)."""

    def __init__(self, drainer: Drainer) -> None:
        self.drainer = drainer
        self.wake = asyncio.Event()
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.failing = 0
        self.blocked = 0
        self.passes = 0

    def notify(self, *_: Any) -> None:
        self.wake.set()

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="events-delivery")

    async def stop(self) -> None:
        """Finish the batch in hand (its answers recorded), then close the sessions."""
        self.stopping.set()
        self.wake.set()
        if self.task is not None:
            await self.task
        await self.drainer.close()

    async def tick(self) -> float:
        """One drain, then the seconds to sleep before the next one (never zero)."""
        drainer = self.drainer
        try:
            summary = await drainer.drain(self.stopping.is_set)
            due = await drainer.next_due()
        except Exception as exc:
            self.failing += 1
            wait = doubling(FAILED_FIRST_S, FAILED_MAX_S, self.failing)
            level = logging.ERROR if self.failing == 1 else logging.DEBUG
            fields = {**error_fields(exc), "failed_passes": self.failing, "retry_in_s": wait}
            log.log(level, "outbox drain failed", extra={"fields": fields})
            return wait
        self.passes += 1
        if self.failing:
            log.info("outbox drain recovered", extra={"fields": {"failed": self.failing}})
            self.failing = 0
        if due is None:
            self.blocked = 0
            return FLOOR_S
        until = (due - drainer.clock()).total_seconds()
        if until > 0:
            self.blocked = 0
            return min(until, FLOOR_S)
        if summary.claimed == 0:  # due rows that another drainer's claim holds right now
            self.blocked += 1
            return doubling(BLOCKED_FIRST_S, BLOCKED_MAX_S, self.blocked)
        self.blocked = 0
        return BLOCKED_FIRST_S  # made progress; what is due now is taken next

    async def _run(self) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            delay = await self.tick()
            # after a failed pass only a stop interrupts the wait
            event = self.stopping if self.failing else self.wake
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=delay)
