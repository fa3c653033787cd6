"""The operator's side of delivery through the real HTTP app: the outbox's filters and
delivery fields, the summary, retry (its refusals, its fence, its audit), /metrics and
the log line of a failed attempt."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc.settings import Settings
from events_svc.verbs.delivery import claim_due
from tests.probes.delivery.helpers import drainer, now, queue_mail, queue_sms, relay_settings
from tests.probes.delivery.sink import smtp_sink
from tests.probes.helpers import Api, api_status, company_client, make_event

ADDRESSES = ("ada0@example.org", "ada1@example.org", "ada2@example.org")
A = uuid.UUID(int=0xA)


@pytest.fixture
async def admin(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    """Company A's '*' client: its events are fenced from other companies."""
    client = await company_client(api, A)
    yield client
    await client.aclose()


async def _three_outcomes(
    pool: asyncpg.Pool, settings: Settings, admin: httpx.AsyncClient, api: Api
) -> tuple[str, dict[str, Any]]:
    """An event of company A (`admin` is A's) with three mails: one sent, one failed
    (550), one retrying (451)."""
    event = await make_event(admin)
    await queue_mail(pool, 3, recipient="ada{i}@example.org", event_id=uuid.UUID(event["id"]))
    with smtp_sink() as (sink, port):
        sink.script = ["250", "550 5.1.1 <ada1@example.org> unknown", "451 4.3.0 busy"]
        drain = drainer(pool, relay_settings(settings, port), metrics=api.app.state.events.metrics)
        summary = await drain.drain()
        await drain.close()
    assert (summary.sent, summary.failed, summary.retrying) == (1, 1, 1)
    listed = (await admin.get("/admin/outbox", params={"event_id": event["id"]})).json()
    by_state = {m["delivery_state"]: m for m in listed["items"]}
    assert set(by_state) == {"sent", "failed", "retrying"}
    return event["id"], by_state


async def test_the_outbox_shows_and_filters_the_delivery_fields(
    pool: asyncpg.Pool, settings: Settings, api: Api, admin: httpx.AsyncClient
):
    event_id, by_state = await _three_outcomes(pool, settings, admin, api)
    sent, failed, retrying = by_state["sent"], by_state["failed"], by_state["retrying"]
    assert sent["attempts"] == 1 and sent["sent_at"] and sent["last_error"] is None
    assert sent["next_attempt_at"] is None
    assert failed["last_error"]["kind"] == "permanent" and failed["last_error"]["code"] == 550
    assert failed["next_attempt_at"] is None
    assert retrying["last_error"]["kind"] == "temporary" and retrying["last_error"]["code"] == 451
    assert retrying["next_attempt_at"] is not None
    for message in by_state.values():
        assert message["message_id"].startswith("<") and message["message_id"].endswith(">")
        assert message["recipient"] not in ADDRESSES  # masked, as before
        assert message["subject"] is None and message["body"] is None
        assert "@example.org" not in json.dumps(message["last_error"])  # never an address
    for state in ("sent", "failed", "retrying"):
        page = await admin.get(
            "/admin/outbox", params={"event_id": event_id, "delivery_state": state}
        )
        assert [m["id"] for m in page.json()["items"]] == [by_state[state]["id"]]
    await queue_sms(pool, event_id=uuid.UUID(event_id))
    texts = (await admin.get("/admin/outbox", params={"channel": "sms"})).json()["items"]
    assert texts and {m["channel"] for m in texts} == {"sms"}
    mails = await admin.get("/admin/outbox", params={"event_id": event_id, "channel": "mail"})
    assert len(mails.json()["items"]) == 3
    for bad in ({"delivery_state": "lost"}, {"channel": "fax"}):
        assert (await api_status(admin, "GET", "/admin/outbox", params=bad))[0] == 422
    # pii=full shows the address to a registration:pii reader (audited, as before)
    params = {"event_id": event_id, "channel": "mail", "pii": "full"}
    full = await admin.get("/admin/outbox", params=params)
    assert {m["recipient"] for m in full.json()["items"]} == set(ADDRESSES)


async def test_the_summary_counts_each_state_of_an_event_or_of_the_company(
    pool: asyncpg.Pool, settings: Settings, api: Api, admin: httpx.AsyncClient
):
    event_id, _ = await _three_outcomes(pool, settings, admin, api)
    summary = (await admin.get("/admin/outbox/summary", params={"event_id": event_id})).json()
    assert summary == {"queued": 0, "sending": 0, "sent": 1, "retrying": 1, "failed": 1}
    other = await make_event(admin)
    await queue_mail(pool, 2, event_id=uuid.UUID(other["id"]))
    everything = (await admin.get("/admin/outbox/summary")).json()
    assert everything["queued"] >= 2 and everything["sent"] >= 1
    of_other = (await admin.get("/admin/outbox/summary", params={"event_id": other["id"]})).json()
    assert of_other == {"queued": 2, "sending": 0, "sent": 0, "retrying": 0, "failed": 0}
    missing = await api_status(
        admin, "GET", "/admin/outbox/summary", params={"event_id": str(uuid.uuid4())}
    )
    assert missing == (404, "not_found")
    # another company's actor counts none of these
    stranger = await company_client(api, uuid.uuid4())
    try:
        theirs = (await stranger.get("/admin/outbox/summary")).json()
        assert theirs == {"queued": 0, "sending": 0, "sent": 0, "retrying": 0, "failed": 0}
        foreign = await api_status(
            stranger, "GET", "/admin/outbox/summary", params={"event_id": event_id}
        )
        assert foreign == (404, "not_found")
    finally:
        await stranger.aclose()


