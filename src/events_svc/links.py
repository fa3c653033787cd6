"""Public addresses: where the API lives, and an attendee's links for mail templates.

The service's routes are mounted under `BASE_PATH`; the public capability routes
under `ICS_PATH`, `MY_TICKETS_PATH` and `WAITLIST_PATH` within it. `AttendeeLinks`
builds the absolute calendar and tickets links of one attendee (and the offer links of a
waiting-list entry) from the public base URL
(`EVENTS_PUBLIC_BASE_URL`) and the one capability codec. The scheduler's verbs
receive it as a plain callable and know no path themselves.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from events_svc import capabilities
from events_svc.capabilities import CapabilityCodec

BASE_PATH = "/api/v1/event"
ICS_PATH = "/public/ics"
MY_TICKETS_PATH = "/public/my-tickets"
WAITLIST_PATH = "/public/waitlist"
NAMES = ("ics", "my_tickets")  # the links a template's context carries


class AttendeeLinks:
    """The `links` of a template's context: empty text when nothing can be minted."""

    def __init__(self, codec: CapabilityCodec, public_base_url: str, ics_ttl_s: int) -> None:
        self.codec, self.base, self.ics_ttl_s = codec, public_base_url.rstrip("/"), ics_ttl_s

    @property
    def unavailable(self) -> list[str]:
        """The links that render as empty text here (no secret, or no public base URL)."""
        return [] if self.codec.configured and self.base else list(NAMES)

    def __call__(
        self, event_id: UUID, slot_id: UUID | None, registration_id: UUID, now: datetime
    ) -> dict[str, str]:
        if self.unavailable:
            return dict.fromkeys(NAMES, "")
        expires = now + timedelta(seconds=self.ics_ttl_s)
        ics = capabilities.mint_ics(self.codec, event_id, slot_id, expires)
        tickets = capabilities.mint_tickets(self.codec, event_id, [registration_id])
        root = f"{self.base}{BASE_PATH}"
        return {
            "ics": f"{root}{ICS_PATH}/{ics}",
            "my_tickets": f"{root}{MY_TICKETS_PATH}/{tickets}",
        }

    def waitlist(self, entry_id: UUID, event_id: UUID) -> dict[str, str]:
        """A waiting-list entry's offer page and its decline link ("" when unavailable)."""
        if self.unavailable:
            return {"offer_url": "", "decline_url": ""}
        token = waitlist_token(self.codec, entry_id, event_id)
        page = f"{self.base}{BASE_PATH}{WAITLIST_PATH}/{token}"
        return {"offer_url": page, "decline_url": f"{page}?choice=decline"}


def waitlist_token(codec: CapabilityCodec, entry_id: UUID, event_id: UUID) -> str:
    """The one capability of a waiting-list entry: its status, offer, accept and decline."""
    return capabilities.mint_waitlist(codec, entry_id, event_id)
