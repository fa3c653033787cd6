"""The webhooks' delivery pass, run by the loop beside the outbox's.

A run: record the answers that came back since the last run (one statement, onto the
attempts their claims still hold), fan the written facts out into messages, claim the due
attempts of the active endpoints from the one leased queue (`SKIP LOCKED`: any number of
processes run it side by side; at most `PER_ENDPOINT` in flight to one endpoint, counted
across every process, so a slow receiver holds back only its own messages), and start
each as its own task; its answer wakes the lane for the next run.

Its lane sleeps until the earliest waiting attempt is due or `FLOOR_S`, and wakes early
when a fact or an attempt is written (`NOTIFY event_webhook_due`) or an answer comes back;
an operator's redelivery kicks it (sent now, whatever back-off the lane holds). A run fans
out only after a wake (or when `FLOOR_S` passed without one: a NOTIFY lost with its
connection), and a run while attempts are in flight reads when work is due next at most
every half second (an answer wakes the next run anyway): a run driven by answers is the
hold, the record and the claim.

Deliveries yield to the requests: while requests kept this process busy for
`BUSY_SHARE` of the last half second (`Load.share`), a run fans out and claims at most
`BUSY_BATCH` and the lane waits `BUSY_TURN_S` before the next (16 attempts a second), so
a registration surge keeps its throughput; the backlog goes out at full speed once the
surge leaves room.

Closing waits for the attempts in flight (each ends within its 10 s), records them, then
closes the client. A process killed mid-attempt leaves its claimed attempts leased: they
are due again when the lease runs out and are sent again with the same `webhook-id` (at
least once).

A failed attempt's log line names the endpoint, the URL's host and port (never its path
or query: a receiver's URL may carry a token) and the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from events_svc.db import Pool
from events_svc.diagnostics import error_fields
from events_svc.loops.passes import Entry, Pass, Ran
from events_svc.observability import Load, Metrics, host_of
from events_svc.ports import HttpAnswer
from events_svc.settings import Settings
from events_svc.verbs.webhooks import MAX_IN_FLIGHT, PER_ENDPOINT, WAKE_CHANNEL, attempts

log = logging.getLogger("events_svc.webhooks")

FLOOR_S = 60.0  # the longest sleep: also the fan-out without a wake (a NOTIFY lost)
SWEEP_EVERY_S = 600.0
DUE_FRESH_S = 0.5  # how long a run with attempts in flight reuses the last next-due read
SWEEP_BATCH = 5000
SWEEP_AGAIN_S = 1.0  # a full sweep: the next one after this, not SWEEP_EVERY_S
BUSY_SHARE = 0.75  # requests in flight this share of the time: deliveries yield
BUSY_BATCH = 8  # facts fanned out and attempts claimed by a run while yielding
BUSY_TURN_S = 0.5  # the least time between two runs while yielding
CLOSE_WAIT_S = 15.0  # attempts in flight at a stop: each ends within its 10 s


class Sender(Protocol):
    async def send(
        self, url: str, secrets: tuple[str, ...], webhook_id: str, body: bytes
    ) -> HttpAnswer: ...

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


def result_of(answer: HttpAnswer) -> str:
    """The metrics' name of an attempt's result."""
    if answer.ok:
        return "succeeded"
    if answer.status is not None:
        return f"status_{answer.status // 100}xx"
    return answer.error or "error"


class WebhookPass(Pass):
    """Fans out, claims, sends and records (see the module docstring)."""

    name = "webhooks"
    wakes = (WAKE_CHANNEL,)
    floor_s = FLOOR_S

    def __init__(
        self,
        pool: Callable[[], Pool],
        sender: Sender,
        options: WebhookOptions,
        clock: Callable[[], datetime],
        metrics: Metrics | None = None,
        load: Load | None = None,
    ) -> None:
        super().__init__()
        self.pool, self.sender, self.options = pool, sender, options
        self.clock, self.metrics, self.load = clock, metrics, load
        self.yielding = False  # the last run yielded to the requests
        self.answers: list[attempts.Outcome] = []
        self.flights: set[asyncio.Task[None]] = set()
        self.swept_at = 0.0
        self.facts_due = True  # a wake was heard since the last fan-out that emptied
        self.fanned_at = 0.0
        self.due: tuple[float, datetime | None] | None = None  # (read at, next due)

    def heard(self, channel: str, payload: str) -> bool:
        """Facts or attempts were written somewhere; a redelivery is a kick."""
        self.facts_due = True
        self.due = None
        return payload == attempts.REDELIVER

    async def flush(self) -> int:
        """Record the answers in hand (one statement)."""
        answers, self.answers = self.answers, []
        try:
            recorded = await attempts.record(self.pool(), answers, self.clock())
        except Exception:
            self.answers = answers + self.answers  # kept for the next run
            raise
        for endpoint_id in recorded.disabled:
            log.warning(
                "webhook endpoint disabled", extra={"fields": {"endpoint_id": str(endpoint_id)}}
            )
        return recorded.recorded

    async def _deliver(self, job: attempts.Job) -> None:
        try:
            answer = await self.sender.send(job.url, job.secrets, job.webhook_id, job.body)
        except Exception as exc:  # a sender bug: this attempt fails and is retried
            fields = {
                **error_fields(exc),  # its types and frames, never its message (the URL)
                "channel": "webhook",
                "endpoint_id": str(job.endpoint_id),
                "host": host_of(job.url),
            }
            log.error("webhook sender raised", extra={"fields": fields})
            answer = HttpAnswer(None, 0, "error")
        outcome = attempts.attempt_outcome(job, answer, self.clock())
        self._observe(outcome)
        self.answers.append(outcome)
        self.wake()

    def _observe(self, outcome: attempts.Outcome) -> None:
        answer = outcome.answer
        if self.metrics is not None:
            self.metrics.webhook_deliveries.labels(result_of(answer)).inc()
            self.metrics.webhook_latency.observe(answer.duration_ms / 1000)
        if not answer.ok:
            fields = {
                "channel": "webhook",
                "endpoint_id": str(outcome.job.endpoint_id),
                # the host and port only: the endpoint's path and query may hold a secret
                "host": host_of(outcome.job.url),
                "message_id": outcome.job.webhook_id,
                "attempt": outcome.job.attempt,
                "status": answer.status,
                "error": answer.error,
                "delivery_state": outcome.state,
            }
            log.warning("webhook delivery attempt failed", extra={"fields": fields})

    def _start(self, job: attempts.Job) -> None:
        flight = asyncio.create_task(self._deliver(job), name="events-webhook-attempt")
        self.flights.add(flight)
        flight.add_done_callback(self.flights.discard)

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        """Record, fan out, claim and start."""
        pool, options = self.pool(), self.options
        self.yielding = self.load is not None and self.load.share() >= BUSY_SHARE
        counts = {"recorded": await self.flush(), "facts": 0, "messages": 0, "claimed": 0}
        if counts["recorded"]:
            self.due = None  # a retry may now wait
        tick = time.monotonic()
        if self.facts_due or tick - self.fanned_at >= FLOOR_S:
            self.facts_due, self.fanned_at = False, tick  # a wake from now on sets it again
            batch = BUSY_BATCH if self.yielding else options.fan_out_batch
            while True:
                facts, messages = await attempts.fan_out(pool, now, batch)
                counts["facts"] += facts
                counts["messages"] += messages
                if facts < batch:
                    break
                if self.yielding or stopping():  # the rest at the next run
                    self.facts_due = True
                    break
        free = MAX_IN_FLIGHT - len(self.flights)
        limit = min(BUSY_BATCH, free) if self.yielding else free
        if limit > 0 and not stopping():
            for job in await attempts.claim(pool, now, PER_ENDPOINT, options.lease, limit):
                counts["claimed"] += 1
                self._start(job)
        if tick - self.swept_at >= SWEEP_EVERY_S:
            self.swept_at = tick
            swept = await attempts.sweep(pool, now, now - options.retention, SWEEP_BATCH)
            if swept >= SWEEP_BATCH:
                self.swept_at -= SWEEP_EVERY_S - SWEEP_AGAIN_S
        progressed = any(counts.values())
        return Ran(counts, progressed=progressed, hold_s=BUSY_TURN_S if self.yielding else 0.0)

    async def next_due(self, now: datetime) -> datetime | None:
        """When work is due next; None while what is due waits behind this process's own
        attempts in flight (an answer wakes the lane)."""
        tick = time.monotonic()
        # with attempts in flight an answer wakes the next run: a fresh read is not needed
        # at every one
        if (
            self.due is None
            or not self.flights
            or self.yielding
            or tick - self.due[0] >= DUE_FRESH_S
        ):
            self.due = (tick, await attempts.next_due(self.pool(), self.clock()))
        due = self.due[1]
        if due is not None and due <= self.clock() and self.flights and not self.yielding:
            return None
        return due

    async def close(self) -> None:
        """Let the attempts in flight end, record them, close the client."""
        if self.flights:
            await asyncio.wait(self.flights, timeout=CLOSE_WAIT_S)
        with contextlib.suppress(Exception):  # the database away: the leases resend them
            await self.flush()
        for flight in self.flights:
            flight.cancel()
        await self.sender.close()
