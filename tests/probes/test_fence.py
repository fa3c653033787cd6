"""The company fence, swept over the whole admin API.

Company B builds one object of every kind it owns (an event with a ticket, a slot, a
registration, a template and a mail line, a booth with a booking, a lead rule, an
attendance import, an event operation, a sale order, an export confirmation). Then an
actor of company A holding every scope calls EVERY admin route of the OpenAPI document,
naming B's objects, and the same route again naming ids nobody has. A foreign object must
answer exactly like a missing one (same status, same error code): 404 on a route whose
path names it, an empty list where a filter names it. Nothing of B's changes.

Every admin operation of the OpenAPI document must be listed below (in `CASES`, or in
`SHARED` or `NAMES_NOTHING` with the reason), so a route added later without the fence,
or without a line here, fails this probe.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from events_svc.settings import Settings
from tests.probes.helpers import Api, add_slot, add_ticket, company_client, make_event

A, B = uuid.uuid4(), uuid.uuid4()
PREFIX = "/api/v1/event"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The probes' settings, with a capability secret: the link-minting routes answer."""
    return dataclasses.replace(settings, capability_secrets=("fence-probe-secret-of-32-chars!!",))


@dataclass
class Call:
    """How to call one route: its body, query and headers, with `{kind}` placeholders for
    the objects it names, and what a foreign object must answer."""

    body: Any = None
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    # "404": 404 for B's object, like an unknown one; "list": 200 with no item (or 404),
    # like an unknown one; "same": the very answer an unknown id gets
    expect: str = "404"
    # path parameters naming another kind than PARAM_KIND's (e.g. A's own mail line)
    path_kinds: dict[str, str] = field(default_factory=dict)
    # the one refusal the contract names for another company's object (instead of the
    # answer an unknown id gets): (status, code)
    named: tuple[int, str] | None = None


REASON = {"reason": "a probe"}
MATCH = {"If-Match": "1"}
LINE = {"interval_nbr": 1, "interval_unit": "days", "interval_kind": "before_event"}

