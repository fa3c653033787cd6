"""Badges: one streamed PDF of an event's badges, in its `badge_format`.

A sheet takes a place in the process's document bound (`documents.bound`) after its
checks (a bad filter answers its 4xx at once) and before its audit row (a print refused
as `documents_busy` after 10 s is not audited and sends no byte), and holds it until its
last byte is sent or its client goes away: the response gives it back however it ends
(`BadgeStream`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from events_svc import errors
from events_svc.actors import Actor
from events_svc.documents import Slot
from events_svc.models import ADMIN_ERRORS, json_error_responses
from events_svc.routes.deps import Ctx, require
from events_svc.verbs import badges as verbs

router = APIRouter(tags=["badges"])

# the names printed on them: badges are personal data
Pii = Annotated[Actor, require("registration:pii")]
STATES = frozenset({"draft", "open", "done", "cancel"})


def _states(raw: list[str] | None) -> tuple[str, ...]:
    """`state=open,done` or `state=open&state=done` (default open and done)."""
    if not raw:
        return verbs.DEFAULT_STATES
    found = tuple(dict.fromkeys(s.strip() for part in raw for s in part.split(",") if s.strip()))
    if not found or any(s not in STATES for s in found):
        raise errors.ValidationFailed(
            "state is a comma-separated list of draft, open, done, cancel", field="state"
        )
    return found


async def _next(chunks: AsyncIterator[bytes]) -> bytes | None:
    return await anext(chunks, None)


class BadgeStream(StreamingResponse):
    """A badge sheet's stream that holds its document place until the last byte is sent,
    the client goes away or the render fails, then gives it back. Each chunk is made in a
    task of its own: a client that goes away cancels the wait for the chunk, never the page
    of rows a worker thread is rendering, which is finished before the place is given back
    (a thread cannot be stopped, and would otherwise run on without a place)."""

    media_type = "application/pdf"

    def __init__(self, sheet: verbs.BadgeSheet, slot: Slot) -> None:
        self.sheet_chunks = sheet.chunks()
        self.slot = slot
        self.step: asyncio.Task[bytes | None] | None = None
        super().__init__(
            self._steps(),
            media_type="application/pdf",
            headers={
                "Content-Disposition": f'inline; filename="badges-{sheet.event_id}.pdf"',
                "X-Badge-Count": str(sheet.count),
            },
        )

    async def _steps(self) -> AsyncIterator[bytes]:
        while True:
            self.step = asyncio.create_task(_next(self.sheet_chunks))
            chunk = await asyncio.shield(self.step)
            if chunk is None:
                return
            yield chunk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                if self.step is not None and not self.step.done():
                    await asyncio.wait({self.step})  # the page in hand, then the place
                if isinstance(self.sheet_chunks, AsyncGenerator):
                    await self.sheet_chunks.aclose()
            finally:
                self.slot.release()


BUSY: dict[int | str, dict[str, Any]] = {
    503: {
        **json_error_responses(503)[503],
        "description": "documents_busy: no place to render the sheet within 10 s (Retry-After)"
        "; busy, database_unavailable",
    }
}


@router.get(
    "/admin/events/{event_id}/badges.pdf",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The badges in the event's badge_format, as one PDF stream",
            "content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}},
        },
        **json_error_responses(*ADMIN_ERRORS),
        **BUSY,
    },
)
async def print_badges(
    ctx: Ctx,
    actor: Pii,
    event_id: UUID,
    state: Annotated[list[str] | None, Query(max_length=4)] = None,
    event_ticket_id: UUID | None = None,
    event_slot_id: UUID | None = None,
    registration_id: Annotated[list[UUID] | None, Query(max_length=verbs.MAX_BADGES)] = None,
) -> Response:
    """The event's badges (filters: `state`, default open and done; a ticket; a slot;
    registrations by id), at most 5 000; audited like an export, streamed; 503
    `documents_busy` when no document place frees up within 10 s."""
    filters = verbs.BadgeFilters(
        states=_states(state),
        ticket_id=event_ticket_id,
        slot_id=event_slot_id,
        registration_ids=tuple(dict.fromkeys(registration_id or ())),
    )
    slots: list[Slot] = []

    async def admitted() -> None:  # after the checks: bad filters answer their 4xx at once
        slots.append(await ctx.documents.place())

    try:
        sheet = await verbs.start_badges(ctx.db(), actor, event_id, filters, admitted)
    except BaseException:
        for slot in slots:
            slot.release()
        raise
    return BadgeStream(sheet, slots[0])
