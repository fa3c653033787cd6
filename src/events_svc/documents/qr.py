"""QR codes of barcodes: the payload is the barcode exactly (what the desk verb matches),
error correction level M, a quiet zone of four modules. One code, two renderings: inline
SVG for the tickets page, filled squares drawn on a reportlab canvas for the PDFs."""

from __future__ import annotations

from html import escape
from typing import Any

import segno

QUIET = 4  # modules of white around the code (the QR standard's quiet zone)


def _code(payload: str) -> segno.QRCode:
    return segno.make_qr(payload, error="m", boost_error=False)


def qr_svg(payload: str, label: str) -> str:
    """The code as inline SVG (scales with its box; white background; `label` is its
    accessible name)."""
    svg: str = _code(payload).svg_inline(
        scale=1, border=QUIET, dark="#000", light="#fff", omitsize=True, svgclass="qr"
    )
    return svg.replace("<svg ", f'<svg role="img" aria-label="{escape(label)}" ', 1)


def draw_qr(canvas: Any, payload: str, x: float, y: float, size: float) -> None:
    """Draw the code (quiet zone included) in the square of side `size` whose lower left
    corner is (x, y): one filled rectangle per horizontal run of dark modules."""
    matrix = _code(payload).matrix
    modules = len(matrix) + 2 * QUIET
    unit = size / modules
    canvas.saveState()
    canvas.setFillColorRGB(1, 1, 1)
    canvas.rect(x, y, size, size, stroke=0, fill=1)
    canvas.setFillColorRGB(0, 0, 0)
    path = canvas.beginPath()
    for row, line in enumerate(matrix):
        top = y + size - (row + QUIET + 1) * unit
        col = 0
        while col < len(line):
            if not line[col]:
                col += 1
                continue
            start = col
            while col < len(line) and line[col]:
                col += 1
            path.rect(x + (start + QUIET) * unit, top, (col - start) * unit, unit)
    canvas.drawPath(path, stroke=0, fill=1)
    canvas.restoreState()
