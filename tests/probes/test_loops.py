"""The one loop and the outbound edge, with partners that misbehave for real: a CRM that
accepts connections and never answers delays only the lead requests; an operator's retry
on one process ends the relay pause of another; every entry point runs the same passes;
the one back-off table; the one outbound client reads no proxy from the environment."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc import backoff, create_app
from events_svc.adapters.lead_webhook import WebhookLeadSink, lead_sink_from
from events_svc.adapters.sms_gateway import SmsGatewayTransport
from events_svc.adapters.standalone import transports_from
from events_svc.adapters.webhook_sender import WebhookSender
from events_svc.backoff import Backoff
from events_svc.egress import EgressGuard
from events_svc.loops import CHANNELS, PASSES
from events_svc.loops.loop import Loop
from events_svc.loops.passes import LOOP, Entry, Pass, Ran, run_pass
from events_svc.ports import LeadDelivery, LeadRefused, QueuedMessage, RefusingTicketsPdf
from events_svc.settings import Settings, SettingsError, SmtpRelay
from events_svc.surface import EventSurface
from events_svc.verbs.tokens import create_token
from tests.probes.delivery.helpers import MAIL_FROM, queue_mail, queue_sms, row
from tests.probes.delivery.sink import smtp_sink
from tests.probes.helpers import (
    API,
    BASE,
    Api,
    cancel,
    free_port,
    hand_loop,
    make_event,
    run_once_cli,
    start_serve,
    stop_all,
    tails,
    template,
    until_listening,
    until_true,
    wait_ready,
)
from tests.probes.waitlist.kit import SECRET, joined, listed_event

LEAD_SECRET = "lead-webhook-secret-0123456789"
GATEWAY_SECRET = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"  # base64 of 24 bytes


class Silent:
    """A partner that accepts every connection, reads what it is sent and never answers
    (a CRM behind a black hole); `connections` counts them."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass  # never a byte back

    async def __aenter__(self) -> Silent:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def hang_up(self) -> None:
        """Close the connections it holds (a call waiting on it fails at once)."""
        for writer in self.writers:
            writer.close()

    async def __aexit__(self, *_: Any) -> None:
        assert self.server is not None
        self.server.close()
        self.hang_up()
        await self.server.wait_closed()