CASES: dict[str, Call | tuple[Call, ...]] = {
    # registrations
    "GET /admin/registrations": Call(params={"event_id": "{event}"}, expect="list"),
    "GET /admin/events/{event_id}/registrations/count": Call(),
    "GET /admin/registrations/{registration_id}": Call(),
    "PATCH /admin/registrations/{registration_id}": Call(
        body={"reason": "a probe", "name": "Mallory"}, headers=MATCH
    ),
    "POST /admin/registrations/{registration_id}/confirm": Call(),
    "POST /admin/registrations/{registration_id}/set-draft": Call(),
    "POST /admin/registrations/{registration_id}/set-done": Call(),
    "POST /admin/registrations/{registration_id}/archive": Call(),
    "POST /admin/registrations/{registration_id}/unarchive": Call(),
    "POST /admin/registrations/{registration_id}/sync-from-partner": Call(),
    "POST /admin/registrations/{registration_id}/cancel": Call(body=REASON),
    "POST /admin/registrations/{registration_id}/reactivate": Call(body=REASON),
    "GET /admin/registrations/{registration_id}/revisions": Call(),
    "POST /admin/registrations": (
        Call(body={"event_id": "{event}", "name": "Mallory"}),
        Call(  # B's ticket on A's own event
            body={"event_id": "{own_event}", "event_ticket_id": "{ticket}"}, expect="same"
        ),
    ),
    # events
    "GET /admin/events/{event_id}": Call(),
    "PATCH /admin/events/{event_id}": Call(body={"name": "Taken over"}),
    "DELETE /admin/events/{event_id}": Call(),
    "POST /admin/events/{event_id}/publish": Call(),
    "POST /admin/events/{event_id}/unpublish": Call(),
    "POST /admin/events/{event_id}/mark-done": Call(),
    "GET /admin/events/{event_id}/seats": Call(),
    "GET /admin/events/{event_id}/questions": Call(),
    "POST /admin/events/{event_id}/questions": Call(body={"question_id": "{question}"}),
    "DELETE /admin/events/{event_id}/questions/{question_id}": Call(),
    # tickets and slots
    "GET /admin/tickets": Call(params={"event_id": "{event}"}, expect="list"),
    "POST /admin/tickets": Call(body={"event_id": "{event}", "name": "Mine"}),
    "GET /admin/tickets/{ticket_id}": Call(),
    "PATCH /admin/tickets/{ticket_id}": Call(body={"name": "Mine"}),
    "DELETE /admin/tickets/{ticket_id}": Call(),
    "GET /admin/slots": Call(params={"event_id": "{slotted}"}, expect="list"),
    "POST /admin/slots": Call(
        body={
            "event_id": "{slotted}",
            "date_begin": "2027-05-10T12:00:00Z",
            "date_end": "2027-05-10T13:00:00Z",
        }
    ),
    "GET /admin/slots/{slot_id}": Call(),
    "PATCH /admin/slots/{slot_id}": Call(body={"date_end": "2027-05-10T11:30:00Z"}),
    "DELETE /admin/slots/{slot_id}": Call(),
    # booths
    "GET /admin/booths": Call(params={"event_id": "{event}"}, expect="list"),
    "POST /admin/booths": Call(
        body={"event_id": "{event}", "name": "Mine", "booth_category_id": "{category}"}
    ),
    "GET /admin/booths/{booth_id}": Call(),
    "PATCH /admin/booths/{booth_id}": Call(body={"name": "Mine"}),
    "DELETE /admin/booths/{booth_id}": Call(),
    "POST /admin/booths/{booth_id}/release": Call(),
    "POST /admin/booths/{booth_id}/bookings": Call(body={"contact_name": "Mallory"}),
    "POST /admin/booth-bookings/{booking_id}/confirm": Call(),
    "GET /admin/linked-products": Call(params={"event_id": "{event}"}, expect="list"),
    # communication
    "GET /admin/mails": Call(params={"event_id": "{event}"}, expect="list"),
    "POST /admin/mails": (
        Call(body={"event_id": "{event}", "template_ref": "{own_template}", **LINE}),
        Call(  # B's template on A's own event: the contract's template_not_in_company
            body={"event_id": "{own_event}", "template_ref": "{template}", **LINE},
            named=(422, "template_not_in_company"),
        ),
    ),
    "GET /admin/mails/{mail_id}": Call(),
    "PATCH /admin/mails/{mail_id}": (
        Call(body={"interval_nbr": 2}),
        Call(  # A's own line made to use B's template
            body={"template_ref": "{template}"},
            path_kinds={"mail_id": "own_mail"},
            named=(422, "template_not_in_company"),
        ),
    ),
    "POST /admin/mails/{mail_id}/run": Call(),
    "GET /admin/templates/{template_id}": Call(),
    "PATCH /admin/templates/{template_id}": Call(body={"name": "Mine"}),
    "DELETE /admin/templates/{template_id}": Call(),
    "GET /admin/outbox": Call(params={"event_id": "{event}"}, expect="list"),
    "GET /admin/outbox/summary": Call(params={"event_id": "{event}"}),
    "GET /admin/events/{event_id}/badges.pdf": Call(),
    "POST /admin/outbox/{message_id}/retry": Call(),  # B's failed message stays failed
    "GET /admin/events/{event_id}/waitlist-settings": Call(),
    "PUT /admin/events/{event_id}/waitlist-settings": Call(body={"enabled": True}),
    "GET /admin/events/{event_id}/waitlist": Call(),
    "POST /admin/waitlist/{entry_id}/offer": Call(),  # B's entry stays waiting
    "DELETE /admin/waitlist/{entry_id}": Call(),
    # webhooks: an endpoint is its company's alone; B's event cannot be watched by A
    "POST /admin/webhooks": Call(
        body={"url": "https://93.184.216.34/in", "event_types": ["ping"], "event_id": "{event}"}
    ),
    "GET /admin/webhooks/{endpoint_id}": Call(),
    "PATCH /admin/webhooks/{endpoint_id}": Call(body={"description": "mine"}),
    "DELETE /admin/webhooks/{endpoint_id}": Call(),
    "POST /admin/webhooks/{endpoint_id}/rotate-secret": Call(),
    "POST /admin/webhooks/{endpoint_id}/ping": Call(),
    "GET /admin/webhooks/{endpoint_id}/deliveries": Call(),
    "POST /admin/webhook-deliveries/{delivery_id}/redeliver": Call(),
    # sale seam: an order id is the company's own; another company's is an unknown order
    "POST /admin/seam/orders/paid": Call(body={"order_id": "{order}"}, expect="same"),
    "POST /admin/seam/orders/cancelled": Call(body={"order_id": "{order}"}, expect="same"),
    "POST /admin/seam/orders/confirmed": Call(
        body={
            "order_id": "{fresh_order}",
            "amount_total": "0",
            "currency": "EUR",
            "lines": [{"line_id": "{line}", "event_id": "{event}", "attendees": [{"name": "M"}]}],
        },
        expect="same",
    ),
    # leads
    "GET /admin/lead-rules/{rule_id}": Call(),
    "PATCH /admin/lead-rules/{rule_id}": Call(body={"name": "Mine"}),
    "DELETE /admin/lead-rules/{rule_id}": Call(),
    "POST /admin/lead-rules": Call(
        body={"name": "Mine", "predicates": [{"axis": "event", "value_ids": ["{event}"]}]},
        expect="same",
    ),
    "GET /admin/lead-requests": Call(params={"event_id": "{event}"}, expect="list"),
    "POST /admin/leads/relink": Call(
        body={"old_lead_id": "{lead}", "new_lead_id": "mine"}, expect="same"
    ),
    # desk, exports, imports, operations, triggers
    # the desk answers outcomes, not errors: another company's event or barcode is the
    # outcome of an unknown one
    "POST /admin/desk/scan": (
        Call(body={"event_id": "{event}", "barcode": "{barcode}"}, expect="same"),
        Call(  # B's barcode at A's own desk
            body={"event_id": "{own_event}", "barcode": "{barcode}"}, expect="same"
        ),
    ),
    "POST /admin/events/{event_id}/exports/preview": Call(body={"columns": ["name"]}),
    "POST /admin/events/{event_id}/exports": Call(body={"confirmation_token": "{confirmation}"}),
    "POST /admin/events/{event_id}/attendance-imports": Call(
        body={"rows": [{"barcode": "1"}]}, headers={"Idempotency-Key": "sweep"}
    ),
    "GET /admin/attendance-imports/{job_id}": Call(),
    "POST /admin/attendance-imports/{job_id}/resume": Call(),
    "POST /admin/attendance-imports/{job_id}/cancel": Call(),
    "POST /admin/events/{event_id}/operations": Call(
        body={"kind": "reminder", "params": {"audience_cutoff": "2026-01-01T00:00:00Z"}}
    ),
    "POST /admin/operations/{operation_id}/start": Call(headers=MATCH),
    "GET /admin/operations/{operation_id}": Call(),
    "POST /admin/operations/{operation_id}/resume": Call(),
    "POST /admin/operations/{operation_id}/cancel": Call(),
    "GET /admin/triggers": Call(params={"event_id": "{event}"}, expect="list"),
    # capabilities
    "POST /admin/events/{event_id}/capabilities/ics": Call(body={}),
    "POST /admin/events/{event_id}/capabilities/my-tickets": (
        Call(body={"registration_ids": ["{registration}"]}),
        Call(  # B's attendee on A's own event
            body={"registration_ids": ["{registration}"]},
            expect="same",
            path_kinds={"event_id": "own_event"},
        ),
    ),
    # a type is shared configuration, its mail line names a company's template
    "POST /admin/types/{type_id}/mails": Call(
        body={"template_ref": "{template}"}, named=(422, "template_not_in_company")
    ),
    "POST /admin/events/{event_id}/capabilities/intake": Call(body={}),
}

