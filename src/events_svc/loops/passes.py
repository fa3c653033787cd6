"""What a pass is, and the one way any entry point runs one.

A pass (`Pass`) does one kind of background work once: the waiting list's offers, the
scheduler's mail lines, the lead requests, the attendance imports, the event operations,
the trigger dispatcher, the done sweep, the outbox's delivery, the webhooks' delivery.
It says which `NOTIFY` channels bring it work (`wakes`), how long its lane may sleep with
nothing due (`floor_s`), when it has work next (`next_due`), and whether it is switched off
for an entry point (`skip`: `disabled`, `not_due`).

`run_pass` is the one invocation: it bounds the pass in time (`PASS_BUDGET_S`: a pass
stops starting new work then, and says `more`), turns any error into a `failed` report
(the error's class, never its message) and its summary into integer counts. The loop's
lanes, `POST /admin/schedulers/run`, `events-svc scheduler run-once` and the host
surface all go through it (`run_passes` for the one-shot entry points), over the one
composition (`compose.compose_passes`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from events_svc.diagnostics import error_fields

log = logging.getLogger("events_svc.loops")

PASS_BUDGET_S = 30.0  # a pass starts no new batch after this long, and says `more`
Kind = Literal["loop", "route", "cli", "surface"]
Status = Literal["ran", "skipped", "failed"]


@dataclass(frozen=True)
class Entry:
    """Who runs the passes: the loop's lanes, the route, the CLI or the host surface;
    `sweep` asks the done sweep now (`run-once --sweep`)."""

    kind: Kind
    sweep: bool = False


LOOP = Entry("loop")


@dataclass
class Ran:
    """What one run of a pass did: its integer counters, whether it stopped with work
    left (`more`: run again at once), whether it changed anything (else due work it found
    is held by another process), and how long its lane waits at least before the next run
    (`hold_s`: the webhooks yielding to requests). `summary` is the pass's own summary."""

    counts: dict[str, int] = field(default_factory=dict)
    more: bool = False
    progressed: bool = False
    hold_s: float = 0.0
    summary: Any = None


@dataclass
class PassReport:
    """One pass as an entry point answers it (`passes` of the run): `ran`, `skipped` with
    why (`disabled`, `not_due`), or `failed` with the error's class."""

    name: str
    status: Status
    counts: dict[str, int] = field(default_factory=dict)
    detail: str | None = None
    more: bool = False
    ran: Ran | None = None
    error: BaseException | None = field(default=None, repr=False)

    def view(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "counts": dict(self.counts),
            "detail": self.detail,
        }


class Pass:
    """One kind of background work (see the module docstring). Subclasses set `name`,
    implement `run` and `next_due`, and may set `wakes`, `floor_s`, `skip` and `heard`."""

    name: str = ""
    wakes: tuple[str, ...] = ()
    floor_s: float = 1200.0

    def __init__(self) -> None:
        self.wake: Callable[[], None] = lambda: None  # its lane's, once the loop runs it

    def skip(self, entry: Entry) -> str | None:
        """Why this pass does not run for `entry` (`disabled`, `not_due`), or None."""
        return None

    async def run(self, now: datetime, stopping: Callable[[], bool], entry: Entry) -> Ran:
        raise NotImplementedError

    async def next_due(self, now: datetime) -> datetime | None:
        """When this pass has work next (`now` or earlier: at once; None: only a wake
        brings it work)."""
        return None

    def heard(self, channel: str, payload: str) -> bool:
        """A NOTIFY on one of `wakes`; True asks its lane to run now whatever back-off it
        holds (an operator's retry), False only wakes it."""
        return False

    async def close(self) -> None:
        """Let the work in hand end and release what the pass holds (clients, sessions)."""


def within(budget_s: float = PASS_BUDGET_S) -> Callable[[], bool]:
    """A `stopping` that answers True once `budget_s` seconds have passed: a pass run by
    hand (the lead requests' route) is bounded like the loop's."""
    deadline = time.monotonic() + budget_s
    return lambda: time.monotonic() >= deadline


def counts_of(summary: Any) -> dict[str, int]:
    """The integer counters of a pass's summary (a dataclass or a dict), flags left out."""
    items = summary.items() if isinstance(summary, dict) else vars(summary).items()
    return {
        str(k): int(v)
        for k, v in items
        if isinstance(v, int) and not isinstance(v, bool) and not str(k).startswith("_")
    }


async def run_pass(
    job: Pass,
    entry: Entry,
    now: datetime,
    stopping: Callable[[], bool] = lambda: False,
    budget_s: float = PASS_BUDGET_S,
) -> PassReport:
    """Run one pass once for `entry`, bounded by `budget_s`; never raises for the pass's
    own errors (a `failed` report, logged by the caller)."""
    why = job.skip(entry)
    if why is not None:
        return PassReport(job.name, "skipped", detail=why)
    deadline = time.monotonic() + budget_s
    tripped = False  # the pass was told to stop by its budget (not by a shutdown)

    def over() -> bool:
        nonlocal tripped
        if stopping():
            return True
        if time.monotonic() >= deadline:
            tripped = True
        return tripped

    try:
        ran = await job.run(now, over, entry)
    except Exception as exc:
        return PassReport(job.name, "failed", detail=type(exc).__name__, error=exc)
    ran.more = ran.more or tripped
    return PassReport(job.name, "ran", dict(ran.counts), None, ran.more, ran)


async def run_passes(
    passes: Sequence[Pass],
    entry: Entry,
    clock: Callable[[], datetime],
    stopping: Callable[[], bool] = lambda: False,
) -> list[PassReport]:
    """Every pass of the composition once, in its order, for a one-shot entry point; a
    failed pass does not stop the others (each failure is logged once, by its class)."""
    reports = []
    for job in passes:
        report = await run_pass(job, entry, clock(), stopping)
        if report.error is not None:
            fields = {**error_fields(report.error), "pass": job.name, "entry": entry.kind}
            log.error("pass failed", extra={"fields": fields})
        reports.append(report)
    return reports
