"""The webhook delivery loop, started by the app lifespan beside the outbox drainer.

A turn: record the answers that came back since the last turn (one statement), fan the
written facts out into messages, claim the due attempts of the active endpoints (leased,
`SKIP LOCKED`: any number of processes run it side by side; at most `PER_ENDPOINT` in
flight to one endpoint, counted across every process, so a slow receiver holds back only
its own messages), and start each as its own task; its answer wakes the loop for the
next turn.

It never spins: it sleeps until the earliest waiting attempt is due or `FLOOR_S`, and
wakes early when a fact or an attempt is written (`NOTIFY event_webhook_due`, heard on
the scheduler's LISTEN connection) or an answer comes back. Due attempts it cannot take
(another process holds their endpoint's slots) make it wait longer each time; a failing
turn (the database away) waits 5 s doubling to 5 min. A turn fans out only after a wake
(or when `FLOOR_S` passed without one: a NOTIFY lost with its connection), and a turn
while attempts are in flight reads when work is due next at most every half second
(an answer wakes the next turn anyway): a turn driven by answers is two statements, the
record and the claim.

Deliveries yield to the requests: while requests kept this process busy for
`BUSY_SHARE` of the last half second (`Load.share`), a turn fans out and claims at most
`BUSY_BATCH` and the next turn waits `BUSY_TURN_S` (16 attempts a second), so a
registration surge keeps its throughput; the backlog goes out at full speed once the
surge leaves room.

Stopping waits for the attempts in flight (each ends within its 10 s), records them,
then closes the client. A process killed mid-attempt leaves its claimed attempts leased:
they are due again when the lease runs out and are sent again with the same
`webhook-id` (at least once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from events_svc.db import Pool
from events_svc.diagnostics import doubling, error_fields
from events_svc.observability import Load, Metrics
from events_svc.settings import Settings
from events_svc.verbs.webhooks import pass_

log = logging.getLogger("events_svc.webhooks")

WAKE_CHANNEL = pass_.WAKE_CHANNEL
PER_ENDPOINT = pass_.PER_ENDPOINT
FLOOR_S = 60.0  # the longest sleep: also the fan-out without a wake (a NOTIFY lost)
FAILED_FIRST_S, FAILED_MAX_S = 5.0, 300.0
BLOCKED_FIRST_S, BLOCKED_MAX_S = 0.2, 10.0
SWEEP_EVERY_S = 600.0
DUE_FRESH_S = 0.5  # how long a turn with attempts in flight reuses the last next-due read
SWEEP_BATCH = 5000
SWEEP_AGAIN_S = 1.0  # a full sweep: the next one after this, not SWEEP_EVERY_S
BUSY_SHARE = 0.75  # requests in flight this share of the time: deliveries yield
BUSY_BATCH = 8  # facts fanned out and attempts claimed by a turn while yielding
BUSY_TURN_S = 0.5  # the least time between two turns while yielding


class Sender(Protocol):
    async def send(
        self, url: str, secrets: tuple[str, ...], webhook_id: str, body: bytes
    ) -> pass_.Answer: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class WebhookOptions:
    fan_out_batch: int = 500
    lease: timedelta = timedelta(seconds=120)
    retention: timedelta = timedelta(days=30)

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookOptions:
        return cls(
            lease=timedelta(seconds=settings.webhook_lease_s),
            retention=timedelta(days=settings.webhook_retention_days),
        )


def result_of(answer: pass_.Answer) -> str:
    """The metrics' name of an attempt's result."""
    if answer.ok:
        return "succeeded"
    if answer.status is not None:
        return f"status_{answer.status // 100}xx"
    return answer.error or "error"


class WebhookLoop:
    """Fans out, claims, sends and records (see the module docstring)."""

    def __init__(
        self,
        pool: Callable[[], Pool],
        sender: Sender,
        options: WebhookOptions,
        clock: Callable[[], datetime],
        metrics: Metrics | None = None,
        load: Load | None = None,
    ) -> None:
        self.pool, self.sender, self.options = pool, sender, options
        self.clock, self.metrics, self.load = clock, metrics, load
        self.yielding = False  # the last turn yielded to the requests
        self.answers: list[pass_.Outcome] = []
        self.flights: set[asyncio.Task[None]] = set()
        self.wake = asyncio.Event()
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.failing = 0
        self.blocked = 0
        self.swept_at = 0.0
        self.facts_due = True  # a wake was heard since the last fan-out that emptied
        self.fanned_at = 0.0
        self.due: tuple[float, datetime | None] | None = None  # (read at, next due)

    def notify(self, *_: Any) -> None:
        """A NOTIFY: facts or attempts were written somewhere."""
        self.facts_due = True
        self.due = None
        self.wake.set()

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="events-webhooks")

    async def stop(self) -> None:
        """Let the attempts in flight end, record them, close the client."""
        self.stopping.set()
        self.wake.set()
        if self.task is not None:
            await self.task
        if self.flights:
            await asyncio.wait(self.flights, timeout=15)
        with contextlib.suppress(Exception):  # the database away: the leases resend them
            await self.flush()
        for flight in self.flights:
            flight.cancel()
        await self.sender.close()

    async def flush(self) -> int:
        """Record the answers in hand (one statement)."""
        answers, self.answers = self.answers, []
        try:
            recorded = await pass_.record(self.pool(), answers, self.clock())
        except Exception:
            self.answers = answers + self.answers  # kept for the next turn
            raise
        for endpoint_id in recorded.disabled:
            log.warning(
                "webhook endpoint disabled", extra={"fields": {"endpoint_id": str(endpoint_id)}}
            )
        return recorded.recorded

    async def _deliver(self, job: pass_.Job) -> None:
        try:
            answer = await self.sender.send(job.url, job.secrets, job.webhook_id, job.body)
        except Exception as exc:  # a sender bug: this attempt fails and is retried
            log.error("webhook sender raised", extra={"fields": error_fields(exc)})
            answer = pass_.Answer(None, 0, "error")
        outcome = pass_.settle(job, answer, self.clock())
        self._observe(outcome)
        self.answers.append(outcome)
        self.wake.set()

    def _observe(self, outcome: pass_.Outcome) -> None:
        answer = outcome.answer
        if self.metrics is not None:
            self.metrics.webhook_deliveries.labels(result_of(answer)).inc()
            self.metrics.webhook_latency.observe(answer.duration_ms / 1000)
        if not answer.ok:
            fields = {
                "endpoint_id": str(outcome.job.endpoint_id),
                "message_id": outcome.job.webhook_id,
                "attempt": outcome.job.attempt,
                "status": answer.status,
                "error": answer.error,
                "delivery_state": outcome.state,
            }
            log.warning("webhook delivery attempt failed", extra={"fields": fields})

    def _start(self, job: pass_.Job) -> None:
        flight = asyncio.create_task(self._deliver(job), name="events-webhook-attempt")
        self.flights.add(flight)
        flight.add_done_callback(self.flights.discard)

    async def turn(self) -> datetime | None:
        """Record, fan out, claim and start; when work is due next (None: nothing)."""
        pool, options = self.pool(), self.options
        self.yielding = self.load is not None and self.load.share() >= BUSY_SHARE
        if await self.flush():
            self.due = None  # a retry may now wait
        now, tick = self.clock(), time.monotonic()
        if self.facts_due or tick - self.fanned_at >= FLOOR_S:
            self.facts_due, self.fanned_at = False, tick  # a wake from now on sets it again
            batch = BUSY_BATCH if self.yielding else options.fan_out_batch
            while (await pass_.fan_out(pool, now, batch))[0] >= batch:
                if self.yielding:  # the rest at the next turn
                    self.facts_due = True
                    break
        free = pass_.MAX_IN_FLIGHT - len(self.flights)
        limit = min(BUSY_BATCH, free) if self.yielding else free
        if limit > 0 and not self.stopping.is_set():
            for job in await pass_.claim(pool, now, PER_ENDPOINT, options.lease, limit):
                self._start(job)
        if tick - self.swept_at >= SWEEP_EVERY_S:
            self.swept_at = tick
            if await pass_.sweep(pool, now, now - options.retention, SWEEP_BATCH) >= SWEEP_BATCH:
                self.swept_at -= SWEEP_EVERY_S - SWEEP_AGAIN_S
        # with attempts in flight an answer wakes the next turn: a fresh read is not needed
        # at every one
        if (
            self.due is None
            or not self.flights
            or self.yielding
            or tick - self.due[0] >= DUE_FRESH_S
        ):
            self.due = (tick, await pass_.next_due(pool, self.clock()))
        return self.due[1]

    async def tick(self) -> float:
        """One turn, then the seconds to sleep before the next (never zero)."""
        try:
            due = await self.turn()
        except Exception as exc:
            self.failing += 1
            wait = doubling(FAILED_FIRST_S, FAILED_MAX_S, self.failing)
            level = logging.ERROR if self.failing == 1 else logging.DEBUG
            fields = {**error_fields(exc), "failed_turns": self.failing, "retry_in_s": wait}
            log.log(level, "webhook turn failed", extra={"fields": fields})
            return wait
        if self.failing:
            log.info("webhook turn recovered", extra={"fields": {"failed": self.failing}})
            self.failing = 0
        if due is None:
            self.blocked = 0
            return FLOOR_S
        until = (due - self.clock()).total_seconds()
        if until > 0:
            self.blocked = 0
            return min(until, FLOOR_S)
        if self.yielding:  # more is due: the next turn, after BUSY_TURN_S
            self.blocked = 0
            return BUSY_TURN_S
        if self.flights:  # due attempts wait behind this process's own: an answer wakes it
            self.blocked = 0
            return FLOOR_S
        self.blocked += 1  # due attempts another process's claim holds right now
        return doubling(BLOCKED_FIRST_S, BLOCKED_MAX_S, self.blocked)

    async def _run(self) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            delay = await self.tick()
            if self.yielding:  # not woken sooner than this
                await self._sleep(self.stopping, BUSY_TURN_S)
                delay = max(0.0, delay - BUSY_TURN_S)
            await self._sleep(self.stopping if self.failing else self.wake, delay)

    @staticmethod
    async def _sleep(event: asyncio.Event, seconds: float) -> None:
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=seconds)