@asynccontextmanager
async def running(settings: Settings, pool: asyncpg.Pool) -> AsyncIterator[httpx.AsyncClient]:
    """The app over `settings` with its loop running, and a '*' client of it."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        headers = await Api(app, pool).token("*")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c:
            c.app = app  # type: ignore[attr-defined]
            yield c


async def lead_requests(admin: httpx.AsyncClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        r = await admin.get("/admin/lead-requests", params=params)
        assert r.status_code == 200, r.text
        items += r.json()["items"]
        cursor = r.json()["next_cursor"]
        if not cursor:
            return items


async def test_a_crm_that_never_answers_delays_only_the_lead_requests(
    settings: Settings, pool: asyncpg.Pool
):
    """200 lead requests for a CRM that accepts connections and never answers: a
    registration made meanwhile has its confirmation queued and sent, and a freed seat is
    offered, each within 10 s; each lead request tried parks with its back-off."""
    async with Silent() as crm:
        with smtp_sink() as (relay, port):
            wired = dataclasses.replace(
                settings,
                scheduler_enabled=True,
                lead_webhook_url=f"http://127.0.0.1:{crm.port}/leads",
                lead_webhook_secret=LEAD_SECRET,
                smtp=SmtpRelay(host="127.0.0.1", port=port),
                mail_from=MAIL_FROM,
                smtp_rate=0,
                intake_public=True,
                capability_secrets=(SECRET,),
                public_base_url="https://tickets.example.org",
            )
            async with running(wired, pool) as admin:
                kind = (await admin.post("/admin/types", json={"name": "CRM"})).json()
                first = await make_event(admin, event_type_id=kind["id"], name="Lead 0")
                await _copies(pool, first["id"], 199)  # 200 events of the type, each with
                await pool.execute(  # one attendee the rule admits
                    "INSERT INTO event.registrations (event_id, barcode, name, email, date_open)"
                    " SELECT id, (900000000 + row_number() OVER (ORDER BY id))::text, 'G',"
                    " 'g@example.org', now() FROM event.events WHERE event_type_id = $1",
                    uuid.UUID(kind["id"]),
                )
                rule = {
                    "name": "Everything of the type",
                    "predicates": [{"axis": "event_type", "value_ids": [kind["id"]]}],
                }
                assert (await admin.post("/admin/lead-rules", json=rule)).status_code == 201
                assert len(await lead_requests(admin)) == 200
                # the lead pass is now waiting on the silent CRM
                await until_true(lambda: crm.connections >= 1, 10)

                # a registration made meanwhile: its confirmation is queued and sent
                event = await make_event(admin, name="Meanwhile")
                tpl = await template(admin, body="Welcome {{ registration.name }}")
                line = {
                    "event_id": event["id"],
                    "template_ref": tpl,
                    "interval_kind": "after_sub",
                    "interval_unit": "now",
                    "interval_nbr": 0,
                }
                assert (await admin.post("/admin/mails", json=line)).status_code == 201
                guest = {"event_id": event["id"], "name": "Ann", "email": "ann@example.org"}
                assert (await admin.post("/admin/registrations", json=guest)).status_code == 201
                await until_true(lambda: _received(relay, "ann@example.org"), 10)

                async def sent() -> bool:  # the relay's answer recorded on the row
                    state = await pool.fetchval(
                        "SELECT delivery_state::text FROM event.outbox_messages"
                        " WHERE recipient = $1",
                        "ann@example.org",
                    )
                    return bool(state == "sent")

                await until_true(sent, 10)

                # a freed seat is offered to the one waiting
                full = await listed_event(admin, 1)
                r = await admin.post(
                    "/admin/registrations",
                    json={"event_id": full["id"], "name": "Sat", "email": "sat@example.org"},
                )
                seated = r.json()["id"]
                public = httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=admin.app),  # type: ignore[attr-defined]
                    base_url=BASE,
                )
                async with public:
                    await joined(public, full["id"], "wait@example.org")
                assert (await cancel(admin, seated)).status_code == 200

                async def offered() -> bool:
                    status = await pool.fetchval(
                        "SELECT status::text FROM event.waitlist_entry WHERE event_id = $1",
                        uuid.UUID(full["id"]),
                    )
                    return bool(status == "offered")

                await until_true(offered, 10)

                # the lead requests tried so far park and back off, none tried twice
                parked = await until_true(lambda: _parked(admin), 30)  # a call is bounded to 10 s
                for request in parked:
                    assert request["attempts"] == 1 and request["done"] is False
                    assert request["error_detail"] == "webhook did not answer within 10 s"
                    retry_at = datetime.fromisoformat(request["next_attempt_at"])
                    parked_at = datetime.fromisoformat(request["updated_at"])
                    assert retry_at - parked_at == timedelta(minutes=1)  # from its own try
                # one call per request tried, and one in hand: no request is tried twice
                assert crm.connections <= len(parked) + 1
                assert len(await lead_requests(admin)) == 200  # none done, none lost
                crm.hang_up()  # the call in hand fails now: the loop stops without waiting
            assert relay.accepted and relay.accepted[0]["To"] == "ann@example.org"


async def _copies(pool: asyncpg.Pool, event_id: str, n: int) -> None:
    """`n` more events like `event_id` (the same row but its id), written directly: the
    probe is about what the loop does with them, not about creating events."""
    await pool.execute(
        "INSERT INTO event.events SELECT (jsonb_populate_record(e, jsonb_build_object("
        " 'id', gen_random_uuid(), 'name', e.name || ' copy ' || g))).*"
        " FROM event.events e, generate_series(1, $2) g WHERE e.id = $1",
        uuid.UUID(event_id),
        n,
    )


def _received(relay: Any, address: str) -> bool:
    return any(m["To"] == address for m in relay.accepted)


async def _parked(admin: httpx.AsyncClient) -> list[dict[str, Any]]:
    return [r for r in await lead_requests(admin) if r["attempts"] > 0]


async def test_a_retry_on_one_process_ends_the_relay_pause_of_another(
    db_url: str, pool: asyncpg.Pool, tmp_path: Path
):
    """Two processes: one sends the outbox (its relay drops a connection, so it pauses the
    mail channel for a minute), the other only serves the API. The retry route on the
    second ends the first one's pause: the message is accepted within 5 s. Retried while
    the relay is still down, it fails again (one more attempt) and the pause resumes,
    longer."""
    token, _ = await create_token(pool, "retry", ["*"], None, datetime.now(UTC))
    headers = {"Authorization": f"Bearer {token}"}
    with smtp_sink() as (relay, port):
        relay.script = ["drop"]
        smtp = {
            "EVENTS_SMTP_URL": f"smtp://127.0.0.1:{port}",
            "EVENTS_MAIL_FROM": MAIL_FROM,
            "EVENTS_SMTP_RATE": "0",
            "EVENTS_SMTP_TIMEOUT_S": "5",
        }
        sender_port, api_port = free_port(), free_port()
        with (
            (tmp_path / "sender.log").open("w") as out_a,
            (tmp_path / "api.log").open("w") as out_b,
        ):
            sender = start_serve(db_url, sender_port, output=out_a.fileno(), **smtp)
            api_only = start_serve(
                db_url, api_port, output=out_b.fileno(), EVENT_SCHEDULER_ENABLED="false"
            )
            procs = [(f"http://127.0.0.1:{sender_port}", sender)]
            procs.append((f"http://127.0.0.1:{api_port}", api_only))
            try:
                for base, proc in procs:
                    await asyncio.to_thread(wait_ready, proc, base, 90)
                [first] = await queue_mail(pool, recipient="ada@example.org")
                await until_true(lambda: _state(pool, first, "retrying"), 20)
                paused = await row(pool, first)
                assert paused["attempts"] == 1  # tried once: its channel is paused now
                assert paused["last_error"]["kind"] == "connection"

                other = f"http://127.0.0.1:{api_port}{API}"
                async with httpx.AsyncClient(base_url=other, headers=headers) as api:
                    r = await api.post(f"/admin/outbox/{first}/retry")
                    assert r.status_code == 200 and r.json()["delivery_state"] == "queued"
                    await until_true(lambda: len(relay.accepted) == 1, 5)
                    sent = await until_true(lambda: _state(pool, first, "sent"), 5)
                    assert sent["attempts"] == 2

                    # the relay is down again (it drops the kept session, then the new one):
                    # the retry fails at once, and the pause resumes
                    relay.script = ["drop", "drop"]
                    [second] = await queue_mail(pool, recipient="bob@example.org")
                    await until_true(lambda: _state(pool, second, "retrying"), 20)
                    relay.script = ["drop"]
                    r = await api.post(f"/admin/outbox/{second}/retry")
                    assert r.status_code == 200
                    again = await until_true(lambda: _attempts(pool, second, 2), 5)
                    assert again["state"] == "retrying"
                    assert again["last_error"]["kind"] == "connection"
                    assert len(relay.accepted) == 1
            finally:
                stop_all(procs)
        said = (tmp_path / "sender.log").read_text()
        paused_lines = [
            json.loads(line)
            for line in said.splitlines()
            if line.startswith("{") and "outbox channel paused" in line
        ]
        assert [p["times"] for p in paused_lines] == [1, 1, 2], tails(tmp_path)
        for text in (said, (tmp_path / "api.log").read_text()):
            assert "ada@example.org" not in text and "bob@example.org" not in text


async def _state(pool: asyncpg.Pool, row_id: uuid.UUID, state: str) -> dict[str, Any] | None:
    found = await row(pool, row_id)
    return found if found["state"] == state else None


async def _attempts(pool: asyncpg.Pool, row_id: uuid.UUID, n: int) -> dict[str, Any] | None:
    found = await row(pool, row_id)
    return found if found["attempts"] >= n and found["state"] != "sending" else None


def _shape(passes: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [(p["name"], p["status"], p["detail"]) for p in passes]


async def test_the_four_entry_points_run_the_same_passes(
    db_url: str, settings: Settings, pool: asyncpg.Pool, admin: httpx.AsyncClient
):
    """The route, the CLI, the host surface and the loop run one composition: the same
    passes, in the same order, each ran or skipped for the same reason."""
    ran = await admin.post("/admin/schedulers/run")
    assert ran.status_code == 200, ran.text
    view = ran.json()
    before = {"schedulers", "sent", "dropped", "failed", "pruned", "recipients_failed"}
    before |= {"failures", "more", "offers_made", "offers_expired", "offers_closed"}
    assert before < set(view)  # the run summary's keys of before, beside `passes`
    route = _shape(view["passes"])
    expected = [(name, "ran", None) for name in PASSES]
    expected[PASSES.index("dispatch")] = ("dispatch", "skipped", "disabled")
    expected[PASSES.index("sweep")] = ("sweep", "skipped", "not_due")
    assert route == expected
    assert all(p["counts"] == {} for p in view["passes"] if p["status"] == "skipped")

    printed = json.loads(run_once_cli(db_url).stdout)
    assert set(printed) == {"passes", "more"} and _shape(printed["passes"]) == route

    surface = EventSurface(pool, settings)
    assert _shape((await surface.run_due_schedulers())["passes"]) == route

    loop = hand_loop(pool, settings)  # the probe's ports compose no outbox transport
    assert loop.skipped == {
        "dispatch": "disabled",
        "delivery_mail": "disabled",
        "delivery_sms": "disabled",
    }
    assert list(loop.lanes) == [n for n in (*PASSES, *CHANNELS) if n not in loop.skipped]
    for name in PASSES:
        if name in loop.lanes:
            await loop.lanes[name].tick()
            last = loop.lanes[name].last
            assert last is not None and (last.name, last.status) == (name, "ran")
    with_dispatch = dataclasses.replace(settings, trigger_dispatch=True)
    assert "dispatch" in hand_loop(pool, with_dispatch).lanes
    on = await EventSurface(pool, with_dispatch).run_due_schedulers()
    assert _shape(on["passes"])[PASSES.index("dispatch")] == ("dispatch", "ran", None)


async def test_a_failed_pass_does_not_stop_the_others_and_the_cli_says_so(
    db_url: str, pool: asyncpg.Pool, admin: httpx.AsyncClient
):
    await pool.execute("ALTER TABLE event.attendance_imports RENAME TO attendance_imports_away")
    try:
        cli = run_once_cli(db_url, check=False)
        view = (await admin.post("/admin/schedulers/run")).json()
    finally:
        await pool.execute("ALTER TABLE event.attendance_imports_away RENAME TO attendance_imports")
    assert cli.returncode == 1
    printed = {p["name"]: p for p in json.loads(cli.stdout)["passes"]}
    routed = {p["name"]: p for p in view["passes"]}
    for passes in (printed, routed):
        assert list(passes) == list(PASSES)
        assert passes["imports"]["status"] == "failed"
        assert passes["imports"]["detail"] == "UndefinedTableError"  # the class, never data
        assert passes["imports"]["counts"] == {}
        assert passes["operations"]["status"] == "ran"  # the ones after it ran


def test_the_one_back_off_table():
    assert backoff.OUTBOX.seconds(1) == 60 and backoff.OUTBOX.seconds(7) == 3600
    created = datetime(2027, 1, 1, tzinfo=UTC)
    assert not backoff.OUTBOX.gives_up(50, written_at=created, now=created + timedelta(hours=47))
    assert backoff.OUTBOX.gives_up(1, written_at=created, now=created + timedelta(hours=48))
    assert [backoff.WEBHOOKS.seconds(n) for n in range(1, 8)] == [
        5,
        300,
        1800,
        7200,
        18000,
        36000,
        36000,
    ]
    assert backoff.WEBHOOKS.next_at(7, created) == created + timedelta(hours=10)
    assert backoff.WEBHOOKS.next_at(8, created) is None  # the 8th attempt was the last
    assert [backoff.JOBS.seconds(n) for n in range(1, 5)] == [5, 10, 20, 40]
    assert backoff.JOBS.next_at(5, created) is None  # `failed`: only a resume revives it
    assert backoff.LEAD_REQUESTS.seconds(1) == 60 and backoff.LEAD_REQUESTS.seconds(9) == 3600
    assert backoff.CHANNEL_PAUSE.seconds(2) == 120
    assert backoff.PASS_FAILED.seconds(1) == 5 and backoff.PASS_FAILED.seconds(20) == 300
    assert Backoff(0.5, 10.0).seconds(1_000_000) == 10.0  # a long streak never overflows
    assert set(backoff.TABLE) >= {"outbox", "webhooks", "lead_requests", "jobs", "offers"}


def test_the_gateways_own_settings_and_the_outbound_proxy_are_read_strictly():
    base = {"EVENTS_SMS_GATEWAY_URL": "http://gw.internal/sms"}
    base["EVENTS_SMS_GATEWAY_SECRET"] = GATEWAY_SECRET
    plain = Settings.from_env(base)
    assert (plain.sms_gateway_timeout_s, plain.sms_gateway_concurrency) == (10, 4)
    assert plain.outbound_proxy == ""
    tuned = Settings.from_env(
        {
            **base,
            "EVENTS_SMS_GATEWAY_TIMEOUT_S": "3",
            "EVENTS_SMS_GATEWAY_CONCURRENCY": "2",
            "EVENTS_SMTP_TIMEOUT_S": "60",
            "EVENTS_OUTBOUND_PROXY": "http://user:pw@proxy.internal:3128",
        }
    )
    assert (tuned.sms_gateway_timeout_s, tuned.sms_gateway_concurrency) == (3, 2)
    assert tuned.outbound_proxy == "http://user:pw@proxy.internal:3128"
    assert "pw" not in repr(tuned)
    for name, value in (
        ("EVENTS_SMS_GATEWAY_TIMEOUT_S", "0"),
        ("EVENTS_SMS_GATEWAY_CONCURRENCY", "many"),
        ("EVENTS_OUTBOUND_PROXY", "ftp://proxy.internal"),
        ("EVENTS_OUTBOUND_PROXY", "http://user:secret@proxy.internal:port"),
    ):
        with pytest.raises(SettingsError, match=name) as refused:
            Settings.from_env({**base, name: value})
        assert "secret" not in str(refused.value)


class Answering:
    """An HTTP partner on loopback that records each request line it is sent and answers
    200 `{"lead_id": <lead_id>}`, keeping the connection: a receiver, or (sent absolute
    URLs) a forward proxy that goes nowhere."""

    def __init__(self, lead_id: str) -> None:
        self.body = json.dumps({"lead_id": lead_id}).encode()
        self.lines: list[str] = []
        self.port = 0
        self.server: asyncio.Server | None = None

    @property
    def paths(self) -> list[str]:
        return [line.split()[1] for line in self.lines]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while line := (await reader.readline()).decode("latin-1").strip():
                self.lines.append(line)
                length = 0
                while (header := (await reader.readline()).decode("latin-1").strip()) != "":
                    if header.lower().startswith("content-length:"):
                        length = int(header.split(":", 1)[1])
                await reader.readexactly(length)
                head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                writer.write(f"{head}content-length: {len(self.body)}\r\n\r\n".encode())
                writer.write(self.body)
                await writer.drain()
        writer.close()

    async def __aenter__(self) -> Answering:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: Any) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def _sms() -> QueuedMessage:
    return QueuedMessage(
        id=uuid.uuid4(),
        channel="sms",
        message_id="<sms-1@events.example.org>",
        recipient="+32470000001",
        sender="events",
        reply_to="",
        subject="",
        body="See you",
        attachments=(),
        event_id=None,
        registration_id=None,
    )


def _delivery() -> LeadDelivery:
    return LeadDelivery(
        action="create",
        rule_id=uuid.uuid4(),
        event_id=uuid.uuid4(),
        grain="per_event_day",
        group_key="g",
        lead_id=None,
        registration_ids=[uuid.uuid4()],
        new_registration_ids=[],
        idempotency_key="p:1",
    )


async def test_the_outbound_client_reads_no_proxy_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
):
    """`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY` are never read: the SMS
    gateway, the lead sink and webhooks go direct; `EVENTS_OUTBOUND_PROXY` takes the
    operator's own partners (gateway, lead sink) through a proxy, never a webhook."""

    async with Answering("via-proxy") as proxy, Answering("direct") as partner:
        through = f"http://127.0.0.1:{proxy.port}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
            monkeypatch.setenv(name, through)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        gateway_url = f"http://127.0.0.1:{partner.port}/sms"
        sink_url = f"http://127.0.0.1:{partner.port}/leads"
        hook_url = f"http://127.0.0.1:{partner.port}/hook"

        gateway = SmsGatewayTransport(gateway_url, GATEWAY_SECRET)
        sink = WebhookLeadSink(sink_url, LEAD_SECRET)
        hooks = WebhookSender(EgressGuard(allow_private=True))
        try:
            assert await gateway.send(_sms()) is None
            assert await sink.create_lead(_delivery()) == "direct"
            answer = await hooks.send(hook_url, (GATEWAY_SECRET,), "msg_1", b"{}")
            assert answer.ok
        finally:
            await gateway.close()
            await sink.close()
        assert partner.paths == ["/sms", "/leads", "/hook"] and proxy.lines == []

        # as `serve` composes them from its settings
        proxied = Settings(
            sms_gateway_url=gateway_url,
            sms_gateway_secret=GATEWAY_SECRET,
            sms_gateway_timeout_s=3,
            sms_gateway_concurrency=2,
            lead_webhook_url=sink_url,
            lead_webhook_secret=LEAD_SECRET,
            outbound_proxy=through,
        )
        (transport,) = transports_from(proxied, RefusingTicketsPdf())
        assert isinstance(transport, SmsGatewayTransport)
        gateway = transport
        assert (gateway.client.partner.timeout_s, gateway.sessions) == (3, 2)
        made = lead_sink_from(proxied)
        assert isinstance(made, WebhookLeadSink)
        sink = made
        try:
            assert await gateway.send(_sms()) is None
            assert await sink.create_lead(_delivery()) == "via-proxy"
            answer = await hooks.send(hook_url, (GATEWAY_SECRET,), "msg_2", b"{}")
            assert answer.ok  # a webhook never goes through the proxy
        finally:
            await gateway.close()
            await sink.close()
            await hooks.close()
        assert proxy.lines == [f"POST {gateway_url} HTTP/1.1", f"POST {sink_url} HTTP/1.1"]
        assert partner.paths == ["/sms", "/leads", "/hook", "/hook"]


