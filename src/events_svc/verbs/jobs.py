"""The back-off of a background job whose batch failed (an attendance import, an event
operation): one rule for both.

A failing batch rolls back whole; its job counts the failure and waits 5 s, 10 s, 20 s,
40 s (`paused` until then); the 5th failure in a row makes it `failed`, and only a
`resume` revives it. A successful batch clears the count. What a job records of an
error is its code (a refusal's) or its class, never its message: a message may quote
values.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from events_svc import errors

BACKOFF_FIRST_S = 5.0
BACKOFF_MAX_S = 300.0
FAILURES_TO_FAIL = 5
MAX_CODE = 200


def failure_code(exc: BaseException) -> str:
    """What a job may record of an error: its code or class, never its message."""
    code = exc.code if isinstance(exc, errors.DomainError) else type(exc).__name__
    return code[:MAX_CODE]


def after_failure(attempts: int, now: datetime) -> tuple[str, datetime | None]:
    """(the job's state, when it may run again) after its `attempts`-th failure in a row:
    `paused` with a doubling wait, or `failed` (no retry until resumed)."""
    if attempts >= FAILURES_TO_FAIL:
        return "failed", None
    wait = min(BACKOFF_FIRST_S * 2 ** (attempts - 1), BACKOFF_MAX_S)
    return "paused", now + timedelta(seconds=wait)