# company-shared configuration: visible to every company by design (docs/architecture.md)
SHARED = {
    f"{method} /admin/{noun}{tail}"
    for noun in ("stages", "tag-categories", "tags", "types", "booth-categories")
    for method, tail in (
        ("GET", ""),
        ("POST", ""),
        ("GET", "/{id}"),
        ("PATCH", "/{id}"),
        ("DELETE", "/{id}"),
    )
} | {
    "POST /admin/types/{type_id}/tickets",
    "POST /admin/types/{type_id}/questions",
    "POST /admin/types/{type_id}/booths",
    "DELETE /admin/types/{type_id}/{kind}/{line_id}",
    "GET /admin/questions",
    "POST /admin/questions",
    "GET /admin/questions/{question_id}",
    "PATCH /admin/questions/{question_id}",
    "DELETE /admin/questions/{question_id}",
    "POST /admin/questions/{question_id}/answers",
    "PATCH /admin/questions/{question_id}/answers/{answer_id}",
    "DELETE /admin/questions/{question_id}/answers/{answer_id}",
    "POST /admin/lead-rules/from-answer",  # names a question (shared) and its answers
}

# routes for platform operators only (an actor without a company): a company's actor is
# refused before anything is named, 403 `missing_scope`
PLATFORM_ONLY: dict[str, Any] = {
    "GET /admin/trigger-templates": None,  # the dispatcher's map of purposes, one for all
    "PUT /admin/trigger-templates/{purpose}": {"template_id": "{own_template}"},
    "POST /admin/schedulers/run": None,
}

