"""A real spreadsheet engine for the export probes: LibreOffice Calc, headless.

`open_in_calc` converts CSV files the way a user's double click would (Calc's default CSV
import, which evaluates formulas) into flat OpenDocument (.fods) and reads every cell back:
its text and whether Calc made it a formula. Each call uses a private profile, so parallel
runs never share one. The engine is installed by `scripts/ensure-debian-packages`, which
`make test` runs first; without it the probe fails, naming the package.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "libreoffice-calc-nogui"
_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"


@dataclass(frozen=True)
class Cell:
    text: str
    value_type: str | None  # string, float, ... (None: an empty cell)
    formula: str | None  # what Calc would compute, when it made the cell a formula


def soffice() -> str:
    """The LibreOffice binary; fails (never skips) naming the package when it is missing."""
    found = shutil.which("soffice") or shutil.which("libreoffice")
    assert found, f"LibreOffice is missing: install the Debian package {PACKAGE} (make test does)"
    return found


def _paragraph(node: ET.Element) -> str:
    """The text of a <text:p>, with its tabs, repeated spaces and line breaks."""
    parts = [node.text or ""]
    for child in node:
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "s":
            parts.append(" " * int(child.get(f"{{{_TEXT}}}c", "1")))
        elif tag == "tab":
            parts.append("\t")
        elif tag == "line-break":
            parts.append("\n")
        else:
            parts.append(_paragraph(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _cells(path: Path) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for row in ET.parse(path).getroot().iter(f"{{{_TABLE}}}table-row"):
        cells: list[Cell] = []
        for cell in row:
            if cell.tag.rsplit("}", 1)[-1] != "table-cell":
                continue
            text = "\n".join(_paragraph(p) for p in cell.iter(f"{{{_TEXT}}}p"))
            repeat = int(cell.get(f"{{{_TABLE}}}number-columns-repeated", "1"))
            seen = Cell(
                text, cell.get(f"{{{_OFFICE}}}value-type"), cell.get(f"{{{_TABLE}}}formula")
            )
            cells.extend([seen] * min(repeat, 64))  # trailing empty cells come repeated
        while cells and cells[-1].value_type is None and not cells[-1].text:
            cells.pop()
        rows.append(cells)
    return rows


def open_in_calc(*files: Path, timeout: float = 60) -> dict[str, list[list[Cell]]]:
    """Each CSV file as Calc reads it: rows of cells, by file name."""
    binary = soffice()
    with tempfile.TemporaryDirectory(prefix="calc-") as tmp:
        profile = Path(tmp, "profile").as_uri()
        out = Path(tmp, "out")
        done = subprocess.run(
            [
                binary,
                f"-env:UserInstallation={profile}",
                "--headless",
                "--norestore",
                "--convert-to",
                "fods",
                "--outdir",
                str(out),
                *(str(f) for f in files),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        converted = {f.name: out / (f.stem + ".fods") for f in files}
        missing = [name for name, path in converted.items() if not path.exists()]
        assert not missing, f"Calc converted nothing for {missing}: {done.stdout} {done.stderr}"
        return {name: _cells(path) for name, path in converted.items()}
