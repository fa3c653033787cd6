"""Formula-safe exports: preview, confirmation, the streamed CSV (real PostgreSQL through the
real HTTP app), the SQL masks held to the Python ones, a real spreadsheet engine opening the
file, and a real `events-svc serve` process whose client goes away mid-stream."""

from __future__ import annotations

import asyncio
import csv
import io
import subprocess
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from events_svc.app import create_app
from events_svc.errors.exports import EXPORT_COLUMNS
from events_svc.settings import Settings
from events_svc.verbs.pii import mask_email, mask_name, mask_phone
from events_svc.verbs.tokens import create_token
from tests.probes.helpers import (
    Api,
    add_slot,
    add_ticket,
    free_port,
    make_event,
    start_serve,
    wait_ready,
)
from tests.probes.spreadsheet import open_in_calc

TRIGGERS = ("=", "+", "-", "@", "\t", "\r", "'")
MALICIOUS = [
    "=1+1",
    "+1",
    "-1",
    "@SUM(A1)",
    "\tleading tab",
    "'=x",
    "\rcarriage return first",
    '=HYPERLINK("http://example.org","x")',
    'A long "quoted" text,\nwith newlines,\r\nand "quotes" again; ' + "x" * 300,
    "plain",
    "",
]


def neutral(value: str) -> str:
    """design.md §7.11 in Python: one leading ' before a trigger character (or ')."""
    return "'" + value if value[:1] in TRIGGERS else value


def restore(cell: str) -> str:
    """Remove exactly one leading '."""
    return cell[1:] if cell.startswith("'") else cell


def rows_of(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


async def insert(api: Api, event_id: str, **fields: Any) -> uuid.UUID:
    """A registration set up directly (values the API would refuse as email or phone)."""
    values = {"name": "", "email": "", "phone": "", "company_name": "", "state": "open"}
    values.update(fields)
    async with api.pool.acquire() as conn:
        return await conn.fetchval(
            """INSERT INTO event.registrations (event_id, barcode, name, email, phone,
                   company_name, state, created_at, active)
               VALUES ($1, $2, $3, $4, $5, $6, $7::event.registration_state,
                   coalesce($8, now()), coalesce($9, true)) RETURNING id""",
            uuid.UUID(event_id),
            str(uuid.uuid4().int)[:20],
            values["name"],
            values["email"],
            values["phone"],
            values["company_name"],
            values["state"],
            values.get("created_at"),
            values.get("active"),
        )


async def preview(
    client: httpx.AsyncClient, event_id: str, columns: list[str], **body: Any
) -> dict[str, Any]:
    r = await client.post(
        f"/admin/events/{event_id}/exports/preview", json={"columns": columns, **body}
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


async def download(client: httpx.AsyncClient, event_id: str, token: str) -> httpx.Response:
    return await client.post(
        f"/admin/events/{event_id}/exports", json={"confirmation_token": token}
    )


async def export(
    client: httpx.AsyncClient, event_id: str, columns: list[str], **body: Any
) -> list[list[str]]:
    """Preview then download; the CSV rows (the header row first)."""
    token = (await preview(client, event_id, columns, **body))["confirmation_token"]
    r = await download(client, event_id, token)
    assert r.status_code == 200, r.text
    return rows_of(r.text)


async def client_with(api: Api, *scopes: str, company: uuid.UUID | None = None) -> Any:
    headers = await api.token(*scopes, company=company)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app),
        base_url=str(api.client.base_url),
        headers=headers,
    )


async def audits(api: Api, verb: str) -> list[dict[str, Any]]:
    async with api.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT actor_id, object_id, event_id, summary FROM event.event_audit_log"
            " WHERE verb = $1 ORDER BY id",
            verb,
        )
    return [dict(r) for r in rows]


# --- rows, columns, order ------------------------------------------------------------


async def test_an_event_without_registrations_exports_the_header_row_only(api: Api, admin):
    ev = await make_event(admin)
    shown = await preview(admin, ev["id"], ["name", "id"])
    assert shown["row_count"] == 0 and shown["columns"] == ["name", "id"]
    assert shown["pii"] == "full" and shown["state"] is None
    assert datetime.fromisoformat(shown["expires_at"]) > datetime.now(UTC)
    r = await download(admin, ev["id"], shown["confirmation_token"])
    assert r.status_code == 200, r.text
    assert r.text == "name,id\n"
    assert r.headers["x-export-rows"] == "0"


