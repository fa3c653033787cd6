"""What the event page's probes share: an event made through the admin API (published, with
tickets and questions), the page read as a browser would (its forms' fields, its messages,
its JSON-LD), and a form posted back with what a person typed."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import httpx

from tests.probes.helpers import event_body

SECRET = "pages-secret-0123456789"
HTML = {"Accept": "text/html"}


async def published(admin: httpx.AsyncClient, **over: Any) -> dict[str, Any]:
    r = await admin.post("/admin/events", json=event_body(**over))
    assert r.status_code == 201, r.text
    event = dict(r.json())
    done = await admin.post(
        f"/admin/events/{event['id']}/publish", json={"date_publish": "2020-01-01T00:00:00Z"}
    )
    assert done.status_code == 200, done.text
    return event


async def question(
    admin: httpx.AsyncClient,
    event_id: str,
    title: str,
    kind: str = "text_box",
    *,
    mandatory: bool = False,
    answers: tuple[str, ...] = (),
    once_per_order: bool = False,
) -> dict[str, Any]:
    body = {
        "title": title,
        "question_type": kind,
        "is_mandatory_answer": mandatory,
        "answers": [{"name": a} for a in answers],
    }
    q = await admin.post("/admin/questions", json=body)
    assert q.status_code == 201, q.text
    link = {"question_id": q.json()["id"], "once_per_order": once_per_order}
    linked = await admin.post(f"/admin/events/{event_id}/questions", json=link)
    assert linked.status_code in (200, 201), linked.text
    return dict(q.json())


@dataclass
class Control:
    tag: str
    attrs: dict[str, str]
    form: int
    options: list[dict[str, str]] = field(default_factory=list)
    text: str = ""


class _Reader(HTMLParser):
    """The page's forms, controls, labels, links and messages."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[dict[str, str]] = []
        self.controls: list[Control] = []
        self.labels: dict[str, str] = {}
        self.links: list[str] = []
        self.scripts: list[dict[str, str]] = []
        self.json_ld: list[str] = []
        self._label: str | None = None
        self._in_ld = False
        self._textarea: Control | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append(a)
        elif tag in ("input", "select", "textarea", "button"):
            control = Control(tag, a, len(self.forms) - 1)
            self.controls.append(control)
            if tag == "textarea":
                self._textarea = control
        elif tag == "option" and self.controls:
            self.controls[-1].options.append(a)
        elif tag == "label":
            self._label = a.get("for", "")
            if self._label:
                self.labels[self._label] = ""
        elif tag == "a":
            self.links.append(a.get("href", ""))
        elif tag == "script":
            self.scripts.append(a)
            self._in_ld = a.get("type") == "application/ld+json"

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self._label = None
        elif tag == "script":
            self._in_ld = False
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._label:
            self.labels[self._label] += data
        if self._in_ld:
            self.json_ld.append(data)
        if self._textarea is not None:
            self._textarea.text += data


@dataclass
class Page:
    html: str
    reader: _Reader

    def form(self, action_ends: str) -> tuple[str, dict[str, str]]:
        """(action, the fields a browser would send as the form stands) of the form whose
        action ends with `action_ends`."""
        index = next(
            i for i, f in enumerate(self.reader.forms) if f["action"].endswith(action_ends)
        )
        values: dict[str, str] = {}
        for c in self.reader.controls:
            name = c.attrs.get("name")
            if c.form != index or not name or c.tag == "button" or "disabled" in c.attrs:
                continue
            if c.tag == "select":
                chosen = [o for o in c.options if "selected" in o] or c.options[:1]
                if chosen:
                    values[name] = chosen[0].get("value", "")
            elif c.attrs.get("type") in ("radio", "checkbox"):
                if "checked" in c.attrs:
                    values[name] = c.attrs.get("value", "")
            elif c.tag == "textarea":
                values[name] = c.text
            else:
                values[name] = c.attrs.get("value", "")
        return self.reader.forms[index]["action"], values

    def controls(self, name: str) -> list[Control]:
        return [c for c in self.reader.controls if c.attrs.get("name") == name]

    def error(self, field_name: str) -> str | None:
        """The message shown beside a field (None: none)."""
        found = re.search(
            rf'<p class="error" id="{re.escape(field_name)}-error"[^>]*>([^<]*)</p>', self.html
        )
        return found.group(1) if found else None

    def codes(self) -> list[str]:
        """The codes of the messages at the top."""
        return re.findall(r'data-code="([a-z_]+)"', self.html)

    def json_ld(self) -> dict[str, Any]:
        [text] = self.reader.json_ld
        item: dict[str, Any] = json.loads(text)
        return item


def read(html: str) -> Page:
    reader = _Reader()
    reader.feed(html)
    return Page(html, reader)


def path_of(url: str) -> str:
    """The path under the API's base of an absolute URL the page carries."""
    return url.split("/api/v1/event", 1)[1]


async def open_page(public: httpx.AsyncClient, key: str) -> Page:
    r = await public.get(f"/public/events/{key}", headers=HTML)
    assert r.status_code == 200, r.text
    return read(r.text)
