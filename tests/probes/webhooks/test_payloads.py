"""What a receiver on loopback gets, through the real HTTP app and the hand-turned
delivery loop: a `registration.created` body with and without `include_pii` (checked on
the very bytes received, signature included), a name that resolves privately by the time
of delivery (refused before any connection, retried on the schedule), a fact that rolls
back after it was written (nothing sent), and a redelivery while a retry waits (the
waiting attempt made due, the same `webhook-id`)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from events_svc.backoff import WEBHOOKS
from events_svc.loops import WebhookPass
from tests.probes.helpers import add_ticket, make_event
from tests.probes.webhooks.kit import (
    PII,
    Clock,
    endpoint,
    log,
    turn_until_quiet,
)
from tests.probes.webhooks.receiver import Receiver

PERSON = {
    "name": "Zoë Ångström",
    "email": "zoe.angstrom@example.org",
    "phone": "+351 21 123 4567",
    "company_name": "Café Müller Lda",
}
PUBLIC = "93.184.216.34"
TIMES = ("date_open", "created_at", "updated_at")


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def register(admin: httpx.AsyncClient, event_id: str, **body: Any) -> dict[str, Any]:
    r = await admin.post("/admin/registrations", json={"event_id": event_id, **PERSON, **body})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def attempts(admin: httpx.AsyncClient, endpoint_id: str) -> list[dict[str, Any]]:
    """The endpoint's log, latest attempt first (the fan-out and the answer of a first
    attempt may share one instant of the probe's clock: the log's own order ties)."""
    return sorted(await log(admin, endpoint_id), key=lambda r: r["attempt"], reverse=True)


async def stored_body(pool: asyncpg.Pool, webhook_id: str) -> bytes:
    """The body the message row keeps (the bytes every attempt signs and sends)."""
    text = await pool.fetchval(
        "SELECT body FROM event.webhook_messages WHERE id = $1", uuid.UUID(webhook_id[4:])
    )
    return str(text).encode()


def expected_data(
    made: dict[str, Any], event: dict[str, Any], ticket: dict[str, Any] | None
) -> dict[str, Any]:
    """The `data` of the registration's `registration.created` without PII, its times left
    out (compared as instants)."""
    data: dict[str, Any] = {
        "registration_id": made["id"],
        "event_id": event["id"],
        "event_name": event["name"],
        "event_ticket_id": ticket["id"] if ticket else None,
        "event_slot_id": None,
        "state": "open",
        "active": True,
        "sale_status": None,
        "sale_order_id": None,
        "origin": None,
        "version": 1,
        "date_closed": None,
    }
    if ticket is not None:
        data["ticket_name"] = ticket["name"]
    return data


def no_pii_anywhere(body: bytes, values: list[str]) -> None:
    """None of the PII keys as a key anywhere in the document, none of the values in the
    bytes (raw UTF-8 or JSON-escaped)."""

    def keys(node: Any) -> set[str]:
        if isinstance(node, dict):
            return set(node) | {k for v in node.values() for k in keys(v)}
        if isinstance(node, list):
            return {k for v in node for k in keys(v)}
        return set()

    assert not set(PII) & keys(json.loads(body)), body
    for value in values:
        for form in (value.encode(), json.dumps(value)[1:-1].encode()):
            assert form not in body, (value, body)


async def test_a_registration_body_carries_pii_only_for_an_include_pii_endpoint(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass, pool: asyncpg.Pool
) -> None:
    with_pii = await endpoint(admin, f"{sink.url}/pii", include_pii=True)
    without = await endpoint(admin, f"{sink.url}/plain")
    assert (with_pii["include_pii"], without["include_pii"]) == (True, False)
    event = await make_event(admin, name="PyCon Lisbon")
    ticket = await add_ticket(admin, event["id"], name="Standard")
    bare_event = await make_event(admin, name="Sprint Day")
    ticketed = await register(admin, event["id"], event_ticket_id=ticket["id"])
    bare = await register(admin, bare_event["id"], name="Bo Bare", email="bo@example.org")
    await turn_until_quiet(loop)
    pii_got, plain_got = sink.got("/pii"), sink.got("/plain")
    assert len(pii_got) == len(plain_got) == 2
    logs = {h["id"]: await log(admin, h["id"]) for h in (with_pii, without)}
    for hook, got in ((with_pii, pii_got), (without, plain_got)):
        assert [r["state"] for r in logs[hook["id"]]] == ["succeeded", "succeeded"]
        assert {r["message_id"] for r in logs[hook["id"]]} == {g.headers["webhook-id"] for g in got}
        for g in got:
            assert g.headers["content-type"] == "application/json"
            assert g.body == await stored_body(pool, g.headers["webhook-id"])
            assert Webhook(hook["secret"]).verify(g.body, g.headers) == json.loads(g.body)
            other = without if hook is with_pii else with_pii
            with pytest.raises(WebhookVerificationError):  # another endpoint's secret
                Webhook(other["secret"]).verify(g.body, g.headers)
    # one message (and id) per endpoint for one fact
    assert not {g.headers["webhook-id"] for g in pii_got} & {
        g.headers["webhook-id"] for g in plain_got
    }
    cases = ((ticketed, event, ticket, PERSON["name"]), (bare, bare_event, None, "Bo Bare"))
    for made, ev, tk, name in cases:
        view = (await admin.get(f"/admin/registrations/{made['id']}?pii=full")).json()
        person = {k: view[k] for k in PII}
        assert (person["name"], person["barcode"]) == (name, made["barcode"])
        for got, pii in ((pii_got, True), (plain_got, False)):
            (one,) = [g for g in got if g.doc["data"]["registration_id"] == made["id"]]
            doc = json.loads(one.body)
            assert set(doc) == {"type", "timestamp", "data"}
            assert doc["type"] == "registration.created"
            data = dict(doc["data"])
            for key in TIMES:  # the verb's own time, the fact's too
                assert at(data.pop(key)) == at(view[key]) == at(doc["timestamp"]), key
            expected = expected_data(made, ev, tk)
            if pii:
                expected.update(person)
            assert data == expected
            if not pii:
                no_pii_anywhere(one.body, list(person.values()))
    # the ticketless registration names its event, and no ticket
    (bare_plain,) = [g for g in plain_got if g.doc["data"]["registration_id"] == bare["id"]]
    assert "ticket_name" not in bare_plain.doc["data"]
    assert bare_plain.doc["data"]["event_name"] == "Sprint Day"


async def test_a_name_that_resolves_privately_at_delivery_is_refused_without_connecting(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass, clock: Clock, app: Any
) -> None:
    guard = app.state.events.egress
    guard.allow_private = False  # the probes' settings: private addresses not allowed
    port = urlsplit(sink.url).port
    assert port is not None
    answer = [PUBLIC]
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, p: int) -> list[str]:
        asked.append((host, p))
        if host != "hooks.example.test":
            raise OSError("no such name")
        return list(answer)

    guard.resolver = resolve
    hook = await endpoint(admin, f"http://hooks.example.test:{port}/in")  # public at write
    assert asked == [("hooks.example.test", port)]
    answer[:] = ["10.0.0.5"]  # the name moved to a private address before the delivery
    queued = (await admin.post(f"/admin/webhooks/{hook['id']}/ping")).json()
    clock.move(milliseconds=1)
    await turn_until_quiet(loop)
    assert asked[1:] == [("hooks.example.test", port)]  # asked again before connecting
    assert sink.got() == []
    rows = await log(admin, hook["id"])
    assert [(r["attempt"], r["state"]) for r in rows] == [(2, "pending"), (1, "retrying")]
    first = rows[1]
    assert (first["error"], first["response_status"]) == ("address_not_allowed", None)
    assert at(rows[0]["next_attempt_at"]) == clock.now + WEBHOOKS.delay(1)
    assert {r["message_id"] for r in rows} == {queued["message_id"]}
    # the retry, on schedule: the name now answers loopback, where the receiver listens;
    # were the guard skipped, the receiver would get it
    answer[:] = ["127.0.0.1"]
    clock.move(seconds=4)
    await turn_until_quiet(loop)
    assert len(await log(admin, hook["id"])) == 2  # not due before its 5 s
    clock.move(seconds=1)
    await turn_until_quiet(loop)
    assert sink.got() == []
    rows = await log(admin, hook["id"])
    assert [(r["attempt"], r["state"], r["error"]) for r in rows] == [
        (3, "pending", None),
        (2, "retrying", "address_not_allowed"),
        (1, "retrying", "address_not_allowed"),
    ]
    assert at(rows[0]["next_attempt_at"]) == clock.now + WEBHOOKS.delay(2)
    # an operator who trusts the network: the next attempt connects to the address the
    # resolver answered (the name itself resolves nowhere), the same message
    guard.allow_private = True
    clock.now += WEBHOOKS.delay(2)
    await turn_until_quiet(loop)
    (got,) = sink.got("/in")
    assert got.headers["webhook-id"] == queued["message_id"]
    assert (await log(admin, hook["id"]))[0]["state"] == "succeeded"


def order_line(event_id: str, n: int) -> dict[str, Any]:
    people = [{"name": f"Buyer {i}", "email": f"buyer{i}@example.org"} for i in range(n)]
    return {"line_id": str(uuid.uuid4()), "event_id": event_id, "attendees": people}


async def test_an_order_refused_after_its_first_line_wrote_facts_sends_nothing(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass, pool: asyncpg.Pool
) -> None:
    # No correction can be made to fail after its fact through HTTP (every check comes
    # before `_record_update`); the sale seam can: each line registers (writing its
    # `registration.created` facts) before the next line is decided.
    hook = await endpoint(
        admin, f"{sink.url}/in", event_types=["registration.created", "order.applied"]
    )
    roomy = await make_event(admin)
    full = await make_event(admin, seats_max=1)
    await register(admin, full["id"])
    await turn_until_quiet(loop)
    assert len(sink.got()) == 1  # the full event's own registration
    order = {"order_id": str(uuid.uuid4()), "amount_total": "0", "currency": "EUR"}
    refused = {**order, "lines": [order_line(roomy["id"], 2), order_line(full["id"], 1)]}
    r = await admin.post("/admin/seam/orders/confirmed", json=refused)
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] == "event_seats_exhausted", r.text
    await turn_until_quiet(loop)
    assert len(sink.got()) == 1
    assert len(await log(admin, hook["id"])) == 1
    assert await pool.fetchval("SELECT count(*) FROM event.webhook_facts") == 0
    assert await pool.fetchval("SELECT count(*) FROM event.webhook_messages") == 1
    regs = await pool.fetchval(
        "SELECT count(*) FROM event.registrations WHERE event_id = $1", uuid.UUID(roomy["id"])
    )
    assert regs == 0
    # the same order on the roomy event alone: its facts are sent (the probe can see them)
    fine = {**order, "order_id": str(uuid.uuid4()), "lines": [order_line(roomy["id"], 2)]}
    r = await admin.post("/admin/seam/orders/confirmed", json=fine)
    assert r.status_code == 200 and r.json()["outcome"] == "applied", r.text
    await turn_until_quiet(loop)
    types = sorted(g.doc["type"] for g in sink.got()[1:])
    assert types == ["order.applied", "registration.created", "registration.created"]


async def test_redeliver_while_a_retry_waits_makes_that_attempt_due_now(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass, clock: Clock
) -> None:
    sink.script = ["500"]
    hook = await endpoint(admin, f"{sink.url}/in")
    event = await make_event(admin)
    await register(admin, event["id"])
    clock.move(milliseconds=1)
    await turn_until_quiet(loop)
    rows = await attempts(admin, hook["id"])
    assert [(r["attempt"], r["state"]) for r in rows] == [(2, "pending"), (1, "retrying")]
    waiting, failed = rows
    assert failed["response_status"] == 500
    assert at(waiting["next_attempt_at"]) == clock.now + timedelta(seconds=5)
    r = await admin.post(f"/admin/webhook-deliveries/{failed['id']}/redeliver")
    assert r.status_code == 202, r.text
    again = r.json()
    assert (again["id"], again["attempt"], again["state"]) == (waiting["id"], 2, "pending")
    assert at(again["next_attempt_at"]) == clock.now
    rows = await attempts(admin, hook["id"])
    assert [(r["attempt"], r["state"]) for r in rows] == [(2, "pending"), (1, "retrying")]
    await turn_until_quiet(loop)  # the clock has not moved: only the redelivery makes it due
    first, second = sink.got("/in")
    assert second.headers["webhook-id"] == first.headers["webhook-id"] == failed["message_id"]
    assert second.body == first.body
    assert Webhook(hook["secret"]).verify(second.body, second.headers)["type"] == (
        "registration.created"
    )
    rows = await attempts(admin, hook["id"])
    assert [(r["attempt"], r["state"], r["response_status"]) for r in rows] == [
        (2, "succeeded", 200),
        (1, "retrying", 500),
    ]