async def test_one_row_exports_every_column_in_the_callers_order(api: Api, admin):
    ev = await make_event(admin, is_multi_slots=True)
    ticket = await add_ticket(admin, ev["id"], name="Early bird")
    slot = await add_slot(admin, ev["id"], hour=10)
    body = {
        "event_id": ev["id"],
        "event_ticket_id": ticket["id"],
        "event_slot_id": slot["id"],
        "name": "Ada Lovelace",
        "email": "ada@example.org",
        "phone": "+44 20 7946 0958",
        "company_name": "Analytical Engines",
    }
    reg = (await admin.post("/admin/registrations", json=body)).json()
    done = await admin.post(f"/admin/registrations/{reg['id']}/set-done")
    assert done.status_code == 200, done.text
    reg = (await admin.get(f"/admin/registrations/{reg['id']}")).json()
    columns = list(reversed(EXPORT_COLUMNS))
    header, row = await export(admin, ev["id"], columns)
    assert header == columns
    cell = dict(zip(columns, row, strict=True))
    assert cell["id"] == reg["id"] and cell["barcode"] == reg["barcode"]
    assert (cell["name"], cell["email"]) == ("Ada Lovelace", "ada@example.org")
    assert cell["phone"] == "'+44 20 7946 0958"  # a leading + is neutralised like any other
    assert cell["company_name"] == "Analytical Engines"
    assert (cell["state"], cell["ticket"]) == ("done", "Early bird")
    assert cell["slot"] == "2027-05-10T10:00:00Z"
    for name in ("created_at", "date_closed"):  # RFC 3339 in UTC, the instant of the view
        assert cell[name].endswith("Z") and "T" in cell[name], cell[name]
        assert datetime.fromisoformat(cell[name]) == datetime.fromisoformat(reg[name])
    # one column alone, and a row without ticket, slot or closing date leaves them empty
    await admin.post(
        "/admin/registrations", json={"event_id": ev["id"], "event_slot_id": slot["id"]}
    )
    rows = await export(admin, ev["id"], ["ticket", "date_closed", "state"])
    assert rows[0] == ["ticket", "date_closed", "state"]
    assert sorted(rows[1:]) == sorted(
        [["Early bird", cell["date_closed"], "done"], ["", "", "open"]]
    )


async def test_many_rows_come_in_created_at_then_id_order(api: Api, admin):
    ev = await make_event(admin)
    base = datetime(2027, 1, 1, tzinfo=UTC)
    expected = []
    for i in (5, 3, 3, 3, 9, 1, 7, 3):  # ties on created_at order by id
        at = base.replace(hour=i)
        rid = await insert(api, ev["id"], name=f"Guest {i}", created_at=at)
        expected.append((at, rid))
    expected.sort()
    first = await export(admin, ev["id"], ["id", "created_at"])
    assert first[0] == ["id", "created_at"] and len(first) == 9
    assert [row[0] for row in first[1:]] == [str(rid) for _, rid in expected]
    assert [datetime.fromisoformat(row[1]) for row in first[1:]] == [at for at, _ in expected]
    assert await export(admin, ev["id"], ["id", "created_at"]) == first  # and again


async def test_the_state_filter_and_archived_rows(api: Api, admin):
    ev = await make_event(admin)
    ids = {
        state: str(await insert(api, ev["id"], state=state))
        for state in ("draft", "open", "done", "cancel")
    }
    archived = str(await insert(api, ev["id"], state="open", active=False))
    everything = await export(admin, ev["id"], ["id"])
    assert sorted(r[0] for r in everything[1:]) == sorted(ids.values())  # never archived rows
    assert archived not in {r[0] for r in everything}
    for state, rid in ids.items():
        shown = await preview(admin, ev["id"], ["id", "state"], state=state)
        assert (shown["row_count"], shown["state"]) == (1, state)
        r = await download(admin, ev["id"], shown["confirmation_token"])
        assert rows_of(r.text) == [["id", "state"], [rid, state]]
    r = await admin.post(
        f"/admin/events/{ev['id']}/exports/preview", json={"columns": ["id"], "state": "gone"}
    )
    assert (r.status_code, r.json()["error"]["field"]) == (422, "state")