# routes that name no object of anyone's: creates of the actor's own, and passes over what
# the actor may see (their fencing is in the probes of their nouns)
NAMES_NOTHING = {
    "POST /admin/events",
    "POST /admin/templates",
    "POST /admin/lead-requests/run",
}

# lists with no filter: none of B's objects may be among A's items (the id of each kind)
LISTS = {
    "GET /admin/events": ("event", "slotted"),
    "GET /admin/templates": ("template",),
    "GET /admin/lead-rules": ("rule",),
    "GET /admin/webhooks": ("webhook",),
}


def operations(app: Any) -> list[tuple[str, str]]:
    """(METHOD, path under the base path) of every admin operation."""
    found = []
    for path, ops in app.openapi()["paths"].items():
        if not path.startswith(PREFIX + "/admin/"):
            continue
        for method in ops:
            found.append((method.upper(), path.removeprefix(PREFIX)))
    return found


def shared_key(method: str, path: str) -> str:
    """The SHARED form of a configuration route: its single id parameter named `{id}`."""
    return f"{method} " + re.sub(r"\{obj_id\}|\{booth_category_id\}", "{id}", path)


def fill(value: Any, ids: dict[str, str]) -> Any:
    """`value` with every `{kind}` placeholder replaced by the id of that kind."""
    if isinstance(value, str):
        return re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], value)
    if isinstance(value, list):
        return [fill(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, ids) for k, v in value.items()}
    return value


# a path parameter names an object of this kind
PARAM_KIND = {
    "event_id": "event",
    "registration_id": "registration",
    "ticket_id": "ticket",
    "slot_id": "slot",
    "booth_id": "booth",
    "booking_id": "booking",
    "mail_id": "mail",
    "template_id": "template",
    "rule_id": "rule",
    "job_id": "job",
    "operation_id": "operation",
    "question_id": "question",
    "type_id": "type",
    "message_id": "outbox",
    "entry_id": "waitlist_entry",
    "endpoint_id": "webhook",
    "delivery_id": "webhook_delivery",
}


async def call(client: httpx.AsyncClient, method: str, path: str, case: Call, ids: dict):
    kinds = {**PARAM_KIND, **case.path_kinds}
    url = re.sub(r"\{(\w+)\}", lambda m: ids[kinds[m.group(1)]], path)
    body = fill(case.body, ids)
    return await client.request(
        method,
        url,
        params=fill(case.params, ids),
        headers=case.headers,
        content=None if body is None else json.dumps(body),
    )


def answer(r: httpx.Response, ids: dict[str, str]) -> tuple[int, str]:
    """What a caller learns: the status and the whole body, each id the call named written
    as its kind (so a foreign call and an unknown one compare field by field)."""
    text = r.text
    for kind, value in sorted(ids.items(), key=lambda kv: -len(kv[1])):
        text = text.replace(value, "{" + kind + "}")
    return r.status_code, text


def code_of(seen: tuple[int, str]) -> tuple[int, Any]:
    """(status, the refusal's code, or the number of items of a list, or None)."""
    body = json.loads(seen[1]) if seen[1] else None
    if isinstance(body, dict) and "error" in body:
        return seen[0], body["error"]["code"]
    if isinstance(body, dict) and "items" in body:
        return seen[0], len(body["items"])
    return seen[0], None