async def test_a_lead_call_is_tried_once_and_bounded_in_time():
    async with Silent() as crm:
        sink = WebhookLeadSink(f"http://127.0.0.1:{crm.port}/leads", LEAD_SECRET, timeout_s=0.5)
        try:
            call = sink.create_lead(_delivery())
            with pytest.raises(LeadRefused, match=r"did not answer within 0\.5 s"):
                await asyncio.wait_for(call, 5)  # its own bound ends it, not this one
        finally:
            await sink.close()
    assert crm.connections == 1  # tried once: the pass parks it and backs it off


async def test_a_kick_ends_a_lanes_failure_back_off_and_a_plain_wake_does_not(
    settings: Settings, pool: asyncpg.Pool
):
    from events_svc.verbs.webhooks import WAKE_CHANNEL

    loop = hand_loop(pool, settings)
    lane = loop.lanes["webhooks"]
    lane.failing = 3  # backing off after failed runs
    loop._heard(WAKE_CHANNEL, "")
    assert not lane.woken.is_set()  # new facts do not make a failing pass busy
    loop._heard(WAKE_CHANNEL, "redeliver")
    assert lane.woken.is_set()  # an operator's redelivery is sent now


async def test_a_silent_sms_gateway_holds_no_mail_back(settings: Settings, pool: asyncpg.Pool):
    """The outbox's two channels drain in lanes of their own: while the gateway accepts
    connections and never answers, a mail written meanwhile is sent."""
    async with Silent() as gateway:
        with smtp_sink() as (relay, port):
            wired = dataclasses.replace(
                settings,
                scheduler_enabled=True,
                smtp=SmtpRelay(host="127.0.0.1", port=port),
                mail_from=MAIL_FROM,
                smtp_rate=0,
                sms_gateway_url=f"http://127.0.0.1:{gateway.port}/sms",
                sms_gateway_secret=GATEWAY_SECRET,
                sms_gateway_timeout_s=30,
            )
            async with running(wired, pool):
                texts = [await queue_sms(pool, phone=f"+3247000000{i}") for i in range(3)]
                await until_true(lambda: gateway.connections >= 1, 10)  # the sms lane waits
                [mail] = await queue_mail(pool, recipient="cleo@example.org")
                await until_true(lambda: _state(pool, mail, "sent"), 10)
                for text in texts:  # still in the gateway's hands, or waiting their turn
                    assert (await row(pool, text))["state"] in ("sending", "queued")
                gateway.hang_up()  # the call in hand fails now: the loop stops at once
        assert [m["To"] for m in relay.accepted] == ["cleo@example.org"]


