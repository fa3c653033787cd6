"""The documents a process renders at once (`EVENTS_DOCUMENT_CONCURRENCY`): badge sheets,
tickets PDFs and mails' attached tickets share one bound per app. With the bound at 1 and
its place held, a sheet or a tickets PDF that cannot start within the wait answers 503
`documents_busy` with `Retry-After` and no byte of the document; a streamed sheet holds
its place until its last byte, and gives it back when its client goes away or its render
fails (the page in a worker thread finished first); a mail's tickets wait their turn.
The wait is 10 s; the probes shorten it on the app's bound so they stay fast."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from pypdf import PdfReader

from events_svc import create_app
from events_svc.adapters.standalone import StoreTicketsPdf
from events_svc.documents import BadgeWriter, DocumentBound
from events_svc.documents.bound import WAIT_S
from events_svc.settings import Settings, SettingsError
from tests.probes.console.kit import served
from tests.probes.delivery.helpers import drainer, relay_settings
from tests.probes.delivery.sink import smtp_sink
from tests.probes.helpers import (
    API,
    BEGIN,
    Api,
    event_body,
    make_event,
    register,
    run,
    scheduler,
    until_true,
)

SECRET = "documents-secret-0123456789"
WAIT = 0.2  # the probes' wait for a place (the service's is WAIT_S, 10 s)
VAR = "EVENTS_DOCUMENT_CONCURRENCY"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """One document at a time, and capability links to open."""
    return dataclasses.replace(settings, capability_secrets=(SECRET,), document_concurrency=1)


@pytest.fixture
def bound(app: Any) -> DocumentBound:
    """The app's bound, its wait shortened for the probe."""
    documents: DocumentBound = app.state.events.documents
    assert (documents.limit, documents.wait_s, documents.in_use) == (1, WAIT_S, 0)
    documents.wait_s = WAIT
    return documents


async def sheet(admin: httpx.AsyncClient, pool: asyncpg.Pool, n: int) -> str:
    """An event printing A6 badges (a page each), with `n` open registrations; its id."""
    event = (await admin.post("/admin/events", json=event_body(badge_format="A6"))).json()
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event.registrations (event_id, name, state, barcode)"
            " SELECT $1, 'Guest ' || g, 'open', '55' || lpad(g::text, 12, '0')"
            " FROM generate_series(1, $2) g",
            uuid.UUID(event["id"]),
            n,
        )
    return str(event["id"])


async def tickets_link(admin: httpx.AsyncClient) -> str:
    """The tickets PDF path of a my-tickets link of one open registration."""
    event = (await admin.post("/admin/events", json=event_body())).json()
    person = await admin.post(
        "/admin/registrations", json={"event_id": event["id"], "name": "Ada Lovelace"}
    )
    minted = await admin.post(
        f"/admin/events/{event['id']}/capabilities/my-tickets",
        json={"registration_ids": [person.json()["id"]]},
    )
    return f"/public/my-tickets/{minted.json()['token']}/tickets.pdf"


def assert_busy(answer: httpx.Response) -> None:
    """503 documents_busy, a whole number of seconds to wait, and nothing of a PDF."""
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json()["error"]["code"] == "documents_busy"
    retry = answer.headers["retry-after"]
    assert retry.isascii() and retry.isdigit() and int(retry) >= 1
    assert b"%PDF" not in answer.content


def pdf_pages(answer: httpx.Response) -> int:
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/pdf"
    assert answer.content.startswith(b"%PDF") and answer.content.rstrip().endswith(b"%%EOF")
    return len(PdfReader(io.BytesIO(answer.content)).pages)


@dataclasses.dataclass
class Gate:
    """`BadgeWriter.add` held in its worker thread until the probe lets one call through."""

    permits: threading.Semaphore = dataclasses.field(default_factory=lambda: threading.Semaphore(0))
    adds: list[int] = dataclasses.field(default_factory=list)
    finished: list[int] = dataclasses.field(default_factory=list)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    held = Gate()
    add, finish = BadgeWriter.add, BadgeWriter.finish

    def gated_add(writer: BadgeWriter, badges: list[Any]) -> bytes:
        held.adds.append(len(badges))
        assert held.permits.acquire(timeout=30), "the probe never let this page through"
        return add(writer, badges)

    def counted_finish(writer: BadgeWriter) -> bytes:
        held.finished.append(1)
        return finish(writer)

    monkeypatch.setattr(BadgeWriter, "add", gated_add)
    monkeypatch.setattr(BadgeWriter, "finish", counted_finish)
    try:
        yield held
    finally:
        for _ in range(100):  # no worker thread left waiting
            held.permits.release()


