"""EventSurface: what a host calls in-process, without HTTP.

Seven members, each the same verb the routes call: `seat_availability` (the one
seat read model), `publication_state`, `registration_state` (the state/sale_status
pair), `register_intake` (the guarded intake: the one register verb behind the
intake's rules), `mint_capability` (calendar, tickets and private registration links),
`run_due_schedulers` (every pass of the one composition once, now, as the loop and the
run route run them) and `on_template_deleted` (the template
cascade, for a host whose template store deleted a template). No SQL lives here; nothing here is a
second seat counter or a second source of truth.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

from events_svc.actors import SYSTEM, Actor
from events_svc.adapters.standalone import standalone_ports
from events_svc.capabilities import CapabilityCodec
from events_svc.db import Pool, transaction
from events_svc.loops import Entry, Services, compose_passes, run_view
from events_svc.models import AttendeeInput, IcsMint, IntakeBody, IntakeMint, MyTicketsMint
from events_svc.models.base import Channel
from events_svc.ports import Ports
from events_svc.settings import Settings
from events_svc.verbs import public
from events_svc.verbs.events import get_publication_state
from events_svc.verbs.fence import get_event_row
from events_svc.verbs.mail import on_template_deleted
from events_svc.verbs.registrations import get_registration_state, get_seat_view

Purpose = Literal["ics", "my_tickets", "intake"]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class EventSurface:
    """In-process reads and verbs for a host; `actor` fences them (default: the system)."""

    def __init__(
        self,
        pool: Pool,
        settings: Settings,
        *,
        ports: Ports | None = None,
        actor: Actor = SYSTEM,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.pool, self.settings, self.actor, self.clock = pool, settings, actor, clock
        self.ports = ports if ports is not None else standalone_ports()
        self.codec = CapabilityCodec(settings.capability_secrets)

    async def seat_availability(self, event_id: UUID) -> dict[str, Any]:
        """The one seat read model of an event (event, tickets, slots, available_min, sold out)."""
        async with transaction(self.pool) as conn:
            event = await get_event_row(conn, self.actor, event_id)
            return await get_seat_view(conn, event)

    async def publication_state(self, event_id: UUID) -> dict[str, Any]:
        """{event_id, is_published, date_publish, is_visible}."""
        return await get_publication_state(self.pool, self.actor, event_id, self.clock())

    async def registration_state(self, registration_id: UUID) -> dict[str, Any]:
        """{id, event_id, state, sale_status, active, version} of one registration."""
        return await get_registration_state(self.pool, self.actor, registration_id)

    async def register_intake(
        self, event_id_or_capability: str, body: IntakeBody | dict[str, Any]
    ) -> dict[str, Any]:
        """The guarded intake, as `POST /intake/{event_id_or_capability}` runs it: the same
        body model (the intake allowlist), the same verb; only the HTTP throttles are left
        to the host. {registrations: [{registration_id, state}], my_tickets_token}."""
        intake = IntakeBody.model_validate(body)
        attendees = [AttendeeInput.model_validate(a.model_dump()) for a in intake.attendees]
        result, token = await public.register_intake(
            self.pool,
            self.codec,
            event_id_or_capability,
            attendees,
            self.clock(),
            ticket_id=intake.event_ticket_id,
            slot_id=intake.event_slot_id,
        )
        rows = [{"registration_id": r["id"], "state": r["state"]} for r in result.registrations]
        return {"registrations": rows, "my_tickets_token": token}

    async def mint_capability(
        self, purpose: Purpose, event_id: UUID, spec: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A link token, as the minting routes make it from the same bodies: `ics`
        `{slot_id?, ttl_seconds?}`, `intake` `{ttl_seconds?}`, `my_tickets`
        `{registration_ids}`. Answers {token, expires_at} (a tickets link never expires)."""
        now, s = self.clock(), self.settings
        if purpose == "ics":
            ics = IcsMint.model_validate(spec or {})
            token, expires = await public.mint_ics(
                self.pool,
                self.actor,
                self.codec,
                event_id,
                ics.slot_id,
                ics.ttl_seconds or s.ics_ttl_s,
                now,
            )
            return {"token": token, "expires_at": expires}
        if purpose == "intake":
            private = IntakeMint.model_validate(spec or {})
            ttl = private.ttl_seconds or s.intake_ttl_s
            token, expires = await public.mint_intake(
                self.pool, self.actor, self.codec, event_id, ttl, now
            )
            return {"token": token, "expires_at": expires}
        tickets = MyTicketsMint.model_validate(spec or {})
        token = await public.mint_my_tickets(
            self.pool, self.actor, self.codec, event_id, tickets.registration_ids
        )
        return {"token": token, "expires_at": None}

    async def on_template_deleted(self, kind: Channel, template_ref: UUID) -> dict[str, Any]:
        """Delete the scheduler and type lines of a deleted (kind, template) pair (what
        `DELETE /admin/templates/{id}` runs), within the surface actor's company fence:
        a company actor's call deletes only its events' lines (and never the platform's
        trigger mapping), and unsets the waiting-list offer template of its events;
        {mails_deleted, type_lines_deleted, trigger_purposes_unmapped,
        waitlist_offer_templates_unset}.
        A host whose renderer keeps templates per company should also implement
        `ports.TemplateCompanies`, so that lines may name only their company's
        templates."""
        return await on_template_deleted(self.pool, self.actor, kind, template_ref)

    async def run_due_schedulers(self) -> dict[str, Any]:
        """Every pass once, now, through the one composition (what the loop, `POST
        /admin/schedulers/run` and `events-svc scheduler run-once` run): the run summary
        of before, `passes` (each in its order: ran, skipped with why, failed with the
        error's class) and `more`. What the passes hold (the webhooks' client) is closed
        before it returns; the ports are the surface's, left open."""
        passes = compose_passes(Services(lambda: self.pool, self.ports, self.settings, self.clock))
        try:
            reports = await passes.run(Entry("surface"))
        finally:
            await passes.close()
        return run_view(reports)