async def build(b: httpx.AsyncClient, api: Api) -> dict[str, str]:
    """Company B's objects, one of each kind it owns; their ids by kind."""

    async def made(r: httpx.Response) -> dict[str, Any]:
        assert r.status_code in (200, 201, 202), r.text
        return dict(r.json())

    event = await make_event(b)
    ticket = await add_ticket(b, event["id"])
    slotted = await make_event(b, is_multi_slots=True)
    slot = await add_slot(b, slotted["id"])
    reg = await made(
        await b.post(
            "/admin/registrations",
            json={"event_id": event["id"], "name": "Bea B", "email": "bea@example.org"},
        )
    )
    tpl = await made(
        await b.post("/admin/templates", json={"name": "B", "subject": "S", "body": "Hi"})
    )
    mail = await made(
        await b.post(
            "/admin/mails", json={"event_id": event["id"], "template_ref": tpl["id"], **LINE}
        )
    )
    category = await made(
        await b.post("/admin/booth-categories", json={"name": "Stand", "product_ref": "p1"})
    )
    booth = await made(
        await b.post(
            "/admin/booths",
            json={"event_id": event["id"], "name": "B1", "booth_category_id": category["id"]},
        )
    )
    booking = await made(
        await b.post(f"/admin/booths/{booth['id']}/bookings", json={"contact_name": "Bea"})
    )
    rule = await made(
        await b.post(
            "/admin/lead-rules",
            json={"name": "B", "predicates": [{"axis": "event", "value_ids": [event["id"]]}]},
        )
    )
    job = await made(
        await b.post(
            f"/admin/events/{event['id']}/attendance-imports",
            json={"rows": [{"barcode": reg["barcode"]}]},
            headers={"Idempotency-Key": "b-import"},
        )
    )
    operation = await made(
        await b.post(
            f"/admin/events/{event['id']}/operations",
            json={"kind": "reminder", "params": {"audience_cutoff": "2026-01-01T00:00:00Z"}},
        )
    )
    preview = await made(
        await b.post(f"/admin/events/{event['id']}/exports/preview", json={"columns": ["name"]})
    )
    order = str(uuid.uuid4())
    await made(
        await b.post(
            "/admin/seam/orders/confirmed",
            json={
                "order_id": order,
                "amount_total": "10",
                "currency": "EUR",
                "lines": [
                    {
                        "line_id": str(uuid.uuid4()),
                        "event_id": event["id"],
                        "attendees": [{"name": "Bo"}],
                    }
                ],
            },
        )
    )
    question = await made(await b.post("/admin/questions", json={"title": "Diet"}))
    kind = await made(await b.post("/admin/types", json={"name": "Conference"}))
    await made(
        await b.post(f"/admin/events/{event['id']}/questions", json={"question_id": question["id"]})
    )
    lead = "lead-of-b"
    async with api.pool.acquire() as conn:  # a lead B's CRM made (the pass's provenance)
        await conn.execute(
            "INSERT INTO event.lead_provenances (lead_id, rule_id, event_id, grain, group_key)"
            " VALUES ($1, $2, $3, 'per_event_day', 'k')",
            lead,
            uuid.UUID(rule["id"]),
            uuid.UUID(event["id"]),
        )
    async with api.pool.acquire() as conn:  # a message of B's that failed (retry would take it)
        outbox = await conn.fetchval(
            "INSERT INTO event.outbox_messages (channel, recipient, sender, subject, body,"
            " event_id, delivery_state, attempts, next_attempt_at, last_error)"
            " VALUES ('mail', 'bea@example.org', 'b@example.org', 'S', 'B', $1, 'failed', 1, NULL,"
            ' \'{"kind": "permanent", "code": 550, "detail": "550 no"}\')'
            " RETURNING id",
            uuid.UUID(event["id"]),
        )
    async with api.pool.acquire() as conn:  # someone waiting for B's event
        entry = await conn.fetchval(
            "INSERT INTO event.waitlist_entry (event_id, company_id, seats, name, email)"
            " VALUES ($1, $2, 1, 'Wes', 'wes@example.org') RETURNING id",
            uuid.UUID(event["id"]),
            B,
        )
    webhook = await made(
        await b.post(
            "/admin/webhooks", json={"url": "https://93.184.216.34/in", "event_types": ["ping"]}
        )
    )
    ping = await made(await b.post(f"/admin/webhooks/{webhook['id']}/ping"))
    return {
        "event": event["id"],
        "webhook": webhook["id"],
        "webhook_delivery": ping["id"],
        "outbox": str(outbox),
        "waitlist_entry": str(entry),
        "slotted": slotted["id"],
        "ticket": ticket["id"],
        "slot": slot["id"],
        "registration": reg["id"],
        "barcode": reg["barcode"],
        "template": tpl["id"],
        "mail": mail["id"],
        "category": category["id"],
        "booth": booth["id"],
        "booking": booking["id"],
        "rule": rule["id"],
        "job": job["id"],
        "operation": operation["id"],
        "confirmation": preview["confirmation_token"],
        "order": order,
        "fresh_order": str(uuid.uuid4()),
        "question": question["id"],
        "type": kind["id"],
        "lead": lead,
        "line": str(uuid.uuid4()),
    }


