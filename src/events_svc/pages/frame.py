"""The public pages' one Jinja2 environment and frame (`templates/_page.html`).

Autoescaped, strict about undefined names, no script, inline CSS only: every page
answers with `PAGE_POLICY` (nothing fetched), a page with the registration form with
`FORM_POLICY` (besides: its forms post only to this origin, it is never framed).
Rendering runs in a worker thread (`render_off_loop`), never on the event loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

# no source but the page itself: inline styles, the QR codes inline, nothing fetched
PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
FORM_POLICY = f"{PAGE_POLICY}; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

env = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(template: str, **context: Any) -> str:
    return env.get_template(template).render(**context)


async def render_off_loop(template: str, **context: Any) -> str:
    """`render` in a worker thread."""
    return await asyncio.to_thread(render, template, **context)
