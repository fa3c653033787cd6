"""Ticket PDFs with reportlab: one A6 portrait page per ticket.

Text is set in DejaVu Sans, shipped in this package (`fonts/`, its licence beside it) and
embedded (subset) in every PDF, so accented, Greek and Cyrillic names print as letters on
any machine. A text too long for its box shrinks down to a floor size, then wraps onto a
bounded number of lines (the last one ends with an ellipsis when even that is not
enough): nothing runs off the page. Rendering is CPU work: callers run it off the event
loop (`render_off_loop`).
"""

from __future__ import annotations

import asyncio
import io
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reportlab.lib.pagesizes import A6
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen.canvas import Canvas

from events_svc.documents.qr import draw_qr

FONTS = Path(__file__).parent / "fonts"
REGULAR, BOLD = "DejaVuSans", "DejaVuSans-Bold"
_registered = threading.Lock()
_ready = False


def fonts() -> None:
    """Register the shipped fonts with reportlab, once per process."""
    global _ready
    with _registered:
        if not _ready:
            pdfmetrics.registerFont(TTFont(REGULAR, str(FONTS / "DejaVuSans.ttf")))
            pdfmetrics.registerFont(TTFont(BOLD, str(FONTS / "DejaVuSans-Bold.ttf")))
            _ready = True


@dataclass(frozen=True)
class TicketPage:
    """What one ticket shows (dates already written in the event's zone)."""

    event: str
    when: str
    location: str
    attendee: str
    ticket: str
    slot: str
    barcode: str


def _width(text: str, font: str, size: float) -> float:
    width: float = pdfmetrics.stringWidth(text, font, size)
    return width


def _break(word: str, font: str, size: float, width: float) -> list[str]:
    """A word wider than the box, cut into pieces that fit."""
    pieces, current = [], ""
    for char in word:
        if current and _width(current + char, font, size) > width:
            pieces.append(current)
            current = char
        else:
            current += char
    return [*pieces, current] if current else pieces


def _wrap(text: str, font: str, size: float, width: float, *, cut: bool) -> list[str] | None:
    """`text` on lines within `width` at `size`, broken between words (and, with `cut`,
    inside a word wider than the box); None when a word does not fit and may not be cut."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        pieces = _break(word, font, size, width) if cut else [word]
        for piece in pieces:
            if not cut and _width(piece, font, size) > width:
                return None
            candidate = f"{line} {piece}" if line else piece
            if _width(candidate, font, size) <= width:
                line = candidate
            else:
                lines.append(line)
                line = piece
    lines.append(line)
    return lines


def fit_lines(
    text: str, font: str, size: float, floor: float, width: float, max_lines: int
) -> tuple[list[str], float]:
    """`text` set within `width`: on one line if it fits at 70 % of `size` or more;
    else at the largest size from `size` down to `floor` at which it fits on at most
    `max_lines` lines (broken between words); else at `floor`, words cut where they must,
    the last line ending with an ellipsis."""
    text = " ".join(text.split())
    current = size
    while current >= max(floor, size * 0.7):
        if _width(text, font, current) <= width:
            return [text], current
        current -= 0.5
    current = size
    while True:
        lines = _wrap(text, font, current, width, cut=False)
        if lines is not None and len(lines) <= max_lines:
            return lines, current
        if current <= floor:
            break
        current = max(floor, current - 0.5)
    lines = _wrap(text, font, current, width, cut=True) or [text]
    if len(lines) > max_lines:
        last = lines[max_lines - 1]
        while last and _width(last + "…", font, current) > width:
            last = last[:-1]
        lines = [*lines[: max_lines - 1], last.rstrip() + "…"]
    return lines, current


def draw_text(
    canvas: Any,
    text: str,
    font: str,
    size: float,
    floor: float,
    x: float,
    top: float,
    width: float,
    *,
    max_lines: int = 2,
    centred: bool = False,
) -> float:
    """Draw `text` fitted into `width` from baseline-top `top` down; the y below it."""
    if not text:
        return top
    lines, used = fit_lines(text, font, size, floor, width, max_lines)
    canvas.setFont(font, used)
    y = top - used
    for line in lines:
        if centred:
            canvas.drawCentredString(x + width / 2, y, line)
        else:
            canvas.drawString(x, y, line)
        y -= used * 1.2
    return y + used * 0.2


def _ticket(canvas: Any, page: TicketPage) -> None:
    width, height = A6
    margin = 18.0
    inner = width - 2 * margin
    y = height - margin
    y = draw_text(canvas, page.event, BOLD, 14, 9, margin, y, inner, max_lines=3)
    y = draw_text(canvas, page.when, REGULAR, 9, 7, margin, y - 4, inner)
    y = draw_text(canvas, page.location, REGULAR, 9, 7, margin, y - 2, inner)
    canvas.setLineWidth(0.5)
    canvas.line(margin, y - 6, width - margin, y - 6)
    y = draw_text(canvas, page.attendee, BOLD, 16, 9, margin, y - 12, inner, max_lines=2)
    y = draw_text(canvas, page.ticket, REGULAR, 10, 7, margin, y - 4, inner)
    y = draw_text(canvas, page.slot, REGULAR, 10, 7, margin, y - 2, inner)
    size = min(inner, y - margin - 30)
    draw_qr(canvas, page.barcode, (width - size) / 2, margin + 22, size)
    draw_text(canvas, page.barcode, REGULAR, 11, 7, margin, margin + 18, inner, centred=True)


def tickets_pdf(pages: list[TicketPage], title: str = "Tickets") -> bytes:
    """One A6 portrait page per ticket, fonts embedded."""
    fonts()
    out = io.BytesIO()
    # the initial font is ours: no unembedded Helvetica in the resources
    canvas = Canvas(out, pagesize=A6, pageCompression=1, initialFontName=REGULAR)  # type: ignore[arg-type]  # the stubs type it as a number
    canvas.setTitle(title)
    canvas.setCreator("events-svc")
    for page in pages:
        _ticket(canvas, page)
        canvas.showPage()
    canvas.save()
    return out.getvalue()


async def render_off_loop(pages: list[TicketPage], title: str = "Tickets") -> bytes:
    """`tickets_pdf` in a worker thread: the event loop keeps serving meanwhile."""
    return await asyncio.to_thread(tickets_pdf, pages, title)
