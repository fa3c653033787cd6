"""QR codes of barcodes: the payload is the barcode exactly (what the desk verb matches),
error correction level M, a quiet zone of four modules. One code, two renderings: inline
SVG for the tickets page, filled squares drawn on a reportlab canvas for the PDFs."""

from __future__ import annotations

from html import escape
from typing import Any

import segno

QUIET = 4  # modules of white around the code (the QR standard's quiet zone)


def _code(payload: str, *, bulk: bool = False) -> segno.QRCode:
    """The code of `payload`. The encoder picks the mask that scans best by default;
    `bulk` (a sheet of thousands of badges) uses mask 0 instead, ten times faster, still a
    standard symbol every reader decodes."""
    return segno.make_qr(payload, error="m", boost_error=False, mask=0 if bulk else None)


def qr_svg(payload: str, label: str) -> str:
    """The code as inline SVG (scales with its box; white background; `label` is its
    accessible name)."""
    svg: str = _code(payload).svg_inline(
        scale=1, border=QUIET, dark="#000", light="#fff", omitsize=True, svgclass="qr"
    )
    return svg.replace("<svg ", f'<svg role="img" aria-label="{escape(label)}" ', 1)


def qr_squares(
    payload: str, x: float, y: float, size: float, *, bulk: bool = False
) -> list[tuple[float, ...]]:
    """The dark squares of the code drawn in the square of side `size` whose lower left
    corner is (x, y), quiet zone included: one rectangle (x, y, w, h) per horizontal run
    of dark modules. Both PDF writers draw these."""
    matrix = _code(payload, bulk=bulk).matrix
    unit = size / (len(matrix) + 2 * QUIET)
    squares: list[tuple[float, ...]] = []
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
            squares.append((x + (start + QUIET) * unit, top, (col - start) * unit, unit))
    return squares


def draw_qr(canvas: Any, payload: str, x: float, y: float, size: float) -> None:
    """Draw the code on a reportlab canvas (a white square, then the dark runs)."""
    canvas.saveState()
    canvas.setFillColorRGB(1, 1, 1)
    canvas.rect(x, y, size, size, stroke=0, fill=1)
    canvas.setFillColorRGB(0, 0, 0)
    path = canvas.beginPath()
    for square in qr_squares(payload, x, y, size):
        path.rect(*square)
    canvas.drawPath(path, stroke=0, fill=1)
    canvas.restoreState()