async def test_columns_are_a_closed_list_each_asked_once(api: Api, admin):
    ev = await make_event(admin)
    url = f"/admin/events/{ev['id']}/exports/preview"
    r = await admin.post(url, json={"columns": ["id", "answers"]})
    error = r.json()["error"]
    assert (r.status_code, error["code"]) == (422, "export_column_unknown"), r.text
    assert (error["column"], error["index"]) == ("answers", 1)
    assert error["allowed"] == list(EXPORT_COLUMNS)
    for refused in ("newsletter", "sponsor", "partner_id", "sale_status", "ID", " id"):
        r = await admin.post(url, json={"columns": [refused]})
        assert r.json()["error"]["code"] == "export_column_unknown", refused
    r = await admin.post(url, json={"columns": ["name", "email", "name"]})
    error = r.json()["error"]
    assert (r.status_code, error["code"]) == (422, "export_column_duplicate")
    assert (error["column"], error["index"]) == ("name", 2)
    for body in ({"columns": []}, {"columns": ["id"] * 12}, {}, {"columns": "id"}):
        r = await admin.post(url, json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (422, "validation_failed"), body
    r = await admin.post(url, json={"columns": ["id"], "extra": 1})
    assert r.json()["error"]["code"] == "unknown_field"
    async with api.pool.acquire() as conn:  # nothing was handed out
        assert await conn.fetchval("SELECT count(*) FROM event.export_confirmations") == 0


# --- masking and neutralisation ---------------------------------------------------------


async def test_pii_is_masked_without_registration_pii(api: Api, admin):
    ev = await make_event(admin)
    await insert(
        api,
        ev["id"],
        name="Ada  King Lovelace",
        email="ada@example.org",
        phone="+44 20 7946 0958",
        company_name="=Engines",
    )
    columns = ["name", "email", "phone", "company_name"]
    masked_client = await client_with(api, "registration:export")
    full_client = await client_with(api, "registration:export", "registration:pii")
    try:
        shown = await preview(masked_client, ev["id"], columns)
        assert shown["pii"] == "masked"
        r = await download(masked_client, ev["id"], shown["confirmation_token"])
        assert rows_of(r.text)[1] == ["A*** K*** L***", "a***@example.org", "***58", "'=Engines"]
        assert "Lovelace" not in r.text and "7946" not in r.text
        full = await export(full_client, ev["id"], columns)
        assert full[1] == [
            "Ada  King Lovelace",
            "ada@example.org",
            "'+44 20 7946 0958",
            "'=Engines",
        ]
    finally:
        await masked_client.aclose()
        await full_client.aclose()
    masked, full_audit = await audits(api, "registration_exported")
    assert (masked["summary"]["pii"], full_audit["summary"]["pii"]) == ("masked", "full")


async def test_malicious_cells_are_neutralised_losslessly(api: Api, admin):
    ev = await make_event(admin)
    for i, value in enumerate(MALICIOUS):
        await insert(
            api,
            ev["id"],
            name=value,
            company_name=value,
            email=value,
            phone=value,
            created_at=datetime(2027, 1, 1, 0, i, tzinfo=UTC),
        )
    await add_ticket(admin, ev["id"], name="=cmd|' /C calc'!A0")
    rows = await export(admin, ev["id"], ["name", "company_name", "email", "phone"])
    assert len(rows) == len(MALICIOUS) + 1
    for value, row in zip(MALICIOUS, rows[1:], strict=True):
        assert row == [neutral(value)] * 4
        assert all(restore(cell) == value for cell in row)
        assert all(cell[:1] not in TRIGGERS[:-1] for cell in row)  # nothing left to evaluate
    # the rule in Python: restoring one ' gives back every value, whatever it starts with
    samples = [*MALICIOUS, "'", "''", "'''=", "\n=x", " =x", "=", "-", "''=x"]
    samples += [chr(c) + "tail" for c in range(1, 0x80)]
    for value in samples:
        assert restore(neutral(value)) == value
        assert neutral(value)[:1] not in TRIGGERS[:-1]
    async with api.pool.acquire() as conn:  # the SQL function is the same rule
        got = await conn.fetchval(
            "SELECT array_agg(event.csv_safe(v) ORDER BY i)"
            " FROM unnest($1::text[]) WITH ORDINALITY u(v, i)",
            samples,
        )
        assert got == [neutral(v) for v in samples]
        assert await conn.fetchval("SELECT event.csv_safe(NULL)") is None


MASK_NAMES = [
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "Ada",
    "Ada Lovelace",
    "  Ada   Lovelace  ",
    "Ada\tLovelace",
    "Ada\r\nLovelace",
    "ada\u00a0lovelace",
    "\u3000日本 語\u3000",
    "Émile Zola",
    "é",
    "😀 smile",
    "=cmd",
    "O'Brien",
    "a b c d e f g h i j",
    "x\u2028y\u2029z",
    "\x1c\x1dname\x1e\x1f",
    "Jean-Luc",
    "***",
    "a*** b",
    "\u0301combining",
    "zero\u200bwidth",
    "\x85x",
    "tab\t\tend\t",
    "\u2000\u200a\u202f\u205f\u1680",
    "\x0b\x0cv",
    "a\\1b",
    "$1 \\",
    "x" * 400,
]
MASK_EMAILS = [
    "",
    "@",
    "@example.org",
    "a@",
    "ada@example.org",
    "a@b@c",
    "no-at-sign",
    "é@ü.de",
    "😀@x",
    " spaced @x",
    "@@",
    "=x@y",
    "\t@x",
    "x",
    "ab\n@c",
    "\u00a0@d",
]
MASK_PHONES = [
    "",
    "abc",
    "+351 912 345 678",
    "12",
    "1",
    "(0)",
    "٠١٢٣",
    "\uff11\uff12\uff13",
    "²³",
    "+44\t20",
    "phone: 12 34 x",
    "x\U0001d7d8\U0001d7d9",
    "ⅫⅪ",
    "①②",
    "12é",
    "é",
    "٣",
    "9\u0660",
]


async def test_sql_masks_give_exactly_the_python_masks(api: Api, admin):
    ev = await make_event(admin)
    names = MASK_NAMES + MASK_EMAILS + MASK_PHONES
    emails = MASK_EMAILS + MASK_NAMES + MASK_PHONES
    phones = MASK_PHONES + MASK_NAMES + MASK_EMAILS
    async with api.pool.acquire() as conn:
        # the stored masked fields the masked export reads
        ids = [
            await insert(api, ev["id"], name=n, email=e, phone=p)
            for n, e, p in zip(names, emails, phones, strict=True)
        ]
        stored = {
            r["id"]: r
            for r in await conn.fetch(
                "SELECT id, name_masked, email_masked, phone_masked FROM event.registrations"
                " WHERE event_id = $1",
                uuid.UUID(ev["id"]),
            )
        }
        for rid, n, e, p in zip(ids, names, emails, phones, strict=True):
            row = stored[rid]
            assert row["name_masked"] == mask_name(n), repr(n)
            assert row["email_masked"] == mask_email(e), repr(e)
            assert row["phone_masked"] == mask_phone(p), repr(p)
        # the stored fields follow a change of the field
        await conn.execute(
            "UPDATE event.registrations SET name = 'Grace Hopper', phone = '555-0199'"
            " WHERE id = $1",
            ids[0],
        )
        row = await conn.fetchrow(
            "SELECT name_masked, phone_masked FROM event.registrations WHERE id = $1", ids[0]
        )
        assert tuple(row) == ("G*** H***", "***99")
        # every code point: what SQL reads as whitespace in a name and as a digit in a phone
        # is what Python does (a change of the Unicode tables shows up here)
        spaces = await conn.fetchval(
            "SELECT array_agg(cp ORDER BY cp) FROM generate_series(1, 1114111) cp"
            " WHERE (cp < 55296 OR cp > 57343) AND event.mask_name('a' || chr(cp) || 'b') <> 'a***'"
        )
        digits = await conn.fetchval(
            "SELECT array_agg(cp ORDER BY cp) FROM generate_series(1, 1114111) cp"
            " WHERE (cp < 55296 OR cp > 57343) AND event.mask_phone(chr(cp)) <> '***'"
        )
    code_points = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    assert spaces == [c for c in code_points if chr(c).isspace()]
    assert digits == [c for c in code_points if chr(c).isdigit()]


# --- the confirmation ------------------------------------------------------------------


async def test_a_confirmation_is_used_once(api: Api, admin):
    ev = await make_event(admin)
    await insert(api, ev["id"], name="Ada")
    token = (await preview(admin, ev["id"], ["name"]))["confirmation_token"]
    assert (await download(admin, ev["id"], token)).status_code == 200
    again = await download(admin, ev["id"], token)
    assert (again.status_code, again.json()["error"]["code"]) == (
        409,
        "export_confirmation_invalid",
    )
    for forged in ("x", token[:-1] + ("A" if token[-1] != "A" else "B"), "a" * 128):
        r = await download(admin, ev["id"], forged)
        assert r.json()["error"]["code"] == "export_confirmation_invalid"
    r = await download(admin, ev["id"], "a" * 129)
    assert (r.status_code, r.json()["error"]["field"]) == (422, "confirmation_token")
    assert len(await audits(api, "registration_exported")) == 1


async def test_two_racing_downloads_of_one_confirmation_stream_once(api: Api, admin):
    ev = await make_event(admin)
    for i in range(50):
        await insert(api, ev["id"], name=f"Guest {i}")
    token = (await preview(admin, ev["id"], ["id", "name"]))["confirmation_token"]
    first, second = await asyncio.gather(
        download(admin, ev["id"], token), download(admin, ev["id"], token)
    )
    assert sorted([first.status_code, second.status_code]) == [200, 409]
    won = first if first.status_code == 200 else second
    assert len(rows_of(won.text)) == 51
    assert len(await audits(api, "registration_exported")) == 1


async def test_a_stale_confirmation_answers_409(api: Api, admin):
    ev = await make_event(admin)
    shown = await preview(admin, ev["id"], ["id"])
    async with api.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT created_at, expires_at FROM event.export_confirmations")
        assert row["expires_at"] == datetime.fromisoformat(shown["expires_at"])
        assert (row["expires_at"] - row["created_at"]).total_seconds() == 600
        await conn.execute(
            "UPDATE event.export_confirmations SET created_at = created_at - interval '11 min',"
            " expires_at = now() - interval '1 second'"
        )
    r = await download(admin, ev["id"], shown["confirmation_token"])
    assert (r.status_code, r.json()["error"]["code"]) == (409, "export_confirmation_invalid")
    assert await audits(api, "registration_exported") == []


async def test_another_actors_or_events_confirmation_answers_409(api: Api, admin):
    ev = await make_event(admin)
    other_event = await make_event(admin)
    await insert(api, ev["id"], name="Ada")
    token = (await preview(admin, ev["id"], ["name"]))["confirmation_token"]
    colleague = await client_with(api, "*")  # same scopes, another token: another actor
    try:
        r = await download(colleague, ev["id"], token)
        assert (r.status_code, r.json()["error"]["code"]) == (409, "export_confirmation_invalid")
    finally:
        await colleague.aclose()
    r = await download(admin, other_event["id"], token)
    assert (r.status_code, r.json()["error"]["code"]) == (409, "export_confirmation_invalid")
    # neither attempt used it up: its own actor on its own event still downloads
    r = await download(admin, ev["id"], token)
    assert r.status_code == 200 and rows_of(r.text) == [["name"], ["Ada"]]


async def test_another_companys_event_answers_404_and_scopes_answer_403(api: Api, admin):
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    ev = await make_event(admin, company_id=str(theirs))
    await insert(api, ev["id"], name="Ada")
    outsider = await client_with(api, "registration:export", "registration:pii", company=mine)
    insider = await client_with(api, "registration:export", company=theirs)
    reader = await client_with(api, "registration:read", "registration:pii", "event:read")
    try:
        r = await outsider.post(
            f"/admin/events/{ev['id']}/exports/preview", json={"columns": ["id"]}
        )
        assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
        token = (await preview(insider, ev["id"], ["id"]))["confirmation_token"]
        r = await download(outsider, ev["id"], token)
        assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
        r = await outsider.post(
            f"/admin/events/{uuid.uuid4()}/exports/preview", json={"columns": ["id"]}
        )
        assert r.status_code == 404
        for path, body in (
            ("exports/preview", {"columns": ["id"]}),
            ("exports", {"confirmation_token": token}),
        ):
            r = await reader.post(f"/admin/events/{ev['id']}/{path}", json=body)
            assert (r.status_code, r.json()["error"]["code"]) == (403, "missing_scope")
            assert r.json()["error"]["scope"] == "registration:export"
            r = await api.client.post(f"/admin/events/{ev['id']}/{path}", json=body)
            assert r.status_code == 401
        assert (await download(insider, ev["id"], token)).status_code == 200
    finally:
        for c in (outsider, insider, reader):
            await c.aclose()


async def test_without_a_second_connection_the_download_is_busy_and_the_token_unused(
    api: Api, admin, db_url: str
):
    ev = await make_event(admin)
    await insert(api, ev["id"], name="Ada")
    token = (await preview(admin, ev["id"], ["name"]))["confirmation_token"]
    # an app whose pool has one connection: the download's writer holds it, so the reader
    # it needs while the confirmation is consumed never comes
    settings = Settings(database_url=db_url, pool_min=1, pool_max=1, scheduler_enabled=False)
    narrow = create_app(settings)
    async with narrow.router.lifespan_context(narrow):
        headers = dict(admin.headers)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=narrow), base_url=str(admin.base_url), headers=headers
        ) as client:
            r = await download(client, ev["id"], token)
    assert (r.status_code, r.json()["error"]["code"]) == (503, "busy")
    assert r.headers["retry-after"] == "1"
    async with api.pool.acquire() as conn:
        assert await conn.fetchval("SELECT used_at FROM event.export_confirmations") is None
    assert await audits(api, "registration_exported") == []
    assert (await download(admin, ev["id"], token)).status_code == 200  # still usable


