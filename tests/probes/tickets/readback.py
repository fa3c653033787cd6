"""Reading back what we render: PDF pages rasterised by `pdftoppm` (poppler-utils) and
QR codes decoded with zxing-cpp, from those pages or from a browser's screenshot."""

from __future__ import annotations

import io
import subprocess
import tempfile
from pathlib import Path

import zxingcpp
from PIL import Image


def qr_texts(image: Image.Image) -> list[str]:
    """Every QR code zxing-cpp finds in the image, as text."""
    found = zxingcpp.read_barcodes(image, formats=zxingcpp.BarcodeFormat.QRCode)
    return [b.text for b in found]


def page_images(pdf: bytes, dpi: int = 150) -> list[Image.Image]:
    """Each page of the PDF as an image."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "doc.pdf"
        source.write_bytes(pdf)
        subprocess.run(
            ["pdftoppm", "-r", str(dpi), "-png", str(source), str(Path(folder) / "page")],
            check=True,
            capture_output=True,
            timeout=120,
        )
        pages = sorted(Path(folder).glob("page-*.png"))
        return [Image.open(io.BytesIO(p.read_bytes())) for p in pages]


def pdf_qr_texts(pdf: bytes) -> list[list[str]]:
    """The QR codes decoded on each page."""
    return [qr_texts(image) for image in page_images(pdf)]
