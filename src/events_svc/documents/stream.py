"""A PDF written as a stream: pages leave as they are drawn, memory stays flat.

reportlab keeps a whole document until it saves it; a sheet of 5 000 badges should not.
This writer emits each page (its content stream and page object) at once and keeps only
the objects' offsets, the page numbers and the glyphs used. Object numbers of the page
tree and the fonts are reserved up front and written at the end, when the glyphs used
are known: the two shipped DejaVu Sans faces go in whole (Type 0, Identity-H, their
TrueType programs compressed once per process) with the widths and a ToUnicode map of
the glyphs used, so the names print as letters and can be extracted as text.

Drawing is a small set of operations (`Page`): text in one of the two faces, filled
rectangles (QR modules), stroked lines and rectangles. Measurements come from the same
font files through reportlab's metrics (`documents.pdf.fit_lines`).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont

from events_svc.documents.pdf import BOLD, FONTS, REGULAR, fonts

_FACES = {REGULAR: ("F1", "DejaVuSans.ttf"), BOLD: ("F2", "DejaVuSans-Bold.ttf")}
# reserved object numbers: catalog, page tree, then five per face
_CATALOG, _PAGES = 1, 2
_FONT_OBJECTS = {REGULAR: 3, BOLD: 8}  # Type0, CIDFont, descriptor, program, ToUnicode
_FIRST_FREE = 13


def _face(name: str) -> Any:
    """The parsed TrueType face of a registered font (metrics, glyph map)."""
    font = pdfmetrics.getFont(name)
    assert isinstance(font, TTFont)
    return font.face


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") or "0"


@functools.lru_cache(maxsize=2)
def _program(filename: str) -> tuple[bytes, int]:
    """A face's TrueType program compressed (once per process), and its length."""
    data = (FONTS / filename).read_bytes()
    return zlib.compress(data, 6), len(data)


@dataclass
class Page:
    """The drawing operations of one page (PDF user space: origin bottom left, points)."""

    writer: PdfStream
    ops: list[str] = field(default_factory=list)

    def text(self, face: str, size: float, x: float, y: float, text: str) -> None:
        glyphs = self.writer.glyphs(face, text)
        key = _FACES[face][0]
        self.ops.append(
            f"BT /{key} {_number(size)} Tf {_number(x)} {_number(y)} Td <{glyphs}> Tj ET"
        )

    def centred(self, face: str, size: float, x: float, y: float, width: float, text: str) -> None:
        used = pdfmetrics.stringWidth(text, face, size)
        self.text(face, size, x + (width - used) / 2, y, text)

    def gray(self, level: float) -> None:
        self.ops.append(f"{_number(level)} g {_number(level)} G")

    def fill_rect(self, x: float, y: float, w: float, h: float) -> None:
        self.ops.append(f"{_number(x)} {_number(y)} {_number(w)} {_number(h)} re f")

    def stroke_rect(self, x: float, y: float, w: float, h: float, width: float = 0.5) -> None:
        self.ops.append(
            f"{_number(width)} w {_number(x)} {_number(y)} {_number(w)} {_number(h)} re S"
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, width: float = 0.5) -> None:
        self.ops.append(
            f"{_number(width)} w {_number(x1)} {_number(y1)} m {_number(x2)} {_number(y2)} l S"
        )

    def content(self) -> bytes:
        return "\n".join(self.ops).encode("ascii")