async def test_an_export_is_bounded_in_rows_and_in_downloads_at_once(api: Api, admin, db_url: str):
    ev = await make_event(admin)
    for name in ("Ada", "Grace", "Edsger"):
        await insert(api, ev["id"], name=name)
    settings = Settings(
        database_url=db_url, scheduler_enabled=False, export_max_rows=3, export_concurrency=1
    )
    bounded = create_app(settings)
    async with (
        bounded.router.lifespan_context(bounded),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=bounded),
            base_url=str(admin.base_url),
            headers=dict(admin.headers),
        ) as client,
    ):
        token = (await preview(client, ev["id"], ["name"]))["confirmation_token"]
        # the event grew past the bound after the preview: refused, the token unused
        late = await insert(api, ev["id"], name="Late")
        r = await download(client, ev["id"], token)
        error = r.json()["error"]
        assert (r.status_code, error["code"], error["row_count"], error["limit"]) == (
            422,
            "export_too_large",
            4,
            3,
        )
        r = await client.post(
            f"/admin/events/{ev['id']}/exports/preview", json={"columns": ["name"]}
        )
        assert (r.status_code, r.json()["error"]["code"]) == (422, "export_too_large")
        async with api.pool.acquire() as conn:
            await conn.execute("UPDATE event.registrations SET active = false WHERE id = $1", late)
        # every download slot streams: 503 busy, the token still unused
        slots = bounded.state.events.export_slots()
        await slots.acquire()
        r = await download(client, ev["id"], token)
        assert (r.status_code, r.json()["error"]["code"]) == (503, "busy")
        assert r.headers["retry-after"] == "1"
        slots.release()
        r = await download(client, ev["id"], token)
        assert r.status_code == 200 and len(rows_of(r.text)) == 4
        assert not slots.locked()  # the finished download gave its slot back
        assert (await download(client, ev["id"], token)).status_code == 409


