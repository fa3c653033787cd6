"""The mail drainer against a real SMTP server (aiosmtpd on loopback): what arrives, and
what each kind of answer makes of the outbox row."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest
import trustme

from events_svc.errors import DatabaseUnavailable
from events_svc.ports import Attachment, AttachmentUnavailable
from events_svc.settings import Settings, SmtpRelay
from tests.probes.delivery.helpers import (
    MAIL_FROM,
    drainer,
    due_now,
    now,
    queue_mail,
    relay_settings,
    row,
)
from tests.probes.delivery.sink import ca_file, smtp_sink
from tests.probes.helpers import free_port

PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
CALENDAR = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nMETHOD:REQUEST\r\nEND:VCALENDAR\r\n"


def _error(found: dict[str, Any]) -> dict[str, Any]:
    raw = found["last_error"]
    return json.loads(raw) if isinstance(raw, str) else raw


async def test_a_mail_arrives_whole_utf8_with_its_calendar_and_its_message_id(
    pool: asyncpg.Pool, settings: Settings
):
    invite = Attachment("invitation.ics", "text/calendar; method=REQUEST", CALENDAR)
    [row_id] = await queue_mail(
        pool,
        recipient="zoë@example.org",
        subject="Ihr Ticket für «Café Ωmega»",
        body="Grüße, Zoë — à bientôt\n",
        attachments=(invite,),
    )
    with smtp_sink() as (sink, port):
        summary = await drainer(pool, relay_settings(settings, port)).drain()
    assert (summary.claimed, summary.sent) == (1, 1)
    [mail] = sink.accepted
    found = await row(pool, row_id)
    assert found["state"] == "sent" and found["sent_at"] is not None
    assert found["attempts"] == 1 and found["last_error"] is None
    assert mail["Message-ID"] == found["message_id"]
    assert found["message_id"].startswith("<") and found["message_id"].endswith(
        "@events.example.org>"
    )
    assert mail["From"] == MAIL_FROM and found["sender"] == MAIL_FROM
    assert mail["Reply-To"] == "organiser@example.org"  # the organiser the mail was for
    assert mail["To"] == "zoë@example.org"
    assert mail["Subject"] == "Ihr Ticket für «Café Ωmega»"
    assert mail["Auto-Submitted"] == "auto-generated" and mail["Date"]
    body = mail.get_body(("plain",))
    assert body is not None
    assert body.get_content().replace("\r\n", "\n") == "Grüße, Zoë — à bientôt\n"
    [calendar] = [p for p in mail.iter_attachments() if p.get_content_type() == "text/calendar"]
    assert calendar.get_param("method") == "REQUEST"
    assert calendar.get_filename() == "invitation.ics"
    assert calendar.get_content().replace("\r\n", "\n") == CALENDAR.replace("\r\n", "\n")


async def test_an_html_template_sends_an_html_part_beside_its_text(
    pool: asyncpg.Pool, settings: Settings
):
    html = "<html><body><p>Hello <b>Ada</b></p><p>See you &amp; bye</p></body></html>"
    await queue_mail(pool, body=html)
    with smtp_sink() as (sink, port):
        await drainer(pool, relay_settings(settings, port)).drain()
    [mail] = sink.accepted
    plain, rich = mail.get_body(("plain",)), mail.get_body(("html",))
    assert plain is not None and rich is not None
    assert "Hello Ada" in plain.get_content() and "See you & bye" in plain.get_content()
    assert "<b>Ada</b>" in rich.get_content()


async def test_451_then_250_retries_with_back_off_and_the_same_message_id(
    pool: asyncpg.Pool, settings: Settings
):
    [row_id] = await queue_mail(pool)
    with smtp_sink() as (sink, port):
        sink.script = ["451 4.3.0 greylisted, try later"]
        relay = relay_settings(settings, port)
        before = now()
        await drainer(pool, relay).drain()
        first = await row(pool, row_id)
        assert first["state"] == "retrying" and first["attempts"] == 1
        assert _error(first) == {
            "kind": "temporary",
            "code": 451,
            "detail": "451 4.3.0 greylisted, try later",
        }
        wait = first["next_attempt_at"] - before
        assert timedelta(seconds=59) < wait < timedelta(seconds=65)  # 1 min back-off
        assert (await drainer(pool, relay).drain()).claimed == 0  # not due yet
        await due_now(pool, row_id)
        await drainer(pool, relay).drain()
    second = await row(pool, row_id)
    assert second["state"] == "sent" and second["attempts"] == 2
    assert sink.seen_ids == [first["message_id"]] * 2  # the same Message-ID both times
    assert len(sink.accepted) == 1


async def test_the_back_off_doubles_to_an_hour_and_fails_after_48_hours(
    pool: asyncpg.Pool, settings: Settings
):
    [row_id] = await queue_mail(pool)
    async with pool.acquire() as conn:  # six attempts already made
        await conn.execute("UPDATE event.outbox_messages SET attempts = 6 WHERE id = $1", row_id)
    with smtp_sink() as (sink, port):
        sink.script = ["452 4.2.2 mailbox full"] * 2
        relay = relay_settings(settings, port)
        before = now()
        await drainer(pool, relay).drain()
        seventh = await row(pool, row_id)
        assert seventh["attempts"] == 7 and seventh["state"] == "retrying"
        waited = seventh["next_attempt_at"] - before
        assert timedelta(minutes=59) < waited <= timedelta(hours=1, seconds=5)  # not 64 min
        async with pool.acquire() as conn:  # written 49 hours ago
            await conn.execute(
                "UPDATE event.outbox_messages SET created_at = now() - interval '49 hours',"
                " next_attempt_at = now() WHERE id = $1",
                row_id,
            )
        await drainer(pool, relay).drain()
    expired = await row(pool, row_id)
    assert expired["state"] == "failed" and expired["attempts"] == 8
    error = _error(expired)
    assert error["kind"] == "expired" and error["code"] == 452
    assert "retried for 48 h" in error["detail"]


async def test_550_fails_at_once_without_the_address_in_the_detail(
    pool: asyncpg.Pool, settings: Settings
):
    [row_id] = await queue_mail(pool, recipient="nobody@example.org")
    with smtp_sink() as (sink, port):
        sink.script = ["550 5.1.1 <nobody@example.org>: no such user"]
        await drainer(pool, relay_settings(settings, port)).drain()
        await due_now(pool, row_id)
        assert (await drainer(pool, relay_settings(settings, port)).drain()).claimed == 0
    failed = await row(pool, row_id)
    assert failed["state"] == "failed" and failed["attempts"] == 1
    error = _error(failed)
    assert (error["kind"], error["code"]) == ("permanent", 550)
    assert "nobody" not in error["detail"] and "<address>" in error["detail"]


async def test_a_dropped_connection_is_a_connection_failure_and_the_batch_waits(
    pool: asyncpg.Pool, settings: Settings
):
    row_ids = await queue_mail(pool, 3, recipient="guest{i}@example.org")
    with smtp_sink() as (sink, port):
        sink.script = ["drop"]
        one_session = relay_settings(settings, port, smtp_concurrency=1)
        before = now()
        drain = drainer(pool, one_session)
        summary = await drain.drain()
        await due_now(pool, *row_ids)
        again = await drain.drain()  # the channel is paused in this drainer: no new try
    assert (summary.retrying, again.claimed) == (3, 0)
    assert len(sink.seen_ids) == 1  # one attempt reached the relay; the rest waited
    found = [await row(pool, row_id) for row_id in row_ids]
    assert [f["attempts"] for f in found] == [1, 0, 0]  # only the first was tried
    for f in found:
        assert f["state"] == "retrying" and _error(f)["kind"] == "connection"
        assert f["last_error"] is not None and f["lease_until"] is None
    resumes = drain.paused["mail"][0] - before
    assert timedelta(seconds=59) < resumes < timedelta(seconds=65)  # a one-minute pause


async def test_a_refused_connection_retries(pool: asyncpg.Pool, settings: Settings):
    from tests.probes.helpers import free_port

    [row_id] = await queue_mail(pool)
    before = now()
    await drainer(pool, relay_settings(settings, free_port())).drain()
    found = await row(pool, row_id)
    assert found["state"] == "retrying" and found["attempts"] == 1
    assert _error(found)["kind"] == "connection" and _error(found)["code"] is None
    waited = found["next_attempt_at"] - before
    assert timedelta(seconds=59) < waited < timedelta(seconds=65)


async def test_a_relay_stalled_past_the_timeout_is_a_timeout(
    pool: asyncpg.Pool, settings: Settings
):
    [row_id] = await queue_mail(pool)
    with smtp_sink() as (sink, port):
        sink.script = ["stall"]
        before = now()
        await drainer(pool, relay_settings(settings, port, smtp_timeout_s=1)).drain()
    found = await row(pool, row_id)
    assert found["state"] == "retrying" and found["attempts"] == 1
    waited = found["next_attempt_at"] - before
    assert timedelta(seconds=59) < waited < timedelta(seconds=67)
    assert _error(found) == {
        "kind": "timeout",
        "code": None,
        "detail": "the relay did not answer in time",
    }


async def test_starttls_with_the_private_ca_and_auth_with_the_urls_credentials(
    pool: asyncpg.Pool, settings: Settings, tmp_path: Path
):
    ca = trustme.CA()
    relay = SmtpRelay(
        host="localhost", port=0, require_starttls=True, username="desk", password="s3cr3t:/@"
    )
    [row_id] = await queue_mail(pool)
    with smtp_sink(tls=ca, auth=("desk", "s3cr3t:/@")) as (sink, port):
        trusted = relay_settings(
            settings,
            port,
            smtp=dataclasses.replace(relay, port=port),
            smtp_ca_file=ca_file(ca, tmp_path),
        )
        await drainer(pool, trusted).drain()
    assert (await row(pool, row_id))["state"] == "sent"
    assert len(sink.accepted) == 1


async def test_an_untrusted_certificate_or_wrong_credentials_send_nothing(
    pool: asyncpg.Pool, settings: Settings, tmp_path: Path
):
    ca = trustme.CA()
    [row_id] = await queue_mail(pool)
    with smtp_sink(tls=ca, auth=("desk", "right")) as (sink, port):
        untrusted = relay_settings(
            settings, port, smtp=SmtpRelay("localhost", port, username="desk", password="right")
        )
        await drainer(pool, untrusted).drain()
        found = await row(pool, row_id)
        assert found["state"] == "retrying"
        assert _error(found)["kind"] == "connection" and "TLS" in _error(found)["detail"]
        await due_now(pool, row_id)
        wrong = relay_settings(
            settings,
            port,
            smtp=SmtpRelay("localhost", port, username="desk", password="wrong"),
            smtp_ca_file=ca_file(ca, tmp_path),
        )
        await drainer(pool, wrong).drain()
        found = await row(pool, row_id)
        assert found["state"] == "retrying"
        assert (_error(found)["kind"], _error(found)["code"]) == ("connection", 535)
        assert "wrong" not in json.dumps(_error(found))
    assert sink.accepted == []


async def test_starttls_required_refuses_a_plain_relay(pool: asyncpg.Pool, settings: Settings):
    [row_id] = await queue_mail(pool)
    with smtp_sink() as (sink, port):  # no STARTTLS offered
        plain_only = relay_settings(
            settings, port, smtp=SmtpRelay("127.0.0.1", port, require_starttls=True)
        )
        await drainer(pool, plain_only).drain()
    assert sink.seen_ids == []
    found = await row(pool, row_id)
    assert found["state"] == "retrying"
    assert "STARTTLS" in _error(found)["detail"]


class _Tickets:
    """A tickets renderer as the tickets issue composes one: the PDF of a registration."""

    def __init__(self) -> None:
        self.asked: list[UUID] = []

    async def tickets_pdf(self, registration_id: UUID) -> bytes:
        self.asked.append(registration_id)
        return PDF


async def test_a_tickets_reference_is_rendered_when_sent_or_fails_the_message_as_render(
    pool: asyncpg.Pool, settings: Settings
):
    registration = UUID(int=7)
    reference = Attachment(
        "tickets.pdf", "application/pdf", None, kind="tickets_pdf", registration_id=registration
    )
    [held] = await queue_mail(pool, attachments=(reference,))
    stored = (await row(pool, held))["attachments"]
    stored = json.loads(stored) if isinstance(stored, str) else stored
    assert stored == [
        {
            "kind": "tickets_pdf",
            "registration_id": str(registration),
            "filename": "tickets.pdf",
            "content_type": "application/pdf",
        }
    ]  # a reference, never the file
    with smtp_sink() as (sink, port):
        await drainer(pool, relay_settings(settings, port)).drain()  # no renderer composed
        failed = await row(pool, held)
        assert failed["state"] == "failed" and _error(failed)["kind"] == "render"
        [sent] = await queue_mail(pool, attachments=(reference,))
        tickets = _Tickets()
        await drainer(pool, relay_settings(settings, port), tickets).drain()
    assert (await row(pool, sent))["state"] == "sent" and tickets.asked == [registration]
    [mail] = sink.accepted
    [pdf] = list(mail.iter_attachments())
    assert pdf.get_content_type() == "application/pdf"
    assert pdf.get_content() == PDF and pdf.get_filename() == "tickets.pdf"


async def test_a_renderer_that_cannot_render_fails_the_message_as_render(
    pool: asyncpg.Pool, settings: Settings
):
    class Gone:
        async def tickets_pdf(self, registration_id: UUID) -> bytes:
            raise AttachmentUnavailable("no active tickets")

    reference = Attachment(
        "tickets.pdf", "application/pdf", kind="tickets_pdf", registration_id=UUID(int=1)
    )
    [row_id] = await queue_mail(pool, attachments=(reference,))
    with smtp_sink() as (sink, port):
        await drainer(pool, relay_settings(settings, port), Gone()).drain()
    found = await row(pool, row_id)
    assert found["state"] == "failed"
    assert _error(found) == {"kind": "render", "code": None, "detail": "no active tickets"}
    assert sink.seen_ids == []


async def test_at_most_two_messages_in_flight_per_recipient_domain(
    pool: asyncpg.Pool, settings: Settings
):
    await queue_mail(pool, 6, recipient="a{i}@one.example")
    await queue_mail(pool, 6, recipient="b{i}@two.example")
    with smtp_sink(delay=0.2) as (sink, port):
        summary = await drainer(pool, relay_settings(settings, port, smtp_concurrency=8)).drain()
    assert summary.sent == 12
    assert sink.most_in_flight == {"one.example": 2, "two.example": 2}


async def test_the_rate_limit_spreads_the_sends(pool: asyncpg.Pool, settings: Settings):
    await queue_mail(pool, 6, recipient="r{i}@example.org")
    with smtp_sink() as (sink, port):
        await drainer(pool, relay_settings(settings, port, smtp_rate=10)).drain()
    spread = sink.arrivals[-1] - sink.arrivals[0]
    assert len(sink.accepted) == 6 and spread >= 0.45  # six at 10/s: five gaps of 0.1 s


async def test_the_sessions_are_reused(pool: asyncpg.Pool, settings: Settings):
    await queue_mail(pool, 20, recipient="s{i}@example.org")
    with smtp_sink() as (sink, port):
        await drainer(pool, relay_settings(settings, port, smtp_concurrency=2)).drain()
    assert len(sink.accepted) == 20 and sink.sessions <= 2


async def test_the_lifespan_drainer_wakes_when_a_message_is_written(
    pool: asyncpg.Pool, settings: Settings
):
    from events_svc.app import create_app

    with smtp_sink() as (sink, port):
        relay = relay_settings(settings, port, scheduler_enabled=True)
        app = create_app(relay)
        async with app.router.lifespan_context(app):
            await asyncio.sleep(0.3)  # the loop has listened and slept
            [row_id] = await queue_mail(pool)
            for _ in range(100):
                if sink.accepted:
                    break
                await asyncio.sleep(0.05)
            assert "delivery_mail" in app.state.events.loop.lanes
        assert len(sink.accepted) == 1
    for _ in range(20):
        if (await row(pool, row_id))["state"] == "sent":
            break
        await asyncio.sleep(0.05)
    assert (await row(pool, row_id))["state"] == "sent"


async def test_a_broken_relay_costs_one_attempt_per_back_off_and_no_cpu(
    pool: asyncpg.Pool, settings: Settings
):
    """Nothing listens at the relay's port: the loop tries the batch once (each message
    one attempt, backing off a minute), then sleeps; it neither spins nor polls."""
    from events_svc.app import create_app

    ids = await queue_mail(pool, 30, recipient="c{i}@example.org")
    relay = relay_settings(settings, free_port(), scheduler_enabled=True)
    app = create_app(relay)
    async with app.router.lifespan_context(app):
        loop = app.state.events.loop.lanes["delivery_mail"]
        for _ in range(100):
            if (await row(pool, ids[-1]))["state"] == "retrying":
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the wake of its LISTEN start, if not yet taken
        passes = loop.runs
        cpu, wall = time.process_time(), time.monotonic()
        await asyncio.sleep(3)
        used = (time.process_time() - cpu) / (time.monotonic() - wall)
        assert loop.runs == passes  # asleep until the first retry is due
    assert used < 0.01, f"{used:.1%} of a core while the relay is down"
    found = [await row(pool, i) for i in ids]
    assert {f["state"] for f in found} == {"retrying"}
    tried = sum(f["attempts"] for f in found)
    assert 1 <= tried <= 4  # the sends begun before the relay was known down; no others
    assert {_error(f)["kind"] for f in found} == {"connection"}


async def test_a_non_ascii_address_a_relay_cannot_carry_fails_alone(
    pool: asyncpg.Pool, settings: Settings
):
    [accented] = await queue_mail(pool, recipient="zoë@example.org")
    plain = await queue_mail(pool, 3, recipient="p{i}@example.org")
    with smtp_sink(utf8=False) as (sink, port):  # no SMTPUTF8 offered
        summary = await drainer(pool, relay_settings(settings, port)).drain()
    assert (summary.sent, summary.failed) == (3, 1) and len(sink.accepted) == 3
    found = await row(pool, accented)
    assert found["state"] == "failed" and found["attempts"] == 1
    assert _error(found)["kind"] == "permanent" and "SMTPUTF8" in _error(found)["detail"]
    assert {(await row(pool, p))["state"] for p in plain} == {"sent"}


async def test_credentials_never_travel_in_plain_text(pool: asyncpg.Pool, settings: Settings):
    """A relay (or a man in the middle) that offers AUTH without STARTTLS gets nothing."""
    [row_id] = await queue_mail(pool)
    with smtp_sink(auth=("desk", "hunter22"), plain_auth=True) as (sink, port):
        creds = SmtpRelay("127.0.0.1", port, username="desk", password="hunter22")
        await drainer(pool, relay_settings(settings, port, smtp=creds)).drain()
    assert sink.logins == [] and sink.seen_ids == []
    found = await row(pool, row_id)
    assert found["state"] == "retrying" and "STARTTLS" in _error(found)["detail"]
    assert "hunter22" not in json.dumps(_error(found))


async def test_smtps_is_tls_from_the_first_byte(
    pool: asyncpg.Pool, settings: Settings, tmp_path: Path
):
    ca = trustme.CA()
    [row_id] = await queue_mail(pool)
    with smtp_sink(tls=ca, implicit=True) as (sink, port):
        relay = SmtpRelay("localhost", port, implicit_tls=True)
        tls = drainer(
            pool, relay_settings(settings, port, smtp=relay, smtp_ca_file=ca_file(ca, tmp_path))
        )
        await tls.drain()
        await tls.close()  # a TLS session is closed by its client, not left to the sink
    assert (await row(pool, row_id))["state"] == "sent" and len(sink.accepted) == 1


async def test_a_slow_batch_gives_back_what_it_could_not_start_within_half_its_lease(
    pool: asyncpg.Pool, settings: Settings
):
    ids = await queue_mail(pool, 6, recipient="s{i}@example.org")
    with smtp_sink(delay=0.4) as (sink, port):
        slow = relay_settings(settings, port, smtp_concurrency=1)
        hurried = drainer(pool, slow, lease=timedelta(seconds=2))
        first = await hurried.drain_batch()
        await hurried.close()
        assert first.sent >= 1 and first.released >= 1 and first.more  # the rest is due now
        assert first.sent + first.released == 6
        given_back = [await row(pool, i) for i in ids]
        untried = [f for f in given_back if f["state"] == "queued"]
        assert len(untried) == first.released
        assert all(f["attempts"] == 0 and f["lease_until"] is None for f in untried)
        patient = drainer(pool, slow, lease=timedelta(seconds=30))
        rest = await patient.drain()
        await patient.close()
    assert first.sent + rest.sent == 6
    assert sorted(sink.seen_ids) == sorted(set(sink.seen_ids))  # none sent twice


async def test_a_message_queued_before_the_sender_was_set_replies_to_its_organiser(
    pool: asyncpg.Pool, settings: Settings
):
    await queue_mail(pool, mail_from="")  # held while EVENTS_MAIL_FROM was unset
    with smtp_sink() as (sink, port):
        await drainer(pool, relay_settings(settings, port)).drain()
    [mail] = sink.accepted
    assert mail["From"] == MAIL_FROM and mail["Reply-To"] == "organiser@example.org"


async def test_answers_are_kept_while_the_database_is_away_and_recorded_when_it_is_back(
    pool: asyncpg.Pool, settings: Settings
):
    """A failover between a batch's claim and its record: the answers wait (backing off)
    and are written once the database answers again, so nothing is sent twice and no row
    waits for its lease."""
    ids = await queue_mail(pool, 3, recipient="f{i}@example.org")
    gone = await asyncpg.create_pool(f"postgresql://u@127.0.0.1:{free_port()}/x", min_size=0)
    handed: list[str] = []

    def pools() -> asyncpg.Pool:  # the claim reaches the database; two records do not
        handed.append("live" if len(handed) == 0 or len(handed) >= 3 else "gone")
        return pool if handed[-1] == "live" else gone

    with smtp_sink() as (sink, port):
        kept = drainer(pool, relay_settings(settings, port), lease=timedelta(seconds=60))
        kept.pool = pools
        summary = await kept.drain_batch()
        await kept.close()
    await gone.close()
    assert handed[:4] == ["live", "gone", "gone", "live"]
    assert summary.sent == 3 and summary.recorded == 3
    found = [await row(pool, i) for i in ids]
    assert [f["state"] for f in found] == ["sent"] * 3
    assert all(f["lease_until"] is None and f["attempts"] == 1 for f in found)
    assert len(sink.seen_ids) == 3


async def test_answers_are_given_up_when_the_lease_would_run_out_first(
    pool: asyncpg.Pool, settings: Settings
):
    """Past its lease a claim's answers are no longer its own (another drainer may hold
    the rows): the batch fails and the lease puts the rows back."""
    ids = await queue_mail(pool, 1, recipient="g{i}@example.org")
    gone = await asyncpg.create_pool(f"postgresql://u@127.0.0.1:{free_port()}/x", min_size=0)
    handed: list[str] = []

    def pools() -> asyncpg.Pool:
        handed.append("live" if not handed else "gone")
        return pool if handed[-1] == "live" else gone

    with smtp_sink() as (sink, port):
        short = drainer(pool, relay_settings(settings, port), lease=timedelta(seconds=1))
        short.pool = pools
        with pytest.raises(DatabaseUnavailable):
            await short.drain_batch()
        await short.close()
    await gone.close()
    assert len(handed) <= 3  # a try or two within the second, never a spin
    assert (await row(pool, ids[0]))["state"] == "sending"  # the lease gives it back
    assert len(sink.seen_ids) == 1


async def test_a_stop_asked_mid_batch_starts_no_more_sends_and_gives_the_rest_back(
    pool: asyncpg.Pool, settings: Settings
):
    """A shutdown (or the pass's budget) during a batch: the sends in hand finish and are
    recorded, the others are given back as they were, not sent after the stop."""
    ids = await queue_mail(pool, 6, recipient="t{i}@example.org")
    with smtp_sink(delay=0.3) as (sink, port):
        slow = relay_settings(settings, port, smtp_concurrency=1)
        stopped = drainer(pool, slow, lease=timedelta(seconds=60))
        asked: list[bool] = []

        def stopping() -> bool:  # asked once a send has been accepted
            asked.append(bool(sink.accepted))
            return asked[-1]

        summary = await stopped.drain(stopping)
        await stopped.close()
    assert (summary.sent, summary.released, summary.more) == (1, 5, True)
    rows = [await row(pool, i) for i in ids]
    assert sorted(r["state"] for r in rows) == ["queued"] * 5 + ["sent"]
    assert len(sink.accepted) == 1