def unknown(ids: dict[str, str]) -> dict[str, str]:
    """The same kinds, with ids nobody has (shared configuration keeps its real ids)."""
    fresh = {k: str(uuid.uuid4()) for k in ids}
    fresh.update(
        barcode="99999999999999",
        confirmation="n" * 43,
        lead="lead-of-nobody",
        category=ids["category"],
        question=ids["question"],
        type=ids["type"],
    )
    return fresh


SNAPSHOT_TABLES = (
    "events",
    "tickets",
    "slots",
    "registrations",
    "message_templates",
    "mails",
    "booths",
    "booth_bookings",
    "lead_rules",
    "lead_provenances",
    "attendance_imports",
    "event_operations",
    "sale_orders",
    "outbox_messages",
    "waitlist_entry",
    "waitlist_settings",
    "webhook_endpoints",
    "webhook_messages",
    "webhook_deliveries",
)


async def snapshot(api: Api) -> dict[str, list[str]]:
    """Every row of the tables a company owns, as text (the audit trail aside)."""
    rows = {}
    async with api.pool.acquire() as conn:
        for table in SNAPSHOT_TABLES:
            # A's own facts about an order id it never confirmed make A's own order rows
            mine = " WHERE t.company_id IS DISTINCT FROM $1" if table == "sale_orders" else ""
            found = await conn.fetch(
                f"SELECT t::text AS row FROM event.{table} t{mine} ORDER BY t::text",
                *([A] if mine else []),
            )
            rows[table] = [r["row"] for r in found]
    return rows


async def test_every_admin_route_answers_a_foreign_object_like_a_missing_one(api: Api):
    a, b = await company_client(api, A), await company_client(api, B)
    try:
        foreign = await build(b, api)
        own_template = (
            await a.post("/admin/templates", json={"name": "A", "subject": "S", "body": "Hi"})
        ).json()["id"]
        own_event = await make_event(a)
        own_mail = (
            await a.post(
                "/admin/mails",
                json={"event_id": own_event["id"], "template_ref": own_template, **LINE},
            )
        ).json()["id"]
        own = {
            "own_template": own_template,
            "own_event": own_event["id"],
            "own_mail": own_mail,
            "purpose": "event_reminder",
        }
        foreign.update(own)
        missing = {**unknown(foreign), **own}
        before = await snapshot(api)

        listed = set(CASES) | NAMES_NOTHING | set(PLATFORM_ONLY) | set(LISTS)
        unlisted = [
            f"{m} {p}"
            for m, p in operations(api.app)
            if f"{m} {p}" not in listed and shared_key(m, p) not in SHARED
        ]
        assert not unlisted, f"admin routes this sweep does not know: {unlisted}"

        leaks = []
        for method, path in operations(api.app):
            cases = CASES.get(f"{method} {path}", ())
            for case in cases if isinstance(cases, tuple) else (cases,):
                theirs = answer(await call(a, method, path, case, foreign), foreign)
                nobodys = answer(await call(a, method, path, case, missing), missing)
                seen = code_of(theirs)
                if case.named is not None:
                    ok = seen == case.named and code_of(nobodys)[0] == case.named[0]
                elif case.expect == "404":
                    ok = theirs == nobodys and seen[0] == 404
                elif case.expect == "list":
                    ok = theirs == nobodys and (seen[0] == 404 or seen == (200, 0))
                else:
                    ok = theirs == nobodys
                if not ok:
                    leaks.append(f"{method} {path}: foreign {theirs}\n  unknown {nobodys}")
        for route, body in sorted(PLATFORM_ONLY.items()):
            method, path = route.split(" ", 1)
            url = path.replace("{purpose}", "event_reminder")
            r = await a.request(method, url, json=fill(body, foreign))
            if (r.status_code, r.json()["error"]["code"]) != (403, "missing_scope"):
                leaks.append(f"{route}: a company's actor got {r.status_code} {r.text}")
        for route, kinds in LISTS.items():
            method, path = route.split(" ", 1)
            text = (await a.request(method, path, params={"limit": 200})).text
            leaks += [f"{route} lists B's {k}" for k in kinds if foreign[k] in text]
        assert not leaks, "\n".join(leaks)
        assert await snapshot(api) == before  # nothing of B's (or of anyone) changed
    finally:
        await a.aclose()
        await b.aclose()
