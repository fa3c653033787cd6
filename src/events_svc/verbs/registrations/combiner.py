"""The register verb's entry (`register`) and its combiner: concurrent registrations of
one event in this process share one transaction (group commit, as a database does for
its log). The transaction itself is `take_seats.register_batch_in`; this module imports
it, never the other way round.

Every call of `register` looks at the queue of its event (and its actor's company, which
decides what the event lock may see). When no transaction of that queue is in flight, the
request runs at once, alone, in its caller's task: no timer, no hop. While a transaction
runs, new requests wait in the queue; when it ends, one transaction takes up to
`max_batch` of them, in arrival order, and so on until the queue is empty. So a batch
forms only from requests that arrived while a transaction was in flight, and a request
never waits for company. `max_batch` 1 turns combining off.

A batch is ONE transaction of `register_batch_in`: one event lock, one count per scope,
one multi-row INSERT, and each request's own answer or typed refusal. A failure that is
the whole batch's (no such event, the lock timeout, the database away) is every member's
answer. Any other failure of the batch transaction (a constraint violation the verb did
not foresee) rolls it back and each of its requests runs again on its own, so one
request cannot fail its neighbours. Nothing spans processes: each process combines
its own requests, and the event row lock serialises the batches of all processes.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, transaction
from events_svc.models import AttendeeInput
from events_svc.verbs.registrations.take_seats import Registered, RegisterRequest, register_batch_in

DEFAULT_MAX_BATCH = 64
# failures that are the whole batch's, answered to every member as they are: no such event
# (for this company), the event row held past the lock timeout, the database away (a lost
# COMMIT acknowledgement among them: running the requests again could register twice)
WHOLE_BATCH = (errors.NotFound, errors.Busy, errors.DatabaseUnavailable)


@dataclass
class _Queue:
    waiting: deque[tuple[RegisterRequest, asyncio.Future[Registered]]] = field(
        default_factory=deque
    )
    busy: bool = False  # a transaction of this queue is in flight
    draining: asyncio.Task[None] | None = None


class Combiner:
    """The queues of this process, one per (pool, event, actor company)."""

    def __init__(self, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        self.max_batch = max_batch
        self._queues: dict[tuple[int, UUID, UUID | None], _Queue] = {}
        self.batch_sizes: Counter[int] = Counter()  # how many batches of each size ran
        self.retried_alone = 0  # requests run again on their own after their batch failed

    async def register(self, pool: Pool, request: RegisterRequest) -> Registered:
        """The request's answer (or its refusal, raised), decided in some batch."""
        if self.max_batch <= 1:  # combining is off: each request its own transaction
            self.batch_sizes[1] += 1
            return await _alone(pool, request)
        key = (id(pool), request.event_id, request.actor.company_id)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue()
        if queue.busy:  # a transaction of this event is in flight: join the next batch
            answer: asyncio.Future[Registered] = asyncio.get_running_loop().create_future()
            queue.waiting.append((request, answer))
            # shielded: a caller that goes away leaves its request to its batch (which
            # may commit it) and never cancels the transaction its neighbours share
            return await asyncio.shield(answer)
        queue.busy = True  # alone: run at once, in the caller's own task
        self.batch_sizes[1] += 1
        try:
            return await _alone(pool, request)
        finally:
            self._next(pool, key, queue)

    def _next(self, pool: Pool, key: Any, queue: _Queue) -> None:
        """After a transaction: the requests that arrived meanwhile go next, else idle."""
        if queue.waiting:
            queue.draining = asyncio.create_task(self._drain(pool, key, queue))
            return
        queue.busy = False
        queue.draining = None
        if self._queues.get(key) is queue:
            del self._queues[key]

    async def _drain(self, pool: Pool, key: Any, queue: _Queue) -> None:
        try:
            size = min(len(queue.waiting), max(self.max_batch, 1))
            batch = [queue.waiting.popleft() for _ in range(size)]
            self.batch_sizes[size] += 1
            await self._run(pool, batch)
        finally:
            self._next(pool, key, queue)

    async def _run(
        self, pool: Pool, batch: list[tuple[RegisterRequest, asyncio.Future[Registered]]]
    ) -> None:
        """One transaction for the batch; on a failure of the whole, each request alone."""
        try:
            async with transaction(pool) as conn:
                results = await register_batch_in(conn, [request for request, _ in batch])
        except WHOLE_BATCH as refused:  # the same answer for every member: not retried
            for _, answer in batch:
                _settle(answer, refused)
            return
        except Exception as failed:  # handed to the callers, never swallowed
            if len(batch) == 1:
                _settle(batch[0][1], failed)
                return
            self.retried_alone += len(batch)
            for item in batch:  # the batch was rolled back: each on its own
                await self._run(pool, [item])
            return
        except BaseException:  # cancelled (shutdown): no caller may wait forever
            for _, answer in batch:
                answer.cancel()
            raise
        for (_, answer), result in zip(batch, results, strict=True):
            _settle(answer, result)


async def _alone(pool: Pool, request: RegisterRequest) -> Registered:
    async with transaction(pool) as conn:
        (result,) = await register_batch_in(conn, [request])
    if isinstance(result, BaseException):
        raise result
    return result


def _settle(answer: asyncio.Future[Registered], result: Registered | BaseException) -> None:
    if answer.done():
        return
    if isinstance(result, BaseException):
        answer.set_exception(result)
    else:
        answer.set_result(result)


COMBINER = Combiner()
"""This process's combiner (`create_app` sets its `max_batch` from the settings)."""


async def register(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    attendees: list[AttendeeInput],
    now: datetime,
    *,
    slot_id: UUID | None = None,
    ticket_id: UUID | None = None,
    partner_id: UUID | None = None,
    source: str = "admin",
    require_mandatory: bool = False,
) -> Registered:
    """Take one seat per attendee, all or none: through this process's combiner, which
    runs the request at once when it is alone, or in one transaction with the requests
    for the same event that arrived while another was in flight."""
    request = RegisterRequest(
        actor,
        event_id,
        attendees,
        now,
        slot_id=slot_id,
        ticket_id=ticket_id,
        partner_id=partner_id,
        source=source,
        require_mandatory=require_mandatory,
    )
    return await COMBINER.register(pool, request)
