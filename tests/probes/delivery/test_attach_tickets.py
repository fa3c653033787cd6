"""A mail template's `attach_tickets`: written and read through the API, carried by the
outbox row as a reference (never the file), rendered by the tickets port when the
message is sent; without a renderer the message fails visibly as `render`."""

from __future__ import annotations

import asyncio
import io
import uuid
from datetime import timedelta

import asyncpg
import httpx
from pypdf import PdfReader

from events_svc.adapters.standalone import StoreTicketsPdf
from events_svc.settings import Settings
from tests.probes.delivery.helpers import drainer, relay_settings
from tests.probes.delivery.sink import smtp_sink
from tests.probes.helpers import BEGIN, Api, api_status, make_event, register, run, scheduler
from tests.probes.tickets.readback import pdf_qr_texts

PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"


class Tickets:
    """A tickets renderer, as the tickets page composes one."""

    def __init__(self) -> None:
        self.asked: list[uuid.UUID] = []

    async def tickets_pdf(self, registration_id: uuid.UUID) -> bytes:
        self.asked.append(registration_id)
        return PDF


async def mail_with_tickets(api: Api, admin: httpx.AsyncClient, name: str) -> tuple[dict, str]:
    """An event, an attendee `name`, and the mail of a line whose template attaches the
    tickets, queued by a scheduler pass; the event and the registration's id."""
    event = await make_event(admin)
    registration = await register(admin, event["id"], name)
    template = await admin.post(
        "/admin/templates",
        json={"name": "T", "subject": "Ticket", "body": "Hi", "attach_tickets": True},
    )
    await scheduler(admin, event["id"], template.json()["id"])
    assert (await run(api, BEGIN - timedelta(hours=12))).sent == 1
    return event, registration


async def test_the_template_field_is_written_read_and_refused_on_sms(admin: httpx.AsyncClient):
    body = {"name": "Ticket mail", "subject": "Your ticket", "body": "Hello"}
    plain = await admin.post("/admin/templates", json=body)
    assert plain.status_code == 201 and plain.json()["attach_tickets"] is False
    made = await admin.post("/admin/templates", json={**body, "attach_tickets": True})
    assert made.status_code == 201 and made.json()["attach_tickets"] is True
    template_id = made.json()["id"]
    read = await admin.get(f"/admin/templates/{template_id}")
    assert read.json()["attach_tickets"] is True
    patched = await admin.patch(f"/admin/templates/{template_id}", json={"attach_tickets": False})
    assert patched.status_code == 200 and patched.json()["attach_tickets"] is False
    # text messages carry no file; a null or a string is not a boolean
    sms = {"kind": "sms", "name": "Text", "body": "Hello", "attach_tickets": True}
    assert await api_status(admin, "POST", "/admin/templates", json=sms) == (
        422,
        "field_not_writable",
    )
    text = await admin.post("/admin/templates", json={**sms, "attach_tickets": False})
    assert text.status_code == 201
    refused = await api_status(
        admin, "PATCH", f"/admin/templates/{text.json()['id']}", json={"attach_tickets": True}
    )
    assert refused == (422, "field_not_writable")
    for bad in (None, "yes"):
        status, _ = await api_status(
            admin, "PATCH", f"/admin/templates/{template_id}", json={"attach_tickets": bad}
        )
        assert status == 422
    assert (await admin.get(f"/admin/templates/{template_id}")).json()["attach_tickets"] is False


async def test_a_line_with_attach_tickets_sends_the_attendees_pdf(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
):
    event, registration = await mail_with_tickets(api, admin, "Ada")

    # the outbox keeps a reference, never the file
    listed = await admin.get("/admin/outbox", params={"event_id": event["id"], "pii": "full"})
    [message] = listed.json()["items"]
    assert message["attachments"] == [
        {
            "filename": "tickets.pdf",
            "content_type": "application/pdf",
            "content": None,
            "kind": "tickets_pdf",
            "registration_id": registration,
        }
    ]
    tickets = Tickets()
    with smtp_sink() as (sink, port):
        summary = await drainer(pool, relay_settings(settings, port), tickets).drain()
    assert summary.sent == 1 and tickets.asked == [uuid.UUID(registration)]
    [mail] = sink.accepted
    [pdf] = [p for p in mail.iter_attachments() if p.get_content_type() == "application/pdf"]
    assert pdf.get_filename() == "tickets.pdf" and pdf.get_content() == PDF


async def test_without_a_tickets_renderer_the_message_fails_as_render(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
):
    event, _ = await mail_with_tickets(api, admin, "Ada")
    with smtp_sink() as (sink, port):
        summary = await drainer(pool, relay_settings(settings, port)).drain()
    assert summary.failed == 1 and sink.seen_ids == []  # never sent without its tickets
    listed = await admin.get("/admin/outbox", params={"event_id": event["id"]})
    [message] = listed.json()["items"]
    assert message["delivery_state"] == "failed"
    assert message["last_error"]["kind"] == "render"
    assert "tickets" in message["last_error"]["detail"]


async def test_the_standalone_composition_attaches_the_attendees_real_tickets(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
):
    _, registration = await mail_with_tickets(api, admin, "Анна")
    with smtp_sink() as (sink, port):
        tickets = StoreTicketsPdf(lambda: pool)  # what serve composes
        summary = await drainer(pool, relay_settings(settings, port), tickets).drain()
    assert summary.sent == 1
    [mail] = sink.accepted
    [pdf] = [p for p in mail.iter_attachments() if p.get_content_type() == "application/pdf"]
    reader = PdfReader(io.BytesIO(pdf.get_content()))
    assert len(reader.pages) == 1 and "Анна" in reader.pages[0].extract_text()
    barcode = (await admin.get(f"/admin/registrations/{registration}")).json()["barcode"]
    assert await asyncio.to_thread(pdf_qr_texts, pdf.get_content()) == [[barcode]]
