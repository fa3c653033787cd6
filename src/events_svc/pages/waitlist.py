"""A waiting-list entry's page: its status and place, and the offer's accept and decline
forms (they post to the entry's link; a browser is answered with a redirect)."""

from __future__ import annotations

from typing import Any

from events_svc.documents import span, when
from events_svc.pages.frame import render_off_loop

WORDS = {
    "waiting": "You are on the waiting list.",
    "offered": "A place is free for you: answer before the deadline.",
    "accepted": "You accepted the offer: your tickets are ready.",
    "declined": "You left the waiting list.",
    "expired": "The offer ran out: its seats went to the next person in the queue.",
    "removed": "This entry was taken off the waiting list.",
}


async def render_entry(
    view: dict[str, Any], urls: dict[str, str | None], choice: str | None
) -> str:
    """The page of an entry's status view (as the JSON answers it)."""
    event = view["event"]
    zone = event["date_tz"]
    deadline = ""
    if view["offer_expires_at"] is not None:
        deadline = when(view["offer_expires_at"], zone)
    words = WORDS[view["status"]]
    if view["status"] == "waiting" and view["position"]:
        words = f"You are number {view['position']} in the queue."
    seats = view["seats"]
    return await render_off_loop(
        "waitlist.html",
        event=event,
        when=span(event["date_begin"], event["date_end"], zone),
        status=view["status"],
        words=words,
        seats_words="1 seat is" if seats == 1 else f"{seats} seats are",
        deadline=deadline,
        choice=choice,
        **urls,
    )
