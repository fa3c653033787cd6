"""Documents rendered when asked, from the rows, never stored: QR codes of barcodes (the
payload is the barcode exactly) and ticket PDFs (reportlab, fonts shipped and embedded)."""

from events_svc.documents.pdf import TicketPage, render_off_loop, tickets_pdf
from events_svc.documents.qr import qr_svg
from events_svc.documents.words import span

__all__ = ["TicketPage", "qr_svg", "render_off_loop", "span", "tickets_pdf"]
