"""Badges: one streamed PDF of an event's badges, in its `badge_format`."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse

from events_svc import errors
from events_svc.actors import Actor
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


@router.get(
    "/admin/events/{event_id}/badges.pdf",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The badges in the event's badge_format, as one PDF stream",
            "content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}},
        },
        **json_error_responses(*ADMIN_ERRORS),
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
    registrations by id), at most 5 000; audited like an export, streamed."""
    filters = verbs.BadgeFilters(
        states=_states(state),
        ticket_id=event_ticket_id,
        slot_id=event_slot_id,
        registration_ids=tuple(dict.fromkeys(registration_id or ())),
    )
    sheet = await verbs.start_badges(ctx.db(), actor, event_id, filters)
    return StreamingResponse(
        sheet.chunks(),
        media_type="application/pdf",
        headers={
            "Content-Disposition": f'inline; filename="badges-{event_id}.pdf"',
            "X-Badge-Count": str(sheet.count),
        },
    )