async def test_a_redelivery_reaches_a_webhooks_lane_that_is_backing_off(
    settings: Settings, pool: asyncpg.Pool
):
    """The redelivery route kicks the webhooks' lane of every process through the loop's
    LISTEN connection, whatever back-off the lane holds: the message is sent again within
    12 s (a lane failing 3 times in a row waits 20 s, an idle one up to a minute: only the
    kick delivers it sooner; 5 s proved too short once on a fully loaded suite run)."""
    from tests.probes.webhooks.kit import endpoint, ping
    from tests.probes.webhooks.receiver import receiver

    wired = dataclasses.replace(settings, scheduler_enabled=True, webhook_allow_private=True)
    with receiver() as sink:
        async with running(wired, pool) as admin:
            hook = await endpoint(admin, f"{sink.url}/in")
            queued = await ping(admin, hook["id"])
            await until_true(lambda: len(sink.got()) == 1, 10)
            loop = admin.app.state.events.loop  # type: ignore[attr-defined]
            lane = loop.lanes["webhooks"]
            await until_listening(pool)
            lane.failing = 3  # as after failed runs: only a stop or a kick ends its wait
            lane.woken.clear()
            r = await admin.post(f"/admin/webhook-deliveries/{queued['id']}/redeliver")
            assert r.status_code == 202, r.text
            await until_true(lambda: len(sink.got()) == 2, 12)
            attempts = await until_true(lambda: _succeeded(admin, hook["id"], 2), 12)
            assert {a["message_id"] for a in attempts} == {queued["message_id"]}
            lane.failing = 0


