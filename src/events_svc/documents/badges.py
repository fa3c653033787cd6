"""Badges in an event's `badge_format`, written as a stream (`documents.stream`).

`A6`: one A6 portrait page per badge. `A4_french_fold`: one A4 page per badge, the badge
on the upper half (folded, the lower half is its back). `four_per_sheet`: A4 pages of
four badges, 2 x 2, with thin cut lines. A badge shows the event's name, the attendee's
name (as large as it fits, shrinking then wrapping on two lines, never past its box),
the company, the ticket, and the QR code of the barcode with the barcode under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from reportlab.lib.pagesizes import A4, A6

from events_svc.documents.pdf import BOLD, REGULAR, fit_lines
from events_svc.documents.qr import qr_squares
from events_svc.documents.stream import Page, PdfStream

FORMATS = ("A6", "A4_french_fold", "four_per_sheet")


@dataclass(frozen=True)
class Badge:
    event: str
    attendee: str
    company: str
    ticket: str
    barcode: str


def _lines(
    page: Page,
    text: str,
    face: str,
    size: float,
    floor: float,
    x: float,
    top: float,
    width: float,
    max_lines: int,
) -> float:
    """Centred `text` fitted into `width` from `top` down; the y below it."""
    if not text:
        return top
    lines, used = fit_lines(text, face, size, floor, width, max_lines)
    y = top - used
    for line in lines:
        page.centred(face, used, x, y, width, line)
        y -= used * 1.2
    return y + used * 0.2


def _qr(page: Page, payload: str, x: float, y: float, size: float) -> None:
    page.gray(0)
    for square in qr_squares(payload, x, y, size, bulk=True):
        page.fill_rect(*square)


def draw_badge(page: Page, badge: Badge, x: float, y: float, w: float, h: float) -> None:
    """One badge in the box (x, y, w, h)."""
    pad = min(w, h) * 0.06
    inner = w - 2 * pad
    scale = w / A6[0]  # sizes are set for an A6 badge and scale with the box
    top = y + h - pad
    top = _lines(page, badge.event, BOLD, 13 * scale, 8 * scale, x + pad, top, inner, 2)
    page.line(x + pad, top - 6 * scale, x + w - pad, top - 6 * scale)
    top = _lines(
        page, badge.attendee, BOLD, 30 * scale, 10 * scale, x + pad, top - 14 * scale, inner, 2
    )
    top = _lines(
        page, badge.company, REGULAR, 14 * scale, 8 * scale, x + pad, top - 6 * scale, inner, 2
    )
    top = _lines(
        page, badge.ticket, REGULAR, 11 * scale, 7 * scale, x + pad, top - 4 * scale, inner, 1
    )
    code_floor = y + pad + 14 * scale
    size = max(min(inner * 0.55, top - 8 * scale - code_floor), 40.0)
    _qr(page, badge.barcode, x + (w - size) / 2, code_floor, size)
    _lines(page, badge.barcode, REGULAR, 9 * scale, 6 * scale, x + pad, code_floor - 1, inner, 1)


def _sheet(fmt: str) -> tuple[float, float]:
    return A6 if fmt == "A6" else A4


class BadgeWriter:
    """A badge sheet written as it goes: `start()`, `add(badges)` as rows arrive (the
    pages they complete), `finish()` (the last page and the trailer)."""

    def __init__(self, fmt: str, title: str) -> None:
        width, height = _sheet(fmt)
        self.fmt = fmt
        self.pdf = PdfStream(width, height, title)
        self.per_page = 4 if fmt == "four_per_sheet" else 1
        self.pending: list[Badge] = []

    def start(self) -> bytes:
        return self.pdf.start()

    def add(self, badges: list[Badge]) -> bytes:
        self.pending.extend(badges)
        out = []
        while len(self.pending) >= self.per_page:
            out.append(_page(self.pdf, self.pending[: self.per_page], self.fmt))
            del self.pending[: self.per_page]
        return b"".join(out)

    def finish(self) -> bytes:
        last = _page(self.pdf, self.pending, self.fmt) if self.pending else b""
        self.pending = []
        if not self.pdf.pages:  # a PDF has at least one page: say why it holds no badge
            page = self.pdf.new_page()
            page.gray(0)
            page.text(REGULAR, 12, 36, self.pdf.height - 60, "No badge matches these filters.")
            last = self.pdf.page(page)
        return last + self.pdf.finish()


def badge_stream(badges: Iterable[list[Badge]], fmt: str, title: str) -> Iterator[bytes]:
    """The PDF's bytes, a chunk per batch of badges given (pages leave as they are made)."""
    writer = BadgeWriter(fmt, title)
    yield writer.start()
    for batch in badges:
        yield writer.add(batch)
    yield writer.finish()


def _page(pdf: PdfStream, badges: list[Badge], fmt: str) -> bytes:
    page = pdf.new_page()
    width, height = pdf.width, pdf.height
    if fmt == "A6":
        draw_badge(page, badges[0], 0, 0, width, height)
    elif fmt == "A4_french_fold":
        half = height / 2
        draw_badge(page, badges[0], 0, half, width, half)
        page.gray(0.6)
        page.line(0, half, width, half, 0.3)  # the fold
    else:
        w, h = width / 2, height / 2
        for i, badge in enumerate(badges):
            draw_badge(page, badge, (i % 2) * w, (1 - i // 2) * h, w, h)
        page.gray(0.6)
        page.line(w, 0, w, height, 0.3)  # cut lines
        page.line(0, h, width, h, 0.3)
    return pdf.page(page)
