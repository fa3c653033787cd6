"""The attendee's tickets page: the my-tickets JSON rendered as HTML for a browser.

A Jinja2 template (autoescaped, inline CSS, no script, no external request) that reads
on a 390 px phone and on a desktop: the event, then each registration with its state;
`open` and `done` ones carry their barcode as a QR code (inline SVG, the payload exactly
the barcode) with the barcode's text under it, drafts and cancelled ones are marked and
carry none. The QR codes are drawn off the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from events_svc.documents import qr_svg, span
from events_svc.pages.frame import render

STATE_WORDS = {
    "open": "Confirmed",
    "done": "Attended",
    "draft": "Not confirmed",
    "cancel": "Cancelled",
}
VOID_WORDS = {
    "draft": "Not confirmed yet: no ticket to show.",
    "cancel": "Cancelled: this ticket is not valid.",
}
PRINTABLE = frozenset({"open", "done"})


def _slot(slot: dict[str, Any] | None, zone: str) -> str:
    return span(slot["date_begin"], slot["date_end"], zone) if slot else ""


def _render(view: dict[str, Any], ics_url: str | None, pdf_url: str) -> str:
    event = view["event"]
    zone = event["date_tz"]
    tickets = []
    for r in view["registrations"]:
        printable = r["state"] in PRINTABLE
        tickets.append(
            {
                "id": r["id"],
                "name": r["name"],
                "state": r["state"],
                "state_words": STATE_WORDS[r["state"]],
                "ticket": r["ticket"]["name"] if r["ticket"] else "",
                "slot": _slot(r["slot"], zone),
                "printable": printable,
                "qr": qr_svg(r["barcode"], f"QR code of ticket {r['barcode']}")
                if printable
                else "",
                "barcode": r["barcode"],
                "void_words": VOID_WORDS.get(r["state"], ""),
            }
        )
    return render(
        "my_tickets.html",
        event=event,
        when=span(event["date_begin"], event["date_end"], zone),
        tickets=tickets,
        printable=any(t["printable"] for t in tickets),
        ics_url=ics_url,
        pdf_url=pdf_url,
    )


async def render_tickets(view: dict[str, Any], ics_url: str | None, pdf_url: str) -> str:
    """The page of a my-tickets view (as the JSON answers it), rendered in a worker thread."""
    return await asyncio.to_thread(_render, view, ics_url, pdf_url)