async def _succeeded(
    admin: httpx.AsyncClient, endpoint_id: str, n: int
) -> list[dict[str, Any]] | None:
    from tests.probes.webhooks.kit import log

    attempts = [a for a in await log(admin, endpoint_id) if a["state"] == "succeeded"]
    return attempts if len(attempts) >= n else None


class Failing(Pass):
    """A pass that fails each run, after a NOTIFY of its own channel arrived mid-run."""

    name = "failing"

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    async def run(self, now: datetime, stopping: Any, entry: Entry) -> Ran:
        self.runs += 1
        self.wake()  # new work was written while this run was failing
        await asyncio.sleep(0)
        raise ConnectionError("the partner is away")


async def test_a_wake_heard_during_a_failing_run_does_not_cut_its_back_off(
    settings: Settings, pool: asyncpg.Pool
):
    job = Failing()
    loop = Loop([job], lambda: pool, settings, lambda: datetime.now(UTC))
    lane = loop.lanes["failing"]
    lane.task = asyncio.create_task(lane.serve())
    try:
        await until_true(lambda: job.runs == 1, 5)
        await asyncio.sleep(0.5)  # PASS_FAILED: 5 s before the next run
        assert (job.runs, lane.failing) == (1, 1)
        lane.kick()  # an operator's retry runs it now
        await until_true(lambda: job.runs == 2, 5)
    finally:
        await loop.stop()
    assert lane.failures == 2