# --- the answer, the audit, the outbox -------------------------------------------------


async def test_the_download_is_a_private_csv_attachment(api: Api, admin):
    ev = await make_event(admin)
    await insert(api, ev["id"], name="Ada")
    token = (await preview(admin, ev["id"], ["name", "state"]))["confirmation_token"]
    r = await download(admin, ev["id"], token)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/csv; charset=utf-8"
    disposition = r.headers["content-disposition"]
    assert disposition.startswith("attachment; filename=")
    assert disposition.endswith('.csv"') and ev["id"] in disposition
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["x-robots-tag"] == "noindex"
    assert r.headers["x-export-rows"] == "1"
    assert r.text.splitlines()[0] == "name,state"
    assert token not in r.text


async def test_the_audit_rows_hold_columns_and_counts_never_rows_or_the_token(api: Api, admin):
    ev = await make_event(admin)
    for i in range(3):
        await insert(
            api,
            ev["id"],
            name=f"Secret Person {i}",
            email=f"p{i}@example.org",
            phone=f"+351 91{i} 000 000",
        )
    await insert(api, ev["id"], name="Archived", active=False)
    columns = ["name", "email", "phone", "barcode"]
    shown = await preview(admin, ev["id"], columns, state="open")
    token = shown["confirmation_token"]
    r = await download(admin, ev["id"], token)
    assert len(rows_of(r.text)) - 1 == 3
    async with api.pool.acquire() as conn:
        stored = await conn.fetchrow("SELECT * FROM event.export_confirmations")
        everything = str(await conn.fetch("SELECT * FROM event.event_audit_log"))
    assert stored["used_at"] is not None and stored["columns"] == columns
    assert token.encode() not in bytes(stored["token_hash"]) and len(stored["token_hash"]) == 32
    (previewed,) = await audits(api, "registration_export_previewed")
    (exported,) = await audits(api, "registration_exported")
    for row in (previewed, exported):
        assert row["summary"] == {
            "columns": columns,
            "state": "open",
            "row_count": 3,
            "pii": "full",
        }
        assert str(row["event_id"]) == ev["id"] and str(row["object_id"]) == ev["id"]
        assert row["actor_id"].startswith("token:")
    for secret in ("Secret", "example.org", "000 000", token):
        assert secret not in everything


