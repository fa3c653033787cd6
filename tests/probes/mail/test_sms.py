"""The SMS arm: its own port, parked loudly when unwired and delivered once wired; the
channel that follows the template's kind; the one template cascade verb for both kinds."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from events_svc import migrate
from events_svc.adapters.standalone import OutboxQueue, OutboxSmsQueue, StoreRenderer
from events_svc.ports import Ports
from events_svc.settings import Settings
from events_svc.surface import EventSurface
from tests.probes.helpers import Api, make_event, migrate_before, outbox, run, template

UNWIRED = Ports(template_renderer=StoreRenderer(), mail_queue=OutboxQueue())
WIRED = Ports(
    template_renderer=StoreRenderer(), mail_queue=OutboxQueue(), sms_queue=OutboxSmsQueue()
)


async def sms_template(
    admin: httpx.AsyncClient, body: str = "See you, {{ registration.name }}"
) -> str:
    r = await admin.post("/admin/templates", json={"kind": "sms", "name": "Text", "body": body})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def line(admin: httpx.AsyncClient, event_id: str, tpl: str, **over: Any) -> httpx.Response:
    body = {
        "event_id": event_id,
        "interval_nbr": 0,
        "interval_unit": "now",
        "interval_kind": "after_sub",
        "template_ref": tpl,
        **over,
    }
    return await admin.post("/admin/mails", json=body)


async def guest(admin: httpx.AsyncClient, event_id: str, **fields: str) -> str:
    r = await admin.post("/admin/registrations", json={"event_id": event_id, **fields})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_an_unwired_sms_gateway_parks_the_line_and_the_next_pass_delivers(api: Api, admin):
    ev = await make_event(admin)
    made = await line(admin, ev["id"], await sms_template(admin))
    assert made.status_code == 201 and made.json()["notification_channel"] == "sms"
    mail_id = made.json()["id"]
    ada = await guest(admin, ev["id"], name="Ada", phone="+44 20 7946 0958", email="a@x.org")
    now = datetime.now(UTC)
    await run(api, now, p=UNWIRED)
    view = (await admin.get(f"/admin/mails/{mail_id}")).json()
    assert view["error_kind"] == "sms_enqueue_refused" and view["mail_state"] == "error"
    assert view["mail_done"] is False and view["count_sent"] == 0
    assert view["next_attempt_at"] is not None  # backs off like any line failure
    assert await outbox(api) == []
    await run(api, now + timedelta(seconds=30), p=WIRED)  # still backing off: nothing
    assert await outbox(api) == []
    await run(api, now + timedelta(minutes=2), p=WIRED)
    sent = await outbox(api, mail_id)
    assert [(m["channel"], m["recipient"], m["body"], str(m["registration_id"])) for m in sent] == [
        ("sms", "+44 20 7946 0958", "See you, Ada", ada)
    ]
    view = (await admin.get(f"/admin/mails/{mail_id}")).json()
    assert view["error_kind"] is None and view["mail_done"] is True and view["count_sent"] == 1
    await run(api, now + timedelta(minutes=3), p=WIRED)
    assert len(await outbox(api, mail_id)) == 1  # once


async def test_sms_never_goes_through_the_mail_queue(api: Api, admin):
    ev = await make_event(admin)
    made = (await line(admin, ev["id"], await sms_template(admin))).json()
    await guest(admin, ev["id"], name="Ada", phone="+44 20 7946 0958")
    mail_only = Ports(template_renderer=StoreRenderer(), mail_queue=OutboxQueue())
    await run(api, datetime.now(UTC), p=mail_only)
    assert await outbox(api, made["id"]) == []


async def test_an_attendee_without_a_phone_fails_alone(api: Api, admin):
    ev = await make_event(admin)
    made = (await line(admin, ev["id"], await sms_template(admin))).json()
    await guest(admin, ev["id"], name="No phone", email="n@example.org")
    await guest(admin, ev["id"], name="Grace", phone="+1 202 555 0143")
    await run(api, datetime.now(UTC), p=WIRED)
    view = (await admin.get(f"/admin/mails/{made['id']}")).json()
    assert (view["count_sent"], view["count_failed"], view["mail_done"]) == (1, 1, True)
    assert view["error_kind"] is None
    assert [m["recipient"] for m in await outbox(api, made["id"])] == ["+1 202 555 0143"]
    async with api.pool.acquire() as conn:
        kinds = await conn.fetch(
            "SELECT outcome::text, error_kind::text FROM event.mail_registrations"
            " WHERE scheduler_id = $1 AND outcome = 'failed'",
            uuid.UUID(made["id"]),
        )
    assert [tuple(k) for k in kinds] == [("failed", "recipient_invalid")]


async def test_the_channel_follows_the_template_kind(api: Api, admin):
    ev = await make_event(admin)
    text, mail = await sms_template(admin), await template(admin)
    r = await line(admin, ev["id"], text, notification_channel="mail")
    assert r.status_code == 422 and r.json()["error"]["code"] == "channel_kind_mismatch"
    assert r.json()["error"]["field"] == "notification_channel"
    r = await line(admin, ev["id"], mail, notification_channel="sms")
    assert r.status_code == 422 and r.json()["error"]["code"] == "channel_kind_mismatch"
    made = (await line(admin, ev["id"], mail)).json()
    assert made["notification_channel"] == "mail"
    r = await admin.patch(f"/admin/mails/{made['id']}", json={"template_ref": text})
    assert r.status_code == 200 and r.json()["notification_channel"] == "sms"  # follows
    r = await admin.patch(f"/admin/mails/{made['id']}", json={"notification_channel": "mail"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "channel_kind_mismatch"
    kind_line = {"template_ref": text, "interval_nbr": 1}
    t = (await admin.post("/admin/types", json={"name": "Meetup"})).json()
    r = await admin.post(
        f"/admin/types/{t['id']}/mails", json={**kind_line, "template_kind": "mail"}
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "template_kind"
    r = await admin.post(
        f"/admin/types/{t['id']}/mails", json={**kind_line, "notification_channel": "mail"}
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "channel_kind_mismatch"
    r = await admin.post(f"/admin/types/{t['id']}/mails", json=kind_line)
    assert r.status_code == 201
    typed = r.json()["mails"][0]
    assert (typed["template_kind"], typed["notification_channel"]) == ("sms", "sms")
    applied = await make_event(admin, event_type_id=t["id"])  # template apply keeps the pair
    lines = (await admin.get("/admin/mails", params={"event_id": applied["id"]})).json()
    assert [m["notification_channel"] for m in lines["items"]] == ["sms"]


async def test_one_cascade_verb_removes_the_lines_of_either_kind(api: Api, admin, settings):
    ev = await make_event(admin)
    text, mail = await sms_template(admin), await template(admin)
    kinds = (await admin.post("/admin/types", json={"name": "Both"})).json()
    for tpl in (text, mail):
        assert (await line(admin, ev["id"], tpl)).status_code == 201
        r = await admin.post(f"/admin/types/{kinds['id']}/mails", json={"template_ref": tpl})
        assert r.status_code == 201

    async def remaining() -> list[str]:
        items = (await admin.get("/admin/mails", params={"event_id": ev["id"]})).json()["items"]
        return sorted(m["notification_channel"] for m in items)

    async def type_lines() -> list[str]:
        view = (await admin.get(f"/admin/types/{kinds['id']}")).json()
        return sorted(m["template_kind"] for m in view["mails"])

    r = await admin.delete(f"/admin/templates/{text}")
    assert r.status_code in (200, 204)
    assert await remaining() == ["mail"] and await type_lines() == ["mail"]
    surface = EventSurface(api.pool, Settings())
    assert await surface.on_template_deleted("sms", uuid.UUID(mail)) == {
        "mails_deleted": 0,
        "type_lines_deleted": 0,
        "trigger_purposes_unmapped": [],
        "waitlist_offer_templates_unset": 0,
    }  # kind-discriminated: the mail template's lines stay
    assert await surface.on_template_deleted("mail", uuid.UUID(mail)) == {
        "mails_deleted": 1,
        "type_lines_deleted": 1,
        "trigger_purposes_unmapped": [],
        "waitlist_offer_templates_unset": 0,
    }
    assert await remaining() == [] and await type_lines() == []
    async with api.pool.acquire() as conn:
        verbs = await conn.fetch(
            "SELECT verb, summary FROM event.event_audit_log"
            " WHERE verb IN ('template_lines_cascaded', 'mail_deleted') ORDER BY id"
        )
    assert [v["verb"] for v in verbs].count("template_lines_cascaded") == 3
    assert [v["verb"] for v in verbs].count("mail_deleted") == 2


async def test_the_upgrade_gives_old_lines_their_templates_kind(empty_db_url: str, tmp_path):
    """Lines written before 0015 recorded the channel they asked for as their kind."""
    conn = await asyncpg.connect(empty_db_url)
    try:
        await migrate_before(conn, tmp_path / "migrations", "0015")
        text = await conn.fetchval(
            "INSERT INTO event.message_templates (kind, name, body) VALUES ('sms', 'T', 'x')"
            " RETURNING id"
        )
        event = await conn.fetchval(
            "INSERT INTO event.events (name, date_begin, date_end) VALUES"
            " ('E', now(), now() + interval '1 day') RETURNING id"
        )
        await conn.execute(
            "INSERT INTO event.mails (event_id, template_ref) VALUES ($1, $2)", event, text
        )
        kind = await conn.fetchval("INSERT INTO event.types (name) VALUES ('T') RETURNING id")
        await conn.execute(
            "INSERT INTO event.type_mails (type_id, template_ref) VALUES ($1, $2)", kind, text
        )
        await migrate.apply(conn, migrate.default_dir())
        for table in ("mails", "type_mails"):
            row = await conn.fetchrow(
                f"SELECT template_kind::text, notification_channel::text FROM event.{table}"
            )
            assert tuple(row) == ("sms", "sms")
    finally:
        await conn.close()
