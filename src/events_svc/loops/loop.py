"""The one loop: every pass of the composition in a lane of its own, one LISTEN
connection for all of them.

A lane runs its pass (`passes.run_pass`), then sleeps: not at all when the pass stopped
with work left (`more`); until its next due work (`Pass.next_due`) or its floor, waking
early on a NOTIFY of one of its channels; longer each time in a row (`backoff.PASS_BLOCKED`)
when due work is there that it could not take (another process holds it); and after a
failed run 5 s doubling to 5 min (`backoff.PASS_FAILED`), during which only a stop or a
kick ends the wait, so a flood of wake-ups never turns a failing pass into a busy one. A
kick (an operator's retry or redelivery, heard through `Pass.heard`) ends any wait of its
lane at once. Lanes do not wait on each other: a partner that never answers holds only
its own pass's lane (each pass is bounded in time besides).

Stopping lets each lane finish the run in hand (its batch commits), then stops the
listener; the passes are closed by whoever composed them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from events_svc.backoff import PASS_BLOCKED, PASS_FAILED
from events_svc.db import Pool
from events_svc.diagnostics import error_fields
from events_svc.loops.listen import Listener
from events_svc.loops.passes import LOOP, Pass, PassReport, run_pass
from events_svc.observability import Metrics
from events_svc.settings import Settings

log = logging.getLogger("events_svc.loops")


class Lane:
    """One pass run over and over (see the module docstring); `runs`, `failures`,
    `failing`, `blocked` and `last` are for observation."""

    def __init__(self, loop: Loop, job: Pass) -> None:
        self.loop, self.job = loop, job
        self.woken = asyncio.Event()
        self.kicked = False  # a kick since the run in hand started
        self.runs = 0
        self.failures = 0
        self.failing = 0  # consecutive failed runs
        self.blocked = 0  # consecutive runs that found due work and could take none
        self.last: PassReport | None = None
        self.task: asyncio.Task[None] | None = None
        job.wake = self.notify

    def notify(self) -> None:
        """New work may be due: wake now, unless a failure backs the lane off."""
        if not self.failing:
            self.woken.set()

    def kick(self) -> None:
        """Run now, whatever wait the lane is in (an operator asked)."""
        self.blocked = 0
        self.kicked = True
        self.woken.set()

    def _floor(self) -> float:
        return float(self.job.floor_s)

    async def tick(self) -> tuple[float, float]:
        """One run, then (seconds the lane waits at least, seconds it sleeps at most)."""
        clock, floor = self.loop.clock, self._floor()
        report = await run_pass(self.job, LOOP, clock(), self.loop.stopping.is_set)
        self.last = report
        due: datetime | None = None
        failure: BaseException | None = report.error
        if failure is None and report.ran is not None and not report.more:
            try:
                due = await self.job.next_due(clock())
            except Exception as exc:
                failure = exc
        if failure is not None:
            return 0.0, self._failed(failure)
        self.runs += 1
        if self.failing:
            fields = {"pass": self.job.name, "failed_runs": self.failing}
            log.info("pass recovered", extra={"fields": fields})
            self.failing = 0
        ran = report.ran
        hold = ran.hold_s if ran is not None else 0.0
        if ran is None or report.more:  # skipped here (never a lane), or work left
            self.blocked = 0
            return hold, (floor if ran is None else 0.0)
        if due is None:
            self.blocked = 0
            return hold, floor
        until = (due - clock()).total_seconds()
        if until > 0:
            self.blocked = 0
            return hold, min(until, floor)
        if not ran.progressed:  # due work another process holds right now
            self.blocked += 1
            return hold, min(PASS_BLOCKED.seconds(self.blocked), floor)
        self.blocked = 0
        return hold, 0.0

    def _failed(self, exc: BaseException) -> float:
        self.failures += 1
        self.failing += 1
        if self.loop.metrics is not None:
            self.loop.metrics.pass_errors.inc()
        wait = min(PASS_FAILED.seconds(self.failing), self._floor())
        level = logging.ERROR if self.failing == 1 else logging.DEBUG
        fields = {
            **error_fields(exc),
            "pass": self.job.name,
            "failed_runs": self.failing,
            "retry_in_s": wait,
        }
        log.log(level, "pass failed", extra={"fields": fields})
        return wait

    async def serve(self) -> None:
        stopping = self.loop.stopping
        while not stopping.is_set():
            self.woken.clear()
            self.kicked = False
            try:
                hold, delay = await self.tick()
            except Exception as exc:  # a bug of the lane itself: it backs off, never dies
                hold, delay = 0.0, self._failed(exc)
            if self.failing and not self.kicked:  # a NOTIFY heard while it ran that failed
                self.woken.clear()  # does not cut the failure's wait short
            if hold > 0:  # not woken sooner than this
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), timeout=hold)
                delay = max(0.0, delay - hold)
            if delay <= 0.0:
                await asyncio.sleep(0)  # the other lanes and the requests get their turn
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.woken.wait(), timeout=delay)


class Loop:
    """Runs every pass it is given, each in its lane, until stopped (see the module
    docstring). `lanes` by pass name, `skipped` (the passes switched off here, with why)
    and `listener` are for observation."""

    def __init__(
        self,
        passes: Sequence[Pass],
        pool: Callable[[], Pool],
        settings: Settings,
        clock: Callable[[], datetime],
        metrics: Metrics | None = None,
    ) -> None:
        self.clock, self.metrics = clock, metrics
        self.stopping = asyncio.Event()
        self.lanes = {p.name: Lane(self, p) for p in passes if p.skip(LOOP) is None}
        # the passes this loop does not run, and why (`disabled`: switched off here)
        self.skipped = {p.name: why for p in passes if (why := p.skip(LOOP)) is not None}
        self.by_channel: dict[str, list[Lane]] = {}
        for lane in self.lanes.values():
            for channel in lane.job.wakes:
                self.by_channel.setdefault(channel, []).append(lane)
        self.listener = Listener(pool, settings, tuple(self.by_channel), self._heard, self._opened)
        self.listening: asyncio.Task[None] | None = None

    def _heard(self, channel: str, payload: str) -> None:
        for lane in self.by_channel.get(channel, ()):
            if lane.job.heard(channel, payload):
                lane.kick()
            else:
                lane.notify()

    def _opened(self) -> None:
        """The LISTEN connection is (again) open: what was written meanwhile is looked at
        now, and a lane backing off after failures (the database away, most likely) runs
        again at once."""
        for lane in self.lanes.values():
            if lane.failing:
                lane.kick()
            else:
                lane.notify()

    @property
    def lost(self) -> int:
        """Consecutive failures to hold the LISTEN connection (0 while listening)."""
        return self.listener.lost

    @property
    def failures(self) -> int:
        """Failed runs of every lane, and lost LISTEN connections."""
        return sum(lane.failures for lane in self.lanes.values()) + self.listener.failures

    def start(self) -> None:
        self.listening = asyncio.create_task(
            self.listener.run(self.stopping), name="events-loop-listen"
        )
        for name, lane in self.lanes.items():
            lane.task = asyncio.create_task(lane.serve(), name=f"events-loop-{name}")

    async def stop(self) -> None:
        """Let every lane finish the run in hand, then stop listening."""
        self.stopping.set()
        for lane in self.lanes.values():
            lane.kick()
        tasks = [lane.task for lane in self.lanes.values() if lane.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.listening is not None:
            await asyncio.gather(self.listening, return_exceptions=True)