async def test_an_export_writes_no_outbox_row(api: Api, admin):
    ev = await make_event(admin)
    tpl = await admin.post("/admin/templates", json={"name": "T", "body": "Hello"})
    line = {
        "event_id": ev["id"],
        "template_ref": tpl.json()["id"],
        "interval_unit": "now",
        "interval_kind": "after_sub",
    }
    assert (await admin.post("/admin/mails", json=line)).status_code == 201
    for i in range(5):
        await insert(api, ev["id"], name=f"Guest {i}", email=f"g{i}@example.org")
    async with api.pool.acquire() as conn:
        before = await conn.fetchval("SELECT count(*) FROM event.outbox_messages")
        receipts = await conn.fetchval("SELECT count(*) FROM event.mail_registrations")
    rows = await export(admin, ev["id"], list(EXPORT_COLUMNS))
    assert len(rows) == 6
    async with api.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event.outbox_messages") == before == 0
        assert await conn.fetchval("SELECT count(*) FROM event.mail_registrations") == receipts


# --- a real spreadsheet engine -----------------------------------------------------------


async def test_a_spreadsheet_engine_makes_no_cell_a_formula(api: Api, admin, tmp_path: Path):
    ev = await make_event(admin)
    values = [v for v in MALICIOUS if v]
    for i, value in enumerate(values):
        await insert(
            api,
            ev["id"],
            name=value,
            company_name=value,
            created_at=datetime(2027, 1, 1, 0, i, tzinfo=UTC),
        )
    token = (await preview(admin, ev["id"], ["name", "company_name", "state"]))[
        "confirmation_token"
    ]
    r = await download(admin, ev["id"], token)
    assert r.status_code == 200, r.text
    exported = tmp_path / "export.csv"
    exported.write_bytes(r.content)  # the file as it was served
    control = tmp_path / "control.csv"  # the same cells, not neutralised: the probe can fail
    with control.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows([["name"], *[[v] for v in values]])
    started = time.monotonic()
    sheets = await asyncio.to_thread(open_in_calc, exported, control)
    assert time.monotonic() - started < 30
    sheet = sheets["export.csv"]
    assert [c.text for c in sheet[0]] == ["name", "company_name", "state"]
    assert len(sheet) == len(values) + 1
    for value, row in zip(values, sheet[1:], strict=True):
        assert [c.formula for c in row] == [None, None, None], (value, row)
        assert [c.value_type for c in row] == ["string", "string", "string"], (value, row)
        # a spreadsheet cell keeps line breaks, not the CR/LF that made them
        want = value.replace("\r\n", "\n").replace("\r", "\n")
        assert restore(row[0].text) == want and restore(row[1].text) == want, (value, row)
    unsafe = sheets["control.csv"]
    assert unsafe[1][0].formula is not None  # =1+1 raw would have been evaluated