def test_the_bound_is_the_cores_and_the_wait_ten_seconds_unless_set():
    cores = os.cpu_count() or 1
    assert WAIT_S == 10.0
    assert (DocumentBound().limit, DocumentBound().wait_s) == (cores, 10.0)
    assert Settings().document_concurrency == cores
    assert Settings.from_env({}).document_concurrency == cores
    assert Settings.from_env({VAR: ""}).document_concurrency == cores
    assert Settings.from_env({VAR: "3"}).document_concurrency == 3
    made = create_app(relay_settings(Settings(document_concurrency=3), 2525))
    ctx = made.state.events
    assert (ctx.documents.limit, ctx.documents.wait_s) == (3, 10.0)
    # the mails' tickets take their places in the same bound as the routes' documents
    [mail] = [t for t in ctx.ports.transports if t.channel == "mail"]
    assert isinstance(mail.tickets, StoreTicketsPdf) and mail.tickets.documents is ctx.documents
    with pytest.raises(ValueError, match="at least one"):
        DocumentBound(0)


@pytest.mark.parametrize("value", ["0", "-2", "abc", "1.5", "2 cores"])
def test_a_document_concurrency_that_is_not_a_whole_number_above_zero_is_refused(value: str):
    with pytest.raises(SettingsError, match=VAR):
        Settings.from_env({VAR: value})


