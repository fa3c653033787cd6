"""Documents rendered when asked, from the rows, never stored: QR codes of barcodes (the
payload is the barcode exactly), ticket PDFs (reportlab, fonts shipped and embedded),
badge sheets (written as a stream), calendars (iCalendar) and the words of times; and
the bound on how many documents a process renders at once (`bound`)."""

from events_svc.documents.badges import FORMATS, Badge, BadgeWriter, badge_stream
from events_svc.documents.bound import DocumentBound, Slot
from events_svc.documents.calendar import build_calendar
from events_svc.documents.pdf import TicketPage, render_off_loop, tickets_pdf
from events_svc.documents.qr import qr_svg
from events_svc.documents.words import local, moment, span, when

__all__ = [
    "FORMATS",
    "Badge",
    "BadgeWriter",
    "DocumentBound",
    "Slot",
    "TicketPage",
    "badge_stream",
    "build_calendar",
    "local",
    "moment",
    "qr_svg",
    "render_off_loop",
    "span",
    "tickets_pdf",
    "when",
]