# --- a real service process whose client goes away ----------------------------------------


async def test_a_client_that_goes_away_stops_the_copy_and_frees_the_connection(
    api: Api, admin, db_url: str
):
    ev = await make_event(admin)
    async with api.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event.registrations (event_id, barcode, name, email, company_name)"
            " SELECT $1, (900000000 + g)::text, 'Guest ' || g, 'g' || g || '@example.org',"
            " repeat('x', 200) FROM generate_series(1, 60000) g",
            uuid.UUID(ev["id"]),
        )
        # analyzed, as autovacuum soon would: the COPY's scan may then run parallel workers
        await conn.execute("ANALYZE event.registrations")
    token, _ = await create_token(api.pool, "probe", ["*"], None, datetime.now(UTC))
    port = free_port()
    proc = start_serve(db_url, port, EVENT_SCHEDULER_ENABLED="false", EVENTS_POOL_MAX="3")
    base = f"http://127.0.0.1:{port}"

    async def copies(conn: asyncpg.Connection) -> tuple[int, int]:
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE query LIKE 'COPY%' AND state = 'active') AS copying,"
            " count(*) FILTER (WHERE state LIKE 'idle in transaction%') AS in_tx"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'events-svc' AND pid <> pg_backend_pid()"
            # the service's own connections: a parallel worker of the COPY's scan (once
            # autovacuum has analyzed the table) shows the same query
            " AND backend_type = 'client backend'"
        )
        return int(row["copying"]), int(row["in_tx"])

    try:
        await asyncio.to_thread(wait_ready, proc, base)
        headers = {"Authorization": f"Bearer {token}"}
        api_base = f"{base}/api/v1/event"
        watcher = await asyncpg.connect(db_url)
        async with httpx.AsyncClient(base_url=api_base, headers=headers, timeout=30) as client:
            for _ in range(2):  # twice: the pool got its connection back the first time
                shown = await preview(client, ev["id"], list(EXPORT_COLUMNS))
                body = {"confirmation_token": shown["confirmation_token"]}
                async with client.stream(
                    "POST", f"/admin/events/{ev['id']}/exports", json=body
                ) as r:
                    assert r.status_code == 200
                    raw = r.aiter_raw()
                    assert await anext(raw)  # the first bytes, then this client stops reading
                    await asyncio.sleep(0.5)  # the queue and the socket buffers fill up
                    assert await copies(watcher) == (1, 0)  # blocked on this client
                    await raw.aclose()
                # the client is gone: the COPY stops and its connection leaves its transaction
                deadline = time.monotonic() + 10
                while await copies(watcher) != (0, 0):
                    assert time.monotonic() < deadline, await copies(watcher)
                    await asyncio.sleep(0.1)
            last = await preview(client, ev["id"], ["id"])
            full = await client.post(
                f"/admin/events/{ev['id']}/exports",
                json={"confirmation_token": last["confirmation_token"]},
            )
            assert full.status_code == 200 and len(full.text.splitlines()) == 60001
        await watcher.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode is not None


def test_the_setup_step_names_the_package_when_it_cannot_install(tmp_path: Path):
    script = Path(__file__).parents[2] / "scripts" / "ensure-debian-packages"
    done = subprocess.run(
        [str(script), "libreoffice-calc-nogui=soffice"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr  # installed here (make test ran it)
    fake = subprocess.run(
        [str(script), "no-such-package-events-svc=no-such-command-events-svc"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "EVENTS_SETUP_NO_INSTALL": "1"},
    )
    assert fake.returncode != 0
    lines = [line for line in fake.stdout.splitlines() + fake.stderr.splitlines() if line]
    assert len(lines) == 1 and "no-such-package-events-svc" in lines[0], lines