class PdfStream:
    """Writes one document: `start()`, then `page(...)` for each page, then `finish()`;
    each returns the bytes to send next."""

    def __init__(self, width: float, height: float, title: str) -> None:
        fonts()
        self.width, self.height, self.title = width, height, title
        self.offset = 0
        self.offsets: dict[int, int] = {}
        self.pages: list[int] = []
        self.next_object = _FIRST_FREE
        self.used: dict[str, dict[int, str]] = {REGULAR: {}, BOLD: {}}  # glyph -> character

    def glyphs(self, face: str, text: str) -> str:
        """The text as hex glyph ids of the face (Identity-H), noting each glyph used."""
        mapping = _face(face).charToGlyph
        used = self.used[face]
        out = []
        for char in text:
            glyph = mapping.get(ord(char), 0)
            used.setdefault(glyph, char)
            out.append(f"{glyph:04x}")
        return "".join(out)

    def _object(self, number: int, body: bytes) -> bytes:
        self.offsets[number] = self.offset
        chunk = b"%d 0 obj\n" % number + body + b"\nendobj\n"
        self.offset += len(chunk)
        return chunk

    def _stream(self, number: int, data: bytes, extra: str = "", packed: bool = False) -> bytes:
        """A stream object, deflated (`packed`: `data` is deflated already)."""
        body = data if packed else zlib.compress(data, 6)
        head = f"<< /Length {len(body)} /Filter /FlateDecode{extra} >>"
        return self._object(number, head.encode() + b"\nstream\n" + body + b"\nendstream")

    def start(self) -> bytes:
        head = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"
        self.offset = len(head)
        return head

    def new_page(self) -> Page:
        return Page(self)

    def page(self, page: Page) -> bytes:
        """The page's content and its page object."""
        content, number = self.next_object, self.next_object + 1
        self.next_object += 2
        self.pages.append(number)
        fonts_ref = " ".join(
            f"/{key} {_FONT_OBJECTS[face]} 0 R" for face, (key, _) in _FACES.items()
        )
        body = (
            f"<< /Type /Page /Parent {_PAGES} 0 R /MediaBox [0 0 {_number(self.width)} "
            f"{_number(self.height)}] /Resources << /Font << {fonts_ref} >> >> "
            f"/Contents {content} 0 R >>"
        )
        return self._stream(content, page.content()) + self._object(number, body.encode())

    def _font(self, face: str) -> Iterator[bytes]:
        first = _FONT_OBJECTS[face]
        cid, descriptor, program, to_unicode = first + 1, first + 2, first + 3, first + 4
        font = _face(face)
        name = face
        used = self.used[face]
        widths = " ".join(
            f"{glyph} [{_number(font.charWidths.get(ord(char), font.defaultWidth))}]"
            for glyph, char in sorted(used.items())
        )
        yield self._object(
            first,
            (
                f"<< /Type /Font /Subtype /Type0 /BaseFont /{name} /Encoding /Identity-H "
                f"/DescendantFonts [{cid} 0 R] /ToUnicode {to_unicode} 0 R >>"
            ).encode(),
        )
        yield self._object(
            cid,
            (
                f"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /{name} "
                "/CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> "
                f"/FontDescriptor {descriptor} 0 R /CIDToGIDMap /Identity "
                f"/DW {_number(font.defaultWidth)} /W [{widths}] >>"
            ).encode(),
        )
        box = " ".join(_number(v) for v in font.bbox)
        yield self._object(
            descriptor,
            (
                f"<< /Type /FontDescriptor /FontName /{name} /Flags 32 /FontBBox [{box}] "
                f"/ItalicAngle {_number(font.italicAngle)} /Ascent {_number(font.ascent)} "
                f"/Descent {_number(font.descent)} /CapHeight {_number(font.capHeight)} "
                f"/StemV {_number(font.stemV)} /FontFile2 {program} 0 R >>"
            ).encode(),
        )
        packed, raw = _program(_FACES[face][1])
        yield self._stream(program, packed, f" /Length1 {raw}", packed=True)
        yield self._stream(to_unicode, _cmap(used))

    def finish(self) -> bytes:
        """The page tree, the fonts, the catalog, the cross-reference table, the trailer."""
        kids = " ".join(f"{n} 0 R" for n in self.pages)
        out = [
            self._object(
                _PAGES, f"<< /Type /Pages /Kids [{kids}] /Count {len(self.pages)} >>".encode()
            )
        ]
        for face in _FACES:
            out.extend(self._font(face))
        out.append(self._object(_CATALOG, f"<< /Type /Catalog /Pages {_PAGES} 0 R >>".encode()))
        info = self.next_object
        title = self.title.encode("utf-16-be").hex()
        out.append(self._object(info, f"<< /Title <feff{title}> /Creator (events-svc) >>".encode()))
        size = info + 1
        xref = [b"xref\n0 %d\n" % size, b"0000000000 65535 f \n"]
        for number in range(1, size):
            at = self.offsets.get(number)
            xref.append(b"%010d 00000 n \n" % at if at is not None else b"0000000000 65535 f \n")
        start = self.offset
        trailer = (
            f"trailer\n<< /Size {size} /Root {_CATALOG} 0 R /Info {info} 0 R >>\n"
            f"startxref\n{start}\n%%EOF\n"
        ).encode()
        return b"".join(out) + b"".join(xref) + trailer


def _cmap(used: dict[int, str]) -> bytes:
    """A ToUnicode map of the glyphs used (text extraction and search read it)."""
    lines = [
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap",
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def",
        "/CMapName /Adobe-Identity-UCS def /CMapType 2 def",
        "1 begincodespacerange <0000> <FFFF> endcodespacerange",
    ]
    items = sorted(used.items())
    for start in range(0, len(items), 100):
        block = items[start : start + 100]
        lines.append(f"{len(block)} beginbfchar")
        for glyph, char in block:
            code = char.encode("utf-16-be").hex()
            lines.append(f"<{glyph:04x}> <{code}>")
        lines.append("endbfchar")
    lines.append("endcmap CMapName currentdict /CMap defineresource pop end end")
    return "\n".join(lines).encode("ascii")