@pytest.mark.parametrize("value", ["0", "abc"])
def test_serve_stops_with_one_line_naming_the_variable(value: str):
    env = {
        **os.environ,
        VAR: value,
        "EVENTS_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",  # never reached
    }
    r = subprocess.run(
        [sys.executable, "-m", "events_svc", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("events-svc: configuration error: ") and VAR in line


async def test_documents_that_cannot_start_within_the_wait_answer_documents_busy(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool, bound: DocumentBound
):
    event_id = await sheet(admin, pool, 5)
    badges = f"/admin/events/{event_id}/badges.pdf"
    tickets = await tickets_link(admin)
    held = await bound.place()  # another document renders
    try:
        for client, path in ((admin, badges), (public, tickets)):
            started = time.monotonic()
            assert_busy(await client.get(path))
            assert time.monotonic() - started >= WAIT  # it did wait its turn first
        # the refused print was checked, never audited
        async with pool.acquire() as conn:
            printed = await conn.fetchval(
                "SELECT count(*) FROM event.event_audit_log WHERE verb = 'badges_printed'"
            )
        assert printed == 0
    finally:
        held.release()
    assert bound.in_use == 0
    assert pdf_pages(await admin.get(badges)) == 5
    assert pdf_pages(await public.get(tickets)) == 1
    assert bound.in_use == 0
    # a bad link, an unknown event or a foreign filter is answered before any place is
    # asked for: its 4xx at once, never a 503
    held = await bound.place()
    try:
        gone = await public.get("/public/my-tickets/not-a-token/tickets.pdf")
        assert gone.status_code == 404
        missing = await admin.get(f"/admin/events/{uuid.uuid4()}/badges.pdf")
        assert missing.status_code == 404, missing.text
        foreign = await admin.get(badges, params={"event_slot_id": str(uuid.uuid4())})
        assert (foreign.status_code, foreign.json()["error"]["code"]) == (
            422,
            "slot_not_in_event",
        )
    finally:
        held.release()


async def test_a_document_waiting_for_a_place_gets_it_when_one_frees_within_the_wait(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, bound: DocumentBound
):
    bound.wait_s = 5.0
    tickets = await tickets_link(admin)
    held = await bound.place()
    waiting = asyncio.create_task(public.get(tickets))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    held.release()
    assert pdf_pages(await waiting) == 1
    assert bound.in_use == 0


async def test_a_streamed_sheet_holds_its_place_until_its_last_byte(
    admin: httpx.AsyncClient,
    public: httpx.AsyncClient,
    pool: asyncpg.Pool,
    bound: DocumentBound,
    gate: Gate,
):
    event_id = await sheet(admin, pool, 450)  # three pages of rows: 200, 200, 50
    tickets = await tickets_link(admin)
    printing = asyncio.create_task(admin.get(f"/admin/events/{event_id}/badges.pdf"))
    await until_true(lambda: gate.adds)  # the first page of rows is in a worker thread
    assert bound.in_use == 1
    assert_busy(await public.get(tickets))  # the sheet's place is taken
    for _ in range(3):
        gate.permits.release()
    assert pdf_pages(await printing) == 450
    assert (gate.adds, gate.finished) == ([200, 200, 50], [1])
    assert bound.in_use == 0
    assert pdf_pages(await public.get(tickets)) == 1


async def test_a_client_that_goes_away_mid_sheet_gives_the_place_back(
    app: Any, api: Api, pool: asyncpg.Pool, bound: DocumentBound, gate: Gate
):
    token = await api.token("*")
    async with served(app) as base, httpx.AsyncClient(base_url=base + API, headers=token) as http:
        event_id = await sheet(http, pool, 450)
        url = f"/admin/events/{event_id}/badges.pdf"
        async with http.stream("GET", url) as answer:
            assert answer.status_code == 200
            async for first in answer.aiter_raw():
                assert first.startswith(b"%PDF")
                break
            await until_true(lambda: gate.adds)
        # the client is gone; the page of rows in its worker thread still holds the place
        await asyncio.sleep(0.5)
        assert bound.in_use == 1
        gate.permits.release()  # that page ends: the place is given back, no page follows
        await until_true(lambda: bound.in_use == 0)
        assert (gate.adds, gate.finished) == ([200], [])
        for _ in range(3):
            gate.permits.release()
        again = await http.get(url)  # the next one gets its document
        assert pdf_pages(again) == 450


async def test_a_render_that_fails_gives_the_place_back(
    app: Any,
    api: Api,
    pool: asyncpg.Pool,
    bound: DocumentBound,
    monkeypatch: pytest.MonkeyPatch,
):
    token = await api.token("*")
    async with served(app) as base, httpx.AsyncClient(base_url=base + API, headers=token) as http:
        event_id = await sheet(http, pool, 5)
        badges = f"/admin/events/{event_id}/badges.pdf"
        tickets = await tickets_link(http)

        def broken(*_: Any, **__: Any) -> bytes:
            raise RuntimeError("a render that fails")

        monkeypatch.setattr(BadgeWriter, "add", broken)
        monkeypatch.setattr("events_svc.documents.pdf.tickets_pdf", broken)
        with pytest.raises(httpx.RemoteProtocolError):  # the stream had started: it is cut
            await http.get(badges)
        await until_true(lambda: bound.in_use == 0)
        failed = await http.get(tickets)
        assert failed.status_code == 500 and failed.json()["error"]["code"] == "internal_error"
        assert bound.in_use == 0
        monkeypatch.undo()
        assert pdf_pages(await http.get(badges)) == 5
        assert pdf_pages(await http.get(tickets)) == 1


async def test_a_mails_tickets_wait_their_turn_instead_of_failing(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings, bound: DocumentBound
):
    event = await make_event(admin)
    await register(admin, event["id"], "Анна")
    template = await admin.post(
        "/admin/templates",
        json={"name": "T", "subject": "Ticket", "body": "Hi", "attach_tickets": True},
    )
    await scheduler(admin, event["id"], template.json()["id"])
    assert (await run(api, BEGIN - timedelta(hours=12))).sent == 1
    held = await bound.place()
    with smtp_sink() as (sink, port):
        tickets = StoreTicketsPdf(lambda: pool, bound)  # as the app composes it
        sending = asyncio.create_task(
            drainer(pool, relay_settings(settings, port), tickets).drain()
        )
        await asyncio.sleep(WAIT * 3)  # far past the wait a request would be refused after
        assert not sending.done() and sink.accepted == []
        held.release()
        summary = await sending
    assert summary.sent == 1 and summary.failed == 0
    [mail] = sink.accepted
    [pdf] = [p for p in mail.iter_attachments() if p.get_content_type() == "application/pdf"]
    assert "Анна" in PdfReader(io.BytesIO(pdf.get_content())).pages[0].extract_text()
    assert bound.in_use == 0
