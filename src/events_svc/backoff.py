"""The one back-off: how long something that failed waits before it is tried again, and
when it stops being tried.

A `Backoff` is a doubling (a first wait, doubled at each failure in a row, never above a
ceiling) or an explicit schedule (the webhooks' 5 s ... 10 h table), with an optional
give-up bound: after so many failed attempts in a row, or once a window since the work
was written has passed. Every channel that retries names its constants once, in the
table below, and nowhere else: the outbox, webhooks, lead requests, scheduler lines,
trigger receipts, jobs (imports and operations), waiting-list offers, the loop's own
waits (a failing pass, due work another process holds, a relay that is down, a lost
LISTEN connection, answers kept while the database is away), and the shared throttle
windows' store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Backoff:
    """A doubling from `first` to `ceiling` seconds, or the explicit `schedule` (the wait
    after the 1st, 2nd, ... failure; its last entry repeats). `give_up_after`: the failed
    attempt in a row that ends the retries; `window`: how long after the work was written
    it may still be retried."""

    first: float = 0.0
    ceiling: float = 0.0
    schedule: tuple[float, ...] = ()
    give_up_after: int | None = None
    window: timedelta | None = None

    def seconds(self, streak: int) -> float:
        """The wait after the `streak`-th failure in a row (1, 2, ...)."""
        n = max(streak, 1)
        if self.schedule:
            return self.schedule[min(n, len(self.schedule)) - 1]
        return float(min(self.first * (1 << min(n - 1, 30)), self.ceiling))

    def delay(self, streak: int) -> timedelta:
        return timedelta(seconds=self.seconds(streak))

    def gives_up(
        self, streak: int, *, written_at: datetime | None = None, now: datetime | None = None
    ) -> bool:
        """Whether the `streak`-th failure in a row ends the retries (or the window since
        `written_at` has passed by `now`)."""
        if self.give_up_after is not None and streak >= self.give_up_after:
            return True
        if self.window is not None and written_at is not None and now is not None:
            return now >= written_at + self.window
        return False

    def next_at(
        self, streak: int, now: datetime, *, written_at: datetime | None = None
    ) -> datetime | None:
        """When the work is tried again after its `streak`-th failure in a row; None when
        the retries end here."""
        if self.gives_up(streak, written_at=written_at, now=now):
            return None
        return now + self.delay(streak)


# --- the table: every retrying thing's constants, once ----------------------------------

# an outbox message (mail, sms) refused for now: 1 min doubling to 1 h, for 48 h
OUTBOX = Backoff(60.0, 3600.0, window=timedelta(hours=48))
# a webhook attempt that failed: the Standard Webhooks schedule; the 8th attempt is the last
WEBHOOKS = Backoff(
    schedule=(5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0), give_up_after=8
)
# a lead request the sink refused or did not answer: 1 min doubling to 1 h
LEAD_REQUESTS = Backoff(60.0, 3600.0)
# a scheduler line that failed whole: 1 min doubling to 1 h
MAIL_LINES = Backoff(60.0, 3600.0)
# a trigger receipt that parked: as a scheduler line
TRIGGER_RECEIPTS = Backoff(60.0, 3600.0)
# a job (an attendance import, an event operation) whose batch failed: 5 s doubling to
# 5 min, `failed` at the 5th failure in a row (only a resume revives it)
JOBS = Backoff(5.0, 300.0, give_up_after=5)
# an event whose waiting-list offers failed: 5 s doubling to 10 min, the other events go on
OFFERS = Backoff(5.0, 600.0)
# the loop: a pass that raised waits 5 s doubling to 5 min (only a stop or a kick ends it)
PASS_FAILED = Backoff(5.0, 300.0)
# the loop: due work that another process holds right now (its claim is short)
PASS_BLOCKED = Backoff(0.25, 30.0)
# a relay or gateway that is down: its channel pauses 1 min doubling to 1 h
CHANNEL_PAUSE = Backoff(60.0, 3600.0)
# the loop's LISTEN connection lost (a crash, a failover): opened again 1 s doubling to 1 min
LISTEN_LOST = Backoff(1.0, 60.0)
# a batch's answers kept while the database is away, written again 0.5 s doubling to 10 s
ANSWERS_KEPT = Backoff(0.5, 10.0)
# the shared throttle windows' store (Redis) unreachable: each process keeps its own
# windows and tries the store again every 30 s
SHARED_WINDOWS = Backoff(30.0, 30.0)

TABLE: dict[str, Backoff] = {
    "outbox": OUTBOX,
    "webhooks": WEBHOOKS,
    "lead_requests": LEAD_REQUESTS,
    "mail_lines": MAIL_LINES,
    "trigger_receipts": TRIGGER_RECEIPTS,
    "jobs": JOBS,
    "offers": OFFERS,
    "pass_failed": PASS_FAILED,
    "pass_blocked": PASS_BLOCKED,
    "channel_pause": CHANNEL_PAUSE,
    "listen_lost": LISTEN_LOST,
    "answers_kept": ANSWERS_KEPT,
    "shared_windows": SHARED_WINDOWS,
}