async def test_a_reopened_listen_connection_runs_failing_lanes_at_once(
    settings: Settings, pool: asyncpg.Pool
):
    loop = hand_loop(pool, settings)
    failing, quiet = loop.lanes["webhooks"], loop.lanes["offers"]
    failing.failing = 2  # the database was away: its runs failed
    failing.woken.clear()
    quiet.woken.clear()
    loop._opened()
    assert failing.woken.is_set() and failing.kicked  # runs now, whatever its back-off
    assert quiet.woken.is_set()  # looks at what was written while no one listened


async def test_more_is_said_when_the_budget_stops_a_pass_not_when_a_shutdown_does():
    class Batches(Pass):
        name = "batches"

        async def run(self, now: datetime, stopping: Any, entry: Entry) -> Ran:
            done = 0
            while not stopping() and done < 3:
                done += 1
            return Ran({"done": done})

    now = datetime.now(UTC)
    finished = await run_pass(Batches(), LOOP, now)
    assert (finished.counts, finished.more) == ({"done": 3}, False)
    budget = await run_pass(Batches(), LOOP, now, budget_s=0)
    assert (budget.counts, budget.more) == ({"done": 0}, True)
    shutdown = await run_pass(Batches(), LOOP, now, stopping=lambda: True)
    assert (shutdown.counts, shutdown.more) == ({"done": 0}, False)
