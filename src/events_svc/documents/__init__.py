"""Documents rendered when asked, from the rows, never stored: QR codes of barcodes (the
payload is the barcode exactly), ticket PDFs (reportlab, fonts shipped and embedded) and
badge sheets (written as a stream)."""

from events_svc.documents.badges import FORMATS, Badge, BadgeWriter, badge_stream
from events_svc.documents.pdf import TicketPage, render_off_loop, tickets_pdf
from events_svc.documents.qr import qr_svg
from events_svc.documents.words import moment, span

__all__ = [
    "FORMATS",
    "Badge",
    "BadgeWriter",
    "TicketPage",
    "badge_stream",
    "moment",
    "qr_svg",
    "render_off_loop",
    "span",
    "tickets_pdf",
]
