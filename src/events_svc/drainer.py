"""The outbox drainer: sends what the standalone outbox holds, started by the app lifespan
beside the scheduler loop (and run by hand with `events-svc outbox drain --once`).

A batch: claim due rows with a lease (`verbs.delivery.claim_due`: one short transaction,
`SKIP LOCKED`), send them outside any transaction through the composed transports
(SMTP, the sms gateway), concurrently within each transport's own session limit, at
most `PER_DOMAIN` at once per recipient domain and at most `EVENTS_SMTP_RATE` mails a
second, then record every answer in one statement (`record`, the rule in `settle`).
When a transport says its relay is down (refused, dropped, TLS or AUTH refused, silent),
the batch's other messages of that channel are not tried: they take the same failure and
back off with it, so a broken relay costs one attempt per batch, not one per message.

It never spins. It drains while batches come back full, then sleeps until the earliest
unsent message is due (a retry's back-off, a lease that runs out) or `FLOOR_S`, and wakes
early when a message is written (`NOTIFY event_outbox_due`, listened by the scheduler
loop's connection). A failing pass (the database away) waits longer each time.
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
from events_svc.observability import Metrics
from events_svc.ports import DeliveryErrorKind, DeliveryFailure, Transport
from events_svc.settings import Settings
from events_svc.verbs.delivery import (
    Claim,
    Claimed,
    Settled,
    claim_due,
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
    recorded: int = 0
    batches: int = 0
    more: bool = False  # the last batch was full: more may be due

    def add(self, other: DrainSummary) -> None:
        for name in ("claimed", "sent", "retrying", "failed", "recorded", "batches"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.more = other.more

    def as_dict(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed,
            "sent": self.sent,
            "retrying": self.retrying,
            "failed": self.failed,
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

    async def _send(self, batch: _Batch, row: Claimed) -> tuple[UUID, Settled]:
        message = row.message
        channel = message.channel
        slot = batch.slot(channel, message.recipient)
        async with slot if slot is not None else contextlib.nullcontext(), batch.sessions[channel]:
            failure = batch.down.get(channel)  # looked at once a session is free
            attempted = failure is None
            if failure is None:
                if channel == "mail":
                    await self.pacer.take()
                failure = await self._attempt(message.id, channel, row)
                if failure is not None and failure.relay_down:
                    batch.down.setdefault(channel, failure)
        settled = settle(failure, row.created_at, row.attempts, self.clock())
        if attempted:
            self._observe(row, channel, failure, settled)
        return message.id, settled

    async def _attempt(self, row_id: UUID, channel: str, row: Claimed) -> DeliveryFailure | None:
        try:
            return await self.transports[channel].send(row.message)
        except Exception as exc:  # a transport bug: the message waits and retries
            log.exception("outbox transport raised", extra={"fields": error_fields(exc)})
            detail = f"the transport raised {type(exc).__name__}"
            return DeliveryFailure(DeliveryErrorKind.CONNECTION, None, detail, relay_down=True)

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
                "attempts": row.attempts,
                "delivery_state": settled.state,
            }
            log.warning("outbox delivery attempt failed", extra={"fields": fields})

    async def drain_batch(self) -> DrainSummary:
        """Claim one batch, send it, record the answers."""
        summary = DrainSummary()
        if not self.channels:
            return summary
        claim: Claim = await claim_due(
            self.pool(), self.channels, self.clock(), self.options.batch, self.options.lease
        )
        if not claim.rows:
            return summary
        batch = _Batch({c: asyncio.Semaphore(t.sessions) for c, t in self.transports.items()})
        answers = await asyncio.gather(*(self._send(batch, row) for row in claim.rows))
        summary.recorded = await record(self.pool(), claim, list(answers))
        summary.claimed, summary.batches = len(claim.rows), 1
        for _, settled in answers:
            setattr(summary, settled.state, getattr(summary, settled.state) + 1)
        summary.more = len(claim.rows) >= self.options.batch
        return summary

    async def drain(self, stopping: Callable[[], bool] = lambda: False) -> DrainSummary:
        """Batches until one comes back short (or a stop is asked)."""
        total = DrainSummary()
        while not stopping():
            summary = await self.drain_batch()
            total.add(summary)
            if not summary.more:
                break
        return total

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
            due = await next_delivery_due(drainer.pool(), drainer.channels)
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