async def test_retry_requeues_a_failed_message_which_is_then_sent(
    pool: asyncpg.Pool, settings: Settings, api: Api, admin: httpx.AsyncClient
):
    event_id, by_state = await _three_outcomes(pool, settings, admin, api)
    failed, sent = by_state["failed"], by_state["sent"]
    runner = await api.token("scheduler:run")
    before = now()
    retried = await admin.post(f"/admin/outbox/{failed['id']}/retry", headers=runner)
    assert retried.status_code == 200
    body = retried.json()
    assert body["delivery_state"] == "queued" and body["attempts"] == 1  # attempts kept
    assert before - timedelta(seconds=1) <= _at(body["next_attempt_at"]) <= now()
    assert body["message_id"] == failed["message_id"] and body["recipient"] == failed["recipient"]
    # nothing else to retry: queued, sent → 409 with the state
    for message_id, state in ((failed["id"], "queued"), (sent["id"], "sent")):
        refused = await admin.post(f"/admin/outbox/{message_id}/retry", headers=runner)
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert error["code"] == "outbox_message_not_retryable"
        assert error["delivery_state"] == state
    # a retrying message is due now too; one claimed by a drainer (sending) is not retried
    retrying = by_state["retrying"]
    again = await admin.post(f"/admin/outbox/{retrying['id']}/retry", headers=runner)
    assert again.status_code == 200 and again.json()["delivery_state"] == "queued"
    claim = await claim_due(pool, ["mail"], now(), 10, timedelta(minutes=5))
    assert {str(r.message.id) for r in claim.rows} == {failed["id"], retrying["id"]}
    busy = await admin.post(f"/admin/outbox/{retrying['id']}/retry", headers=runner)
    assert busy.status_code == 409 and busy.json()["error"]["delivery_state"] == "sending"
    async with pool.acquire() as conn:  # the claim gives them back, as a dead drainer would
        await conn.execute(
            "UPDATE event.outbox_messages SET next_attempt_at = now(), lease_until = now()"
            " WHERE id = ANY($1::uuid[])",
            [r.message.id for r in claim.rows],
        )
    # the retried messages go out with their Message-IDs
    with smtp_sink() as (sink, port):
        summary = await drainer(pool, relay_settings(settings, port)).drain()
    assert summary.sent == 2
    assert sorted(sink.seen_ids) == sorted([failed["message_id"], retrying["message_id"]])
    async with pool.acquire() as conn:
        audit = await conn.fetchrow(
            "SELECT verb, summary::text AS summary, event_id FROM event.event_audit_log"
            " WHERE object_id = $1 AND verb = 'outbox_message_retried'",
            uuid.UUID(failed["id"]),
        )
    assert audit is not None and str(audit["event_id"]) == event_id
    assert "failed" in audit["summary"] and "@" not in audit["summary"]


async def test_retry_is_fenced_and_needs_scheduler_run(
    pool: asyncpg.Pool, settings: Settings, api: Api, admin: httpx.AsyncClient
):
    _, by_state = await _three_outcomes(pool, settings, admin, api)
    retrying = by_state["retrying"]["id"]
    reader = await api.token("registration:read")
    assert await api_status(admin, "POST", f"/admin/outbox/{retrying}/retry", headers=reader) == (
        403,
        "missing_scope",
    )
    unknown = await api_status(admin, "POST", f"/admin/outbox/{uuid.uuid4()}/retry")
    stranger = await company_client(api, uuid.uuid4())
    try:
        foreign = await api_status(stranger, "POST", f"/admin/outbox/{retrying}/retry")
    finally:
        await stranger.aclose()
    assert foreign == unknown == (404, "not_found")
    listed = await admin.get("/admin/outbox", params={"delivery_state": "retrying"})
    assert retrying in {m["id"] for m in listed.json()["items"]}  # untouched


async def test_metrics_and_the_log_line_of_a_failed_attempt(
    pool: asyncpg.Pool,
    settings: Settings,
    api: Api,
    admin: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
):
    with caplog.at_level(logging.WARNING, logger="events_svc.delivery"):
        await _three_outcomes(pool, settings, admin, api)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url="http://svc"
    ) as c:
        text = (await c.get("/metrics")).text
    assert 'events_outbox_messages{channel="mail",state="sent"}' in text
    assert 'events_outbox_messages{channel="sms",state="queued"}' in text
    for result in ("sent", "permanent", "temporary"):
        line = f'events_delivery_attempts_total{{channel="mail",result="{result}"}} 1.0'
        assert line in text, result
    failures = [r for r in caplog.records if r.getMessage() == "outbox delivery attempt failed"]
    assert len(failures) == 2
    for record in failures:
        fields = record.__dict__["fields"]
        assert fields["message_id"].startswith("<") and fields["error_kind"] in {
            "permanent",
            "temporary",
        }
        assert "@example.org" not in json.dumps(fields) + record.getMessage()


def _at(raw: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(raw)
