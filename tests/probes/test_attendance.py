"""The attendance import: CSV and JSON bodies, every row outcome, the bounds (5 MiB, 10 000
rows, the Idempotency-Key), replays, batches and their progress, cancel and resume, a
failing batch backing its job off, companies and scopes, no mail and no lead arming,
a real `events-svc serve` killed with SIGKILL mid-import, and racing resumes (real
PostgreSQL through the real HTTP app)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc.adapters.standalone import standalone_ports
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.attendance import ImportOptions, run_import_pass
from tests.probes.helpers import (
    API,
    Api,
    free_port,
    hand_loop,
    insert_registration,
    make_event,
    run_all,
    start_serve,
    wait_ready,
)

BATCH = 10  # the app's EVENTS_IMPORT_BATCH here: imports of a few dozen rows take batches
MIB = 1024 * 1024
# each registration's version and its registration_set_done audit rows
MARKS_PER_REGISTRATION = """
SELECT r.version, count(a.id) AS marks FROM event.registrations r
LEFT JOIN event.event_audit_log a ON a.object_id = r.id AND a.verb = 'registration_set_done'
GROUP BY r.id, r.version
"""


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, import_batch=BATCH)


def imports(event_id: Any) -> str:
    return f"/admin/events/{event_id}/attendance-imports"


async def post_csv(
    client: httpx.AsyncClient, event_id: Any, text: str | bytes, key: str | None = "k1"
) -> httpx.Response:
    headers = {"content-type": "text/csv"}
    if key is not None:
        headers["idempotency-key"] = key
    body = text.encode() if isinstance(text, str) else text
    return await client.post(imports(event_id), content=body, headers=headers)


async def post_json(
    client: httpx.AsyncClient, event_id: Any, rows: list[dict[str, Any]], key: str = "k1"
) -> httpx.Response:
    return await client.post(
        imports(event_id), json={"rows": rows}, headers={"idempotency-key": key}
    )


async def created(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 202, r.text
    return dict(r.json())


async def resume(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    r = await client.post(f"/admin/attendance-imports/{job_id}/resume")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def seed_open(api: Api, event_id: Any, n: int, base: int) -> list[str]:
    """n open attendees of the event with barcodes base+1 .. base+n; their barcodes."""
    async with api.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event.registrations (event_id, barcode, name, email, date_open)"
            " SELECT $1, ($2::bigint + g)::text, 'Guest ' || g, 'g' || g || '@example.org',"
            " now() FROM generate_series(1, $3) g",
            uuid.UUID(str(event_id)),
            base,
            n,
        )
    return [str(base + g) for g in range(1, n + 1)]


async def one(api: Api, event_id: Any, state: str = "open") -> tuple[str, str]:
    """(id, barcode) of a new registration of the event in `state`."""
    reg_id = await insert_registration(api.pool, uuid.UUID(str(event_id)), state=state)
    async with api.pool.acquire() as conn:
        barcode = await conn.fetchval(
            "UPDATE event.registrations r SET company_id = e.company_id FROM event.events e"
            " WHERE r.id = $1 AND e.id = r.event_id RETURNING r.barcode",
            reg_id,
        )
    return str(reg_id), str(barcode)


async def fetch(api: Api, statement: str, *args: Any) -> list[asyncpg.Record]:
    async with api.pool.acquire() as conn:
        return list(await conn.fetch(statement, *args))


async def value(api: Api, statement: str, *args: Any) -> Any:
    async with api.pool.acquire() as conn:
        return await conn.fetchval(statement, *args)


def csv_of(column: str, values: list[str]) -> str:
    return "\n".join([column, *values]) + "\n"


# --- bodies ----------------------------------------------------------------------------------


async def test_zero_rows_make_a_job_completed_at_once(api: Api, admin):
    ev = await make_event(admin)
    job = await created(await post_csv(admin, ev["id"], "barcode\n", key="csv"))
    assert job["state"] == "completed" and job["total"] == 0 and job["processed"] == 0
    assert job["errors"] == [] and job["error_count"] == 0 and job["finished_at"] is not None
    job = await created(await post_json(admin, ev["id"], [], key="json"))
    assert (job["state"], job["total"]) == ("completed", 0)
    audits = await fetch(
        api, "SELECT summary FROM event.event_audit_log WHERE verb = 'attendance_import_created'"
    )
    assert [a["summary"] for a in audits] == [
        {"total": 0, "malformed": 0, "state": "completed"}
    ] * 2


async def test_a_csv_with_bom_and_semicolons_marks_attendance(api: Api, admin):
    ev = await make_event(admin)
    codes = await seed_open(api, ev["id"], 3, 100_000)
    text = "\ufeffName;BARCODE;note\n" + "".join(f'"Guest, {c}";{c};x\r\n' for c in codes)
    job = await created(await post_csv(admin, ev["id"], text.encode("utf-8")))
    assert (job["state"], job["total"], job["processed"]) == ("queued", 3, 0)
    job = await resume(admin, job["id"])
    assert job["state"] == "completed"
    assert (job["processed"], job["marked"], job["already_marked"], job["error_count"]) == (
        3,
        3,
        0,
        0,
    )
    rows = await fetch(
        api,
        "SELECT state::text, date_closed, version FROM event.registrations WHERE event_id = $1",
        uuid.UUID(ev["id"]),
    )
    assert {(r["state"], r["version"]) for r in rows} == {("done", 2)}
    assert all(r["date_closed"] is not None for r in rows)
    # the one transition wrote each registration's audit row, as the importing actor
    marks = await fetch(
        api,
        "SELECT summary FROM event.event_audit_log WHERE verb = 'registration_set_done'",
    )
    assert len(marks) == 3
    assert {json.dumps(m["summary"], sort_keys=True) for m in marks} == {
        json.dumps(
            {"from": "open", "to": "done", "source": "import", "job": job["id"]}, sort_keys=True
        )
    }


async def test_json_rows_by_barcode_or_registration_id(api: Api, admin):
    ev = await make_event(admin)
    by_code, code = await one(api, ev["id"])
    by_id, _ = await one(api, ev["id"])
    both, both_code = await one(api, ev["id"])
    mismatch, _ = await one(api, ev["id"])
    rows = [
        {"barcode": f"  {code} "},
        {"registration_id": by_id.upper()},
        {"barcode": both_code, "registration_id": both},
        {"barcode": both_code, "registration_id": mismatch},  # two values naming two rows
        {"barcode": f"{code}\u0000"},  # a NUL: this row is malformed, the body is not refused
    ]
    job = await resume(admin, (await created(await post_json(admin, ev["id"], rows)))["id"])
    assert (job["marked"], job["error_count"]) == (3, 2)
    assert job["errors"] == [
        {"row": 4, "code": "unknown_barcode"},
        {"row": 5, "code": "malformed_row"},
    ]
    states = await fetch(api, "SELECT id, state::text FROM event.registrations")
    assert {str(r["id"]): r["state"] for r in states} == {
        by_code: "done",
        by_id: "done",
        both: "done",
        mismatch: "open",
    }
    # a JSON body is a model: unknown fields and wrong types are refused, values bounded
    r = await post_json(admin, ev["id"], [{"barcode": "1", "name": "Ada"}], key="k2")
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_field"
    assert r.json()["error"]["field"] == "rows.0.name"
    # a number or a boolean names nothing: its row is malformed, the others are read
    r = await post_json(admin, ev["id"], [{"barcode": 12345}, {"registration_id": True}], key="k3")
    typed = await resume(admin, (await created(r))["id"])
    assert typed["total"] == 2 and typed["errors"] == [
        {"row": 1, "code": "malformed_row"},
        {"row": 2, "code": "malformed_row"},
    ]
    # null and empty values, and an empty row: malformed rows too
    r = await post_json(admin, ev["id"], [{"registration_id": None, "barcode": ""}, {}], key="k3n")
    empty = await resume(admin, (await created(r))["id"])
    assert [e["code"] for e in empty["errors"]] == ["malformed_row"] * 2
    r = await post_json(admin, ev["id"], [{"barcode": {"x": 1}}], key="k3b")
    assert r.status_code == 422 and r.json()["error"]["field"].startswith("rows.0.barcode")
    for body in (b'{"rows": [{"barcode": ' + b"1" * 5000 + b"}]}", b"[" * 100_000):
        r = await admin.post(
            imports(ev["id"]),
            content=body,
            headers={"content-type": "application/json", "idempotency-key": "k3c"},
        )
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_json", r.text
    r = await post_json(admin, ev["id"], [{"barcode": "1" * 201}], key="k4")
    assert r.status_code == 422 and r.json()["error"]["field"] == "rows.0.barcode"
    r = await admin.post(
        imports(ev["id"]),
        content=b'{"rows": [',
        headers={"content-type": "application/json", "idempotency-key": "k5"},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_json"


async def test_every_row_outcome_with_its_row_number(api: Api, admin):
    ev = await make_event(admin)
    other = await make_event(admin)
    open_id, open_code = await one(api, ev["id"])
    done_id, done_code = await one(api, ev["id"], "done")
    _, draft_code = await one(api, ev["id"], "draft")
    _, cancel_code = await one(api, ev["id"], "cancel")
    _, elsewhere_code = await one(api, other["id"])
    archived_id, archived_code = await one(api, ev["id"])
    await admin.post(f"/admin/registrations/{archived_id}/archive")
    values = [
        open_code,  # 1 marked
        done_code,  # 2 already_marked
        draft_code,  # 3 not_confirmed
        cancel_code,  # 4 not_confirmed
        elsewhere_code,  # 5 wrong_event
        "99999999999",  # 6 unknown_barcode
        archived_code,  # 7 unknown_barcode (archived)
        open_code,  # 8 duplicate_row
        "12ab",  # 9 malformed_row
        ",",  # 10 malformed_row (the cell is empty; the line is not)
        "1" * 21,  # 11 malformed_row (too long for a barcode)
        done_code,  # 12 duplicate_row
    ]
    text = csv_of("note,barcode", [v if v == "," else f"n,{v}" for v in values])
    job = await created(await post_csv(admin, ev["id"], text))
    assert job["total"] == 12
    job = await resume(admin, job["id"])
    assert job["state"] == "completed"
    assert (job["processed"], job["marked"], job["already_marked"], job["error_count"]) == (
        12,
        1,
        1,
        10,
    )
    assert job["errors"] == [
        {"row": 3, "code": "not_confirmed"},
        {"row": 4, "code": "not_confirmed"},
        {"row": 5, "code": "wrong_event"},
        {"row": 6, "code": "unknown_barcode"},
        {"row": 7, "code": "unknown_barcode"},
        {"row": 8, "code": "duplicate_row"},
        {"row": 9, "code": "malformed_row"},
        {"row": 10, "code": "malformed_row"},
        {"row": 11, "code": "malformed_row"},
        {"row": 12, "code": "duplicate_row"},
    ]
    rows = await fetch(api, "SELECT id, state::text, version FROM event.registrations")
    states = {str(r["id"]): (r["state"], r["version"]) for r in rows}
    assert states[open_id] == ("done", 2)
    assert states[done_id][0] == "done" and states[archived_id][0] == "open"
    assert sum(1 for s, _ in states.values() if s == "done") == 2  # nothing else moved


async def test_registration_ids_rows_and_malformed_ids(api: Api, admin):
    ev = await make_event(admin)
    reg, _ = await one(api, ev["id"])
    text = csv_of(
        "registration_id,barcode",
        [
            f"{reg},",
            f"{uuid.uuid4()},",  # 2 unknown
            "not-a-uuid,",  # 3 malformed
            f"{reg}x,",  # 4 malformed
            ",",  # 5 both empty: malformed
            f"{reg},",  # 6 duplicate
        ],
    )
    job = await resume(admin, (await created(await post_csv(admin, ev["id"], text)))["id"])
    assert job["marked"] == 1
    assert [e["code"] for e in job["errors"]] == [
        "unknown_barcode",
        "malformed_row",
        "malformed_row",
        "malformed_row",
        "duplicate_row",
    ]
    assert [e["row"] for e in job["errors"]] == [2, 3, 4, 5, 6]


async def test_formula_like_cells_are_plain_data_never_echoed(api: Api, admin):
    ev = await make_event(admin)
    reg, code = await one(api, ev["id"])
    cells = ["=1+1", "@SUM(A1)", "+1", "-1", '=HYPERLINK("http://x")', f"={code}", " =1+1 "]
    text = "barcode;registration_id\n" + "".join(
        f'"{c.replace(chr(34), chr(34) * 2)}";\n' for c in cells
    )
    r = await post_csv(admin, ev["id"], text)
    job = await resume(admin, (await created(r))["id"])
    assert job["error_count"] == len(cells) and job["marked"] == 0
    assert {e["code"] for e in job["errors"]} == {"malformed_row"}
    stored = await fetch(api, "SELECT barcode, registration_id FROM event.attendance_import_rows")
    assert {(s["barcode"], s["registration_id"]) for s in stored} == {(None, None)}
    # never evaluated (the registration `=<barcode>` names is untouched), never echoed
    assert (
        await value(api, "SELECT state::text FROM event.registrations WHERE id=$1", uuid.UUID(reg))
        == "open"
    )
    audit = json.dumps(
        [dict(a) for a in await fetch(api, "SELECT summary FROM event.event_audit_log")]
    )
    for cell in ("=1+1", "SUM(A1)", "HYPERLINK", code):
        assert cell not in r.text and cell not in json.dumps(job) and cell not in audit


# --- refusals ----------------------------------------------------------------------------------


async def test_bodies_over_5_mib_and_imports_over_10000_rows_are_413(api: Api, admin):
    ev = await make_event(admin)
    big = b"barcode\n" + b"1\n" * ((5 * MIB) // 2)
    r = await post_csv(admin, ev["id"], big)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"
    assert r.json()["error"]["limit_bytes"] == 5 * MIB
    # the wider limit is this route's only: 2 MiB elsewhere is refused at 1 MiB
    padded = {"name": "x" * (2 * MIB)}
    r = await admin.post("/admin/stages", json=padded)
    assert r.status_code == 413 and r.json()["error"]["limit_bytes"] == MIB
    # 2 MiB on the import route is read (10 000 rows of long barcodes, each malformed)
    many = csv_of("barcode", ["9" * 200] * 10_000)
    assert 2 * MIB > len(many) > MIB
    job = await created(await post_csv(admin, ev["id"], many, key="many"))
    assert job["total"] == 10_000
    # the row bound: 10 001 rows, CSV or JSON
    r = await post_csv(admin, ev["id"], csv_of("barcode", ["1"] * 10_001), key="over")
    assert r.status_code == 413 and r.json()["error"] == {
        "code": "payload_too_large",
        "detail": "An import holds at most 10000 rows.",
        "limit_rows": 10_000,
    }
    r = await post_json(admin, ev["id"], [{"barcode": "1"}] * 10_001, key="over-json")
    assert r.status_code == 413 and r.json()["error"]["limit_rows"] == 10_000
    assert await value(api, "SELECT count(*) FROM event.attendance_imports") == 1


async def test_the_idempotency_key_is_required_and_bounded(admin):
    ev = await make_event(admin)
    for key in (None, "", "   "):
        r = await post_csv(admin, ev["id"], "barcode\n1\n", key=key)
        assert r.status_code == 422 and r.json()["error"]["code"] == "idempotency_key_required"
    for key in ("k" * 201, "key with spaces", "clé"):
        r = await admin.post(
            imports(ev["id"]),
            content=b"barcode\n1\n",
            headers={"content-type": "text/csv", "idempotency-key": key.encode()},
        )
        assert r.status_code == 422, (key, r.text)
        assert r.json()["error"]["code"] == "validation_failed"
        assert r.json()["error"]["field"].lower() == "idempotency-key"
    assert (await post_csv(admin, ev["id"], "barcode\n1\n", key="k" * 200)).status_code == 202


async def test_unreadable_bodies_are_typed_refusals(admin):
    ev = await make_event(admin)
    r = await admin.post(
        imports(ev["id"]), content=b"barcode\n1\n", headers={"idempotency-key": "k"}
    )
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    r = await admin.post(
        imports(ev["id"]),
        content=b"<rows/>",
        headers={"idempotency-key": "k", "content-type": "application/xml"},
    )
    assert r.status_code == 415
    cases = [
        (b"", "import_header_invalid"),
        (b"name,email\nAda,ada@example.org\n", "import_header_invalid"),
        (b"barcode,Barcode\n1,2\n", "import_header_invalid"),
        (b"barcode\n\xff\xfe1\n", "import_csv_invalid"),
        (b'barcode\n"12"34\n', "import_csv_invalid"),
    ]
    for body, code in cases:
        r = await post_csv(admin, ev["id"], body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"] == code, (body, r.text)
        assert "ada@example.org" not in r.text


async def test_another_company_gets_404_and_a_scope_is_needed(api: Api, admin):
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    ev = await make_event(admin, company_id=str(mine))
    reg, code = await one(api, ev["id"])
    own = await api.token("attendance:write", company=mine)
    other = await api.token("attendance:write", company=theirs)
    writer = await api.token("registration:write", "registration:read", "event:read")
    r = await admin.post(
        imports(ev["id"]),
        content=csv_of("barcode", [code]),
        headers={**own, "content-type": "text/csv", "idempotency-key": "k"},
    )
    job = await created(r)
    paths = [
        ("POST", imports(ev["id"])),
        ("GET", f"/admin/attendance-imports/{job['id']}"),
        ("POST", f"/admin/attendance-imports/{job['id']}/resume"),
        ("POST", f"/admin/attendance-imports/{job['id']}/cancel"),
    ]
    body = {
        "content": b"barcode\n1\n",
        "headers": {"content-type": "text/csv", "idempotency-key": "k"},
    }
    for method, path in paths:
        r = await api.client.request(
            method, path, **{**body, "headers": {**body["headers"], **other}}
        )
        assert r.status_code == 404, (path, r.text)
        r = await api.client.request(
            method, path, **{**body, "headers": {**body["headers"], **writer}}
        )
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"]["code"] == "missing_scope"
    r = await api.client.post(
        imports(uuid.uuid4()), **{**body, "headers": {**body["headers"], **own}}
    )
    assert r.status_code == 404
    assert (
        await value(api, "SELECT state::text FROM event.registrations WHERE id=$1", uuid.UUID(reg))
        == "open"
    )
    r = await api.client.post(f"/admin/attendance-imports/{job['id']}/resume", headers=own)
    assert r.status_code == 200 and r.json()["marked"] == 1
    # the batch sees what its creator sees: another company's barcode is unknown to it
    foreign = await make_event(admin, company_id=str(theirs))
    _, foreign_code = await one(api, foreign["id"])
    r = await api.client.post(
        imports(ev["id"]),
        content=csv_of("barcode", [foreign_code]),
        headers={**own, "content-type": "text/csv", "idempotency-key": "k2"},
    )
    r = await api.client.post(f"/admin/attendance-imports/{r.json()['id']}/resume", headers=own)
    assert r.json()["errors"] == [{"row": 1, "code": "unknown_barcode"}]


# --- jobs ----------------------------------------------------------------------------------------


async def test_a_replay_answers_the_same_job_and_stores_nothing_twice(api: Api, admin):
    ev = await make_event(admin)
    other = await make_event(admin)
    codes = await seed_open(api, ev["id"], 3, 200_000)
    made = await post_csv(admin, ev["id"], csv_of("barcode", codes))
    first_headers = dict(made.headers)
    first = await created(made)
    again = await post_csv(admin, ev["id"], csv_of("barcode", codes))
    assert again.status_code == 202 and again.json()["id"] == first["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in {k.lower() for k in first_headers}
    # the key names the job whatever the body says; the job moves on, and so does its view
    await resume(admin, first["id"])
    later = await post_csv(admin, ev["id"], csv_of("barcode", codes[:1]))
    assert later.status_code == 202 and later.json()["id"] == first["id"]
    assert later.json()["state"] == "completed" and later.json()["total"] == 3
    # racing replays: one job
    racing = await asyncio.gather(
        *(post_csv(admin, ev["id"], csv_of("barcode", codes), key="race") for _ in range(5))
    )
    assert [r.status_code for r in racing] == [202] * 5
    assert sum("idempotent-replayed" in r.headers for r in racing) == 4
    assert len({r.json()["id"] for r in racing}) == 1
    # keys are per event: the same key on another event is that event's own job
    elsewhere = await created(await post_csv(admin, other["id"], csv_of("barcode", codes)))
    assert elsewhere["id"] != first["id"]
    assert await value(api, "SELECT count(*) FROM event.attendance_imports") == 3
    assert await value(api, "SELECT count(*) FROM event.attendance_import_rows") == 9
    assert (
        await value(
            api,
            "SELECT count(*) FROM event.event_audit_log WHERE verb = 'attendance_import_created'",
        )
        == 3
    )


async def test_batches_show_progress_and_the_loop_finishes_the_job(api: Api, admin, settings):
    ev = await make_event(admin)
    codes = await seed_open(api, ev["id"], 23, 300_000)
    job = await created(await post_csv(admin, ev["id"], csv_of("barcode", codes)))
    path = f"/admin/attendance-imports/{job['id']}"
    now = datetime.now(UTC)
    seen = []
    for _ in range(3):
        summary = await run_import_pass(api.pool, ImportOptions(batch=5, cap=1), now)
        assert (summary.batches, summary.rows, summary.more) == (1, 5, True)
        view = (await admin.get(path)).json()
        seen.append((view["state"], view["processed"], view["marked"]))
    assert seen == [("running", 5, 5), ("running", 10, 10), ("running", 15, 15)]
    done = await value(
        api,
        "SELECT count(*) FROM event.registrations WHERE event_id=$1 AND state='done'",
        uuid.UUID(ev["id"]),
    )
    assert done == 15
    # the scheduler loop's pass takes the rest (EVENTS_IMPORT_BATCH rows a batch)
    ran = await run_all(api.pool, settings, standalone_ports(), lambda: now)
    assert ran["imports"]["status"] == "ran" and ran["imports"]["counts"]["batches"] >= 1
    view = (await admin.get(path)).json()
    assert (view["state"], view["processed"], view["marked"]) == ("completed", 23, 23)
    verbs = await fetch(
        api,
        "SELECT verb, summary FROM event.event_audit_log WHERE object_id = $1 ORDER BY id",
        uuid.UUID(job["id"]),
    )
    assert [v["verb"] for v in verbs] == [
        "attendance_import_created",
        "attendance_import_running",
        "attendance_import_completed",
    ]
    assert verbs[2]["summary"] == {
        "from": "running",
        "to": "completed",
        "processed": 23,
        "marked": 23,
        "already_marked": 0,
        "error_count": 0,
    }


async def test_cancel_stops_unclaimed_rows_and_keeps_processed_ones(api: Api, admin):
    ev = await make_event(admin)
    codes = await seed_open(api, ev["id"], 30, 400_000)
    job = await created(await post_csv(admin, ev["id"], csv_of("barcode", codes)))
    path = f"/admin/attendance-imports/{job['id']}"
    now = datetime.now(UTC)
    await run_import_pass(api.pool, ImportOptions(batch=5, cap=2), now)
    r = await admin.post(f"{path}/cancel")
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["processed"], r.json()["marked"]) == ("cancelled", 10, 10)
    assert (await run_import_pass(api.pool, ImportOptions(batch=5), now)).batches == 0
    rows = await fetch(
        api,
        "SELECT row_no, outcome::text FROM event.attendance_import_rows"
        " WHERE job_id = $1 ORDER BY row_no",
        uuid.UUID(job["id"]),
    )
    assert [r["outcome"] for r in rows] == ["marked"] * 10 + [None] * 20
    done = await value(api, "SELECT count(*) FROM event.registrations WHERE state = 'done'")
    assert done == 10
    # cancelling again answers the job unchanged; a finished job does not resume
    again = await admin.post(f"{path}/cancel")
    assert again.status_code == 200 and again.json()["state"] == "cancelled"
    r = await admin.post(f"{path}/resume")
    assert r.status_code == 409 and r.json()["error"]["code"] == "import_finished"
    # a completed job can be neither cancelled nor resumed
    small = await created(await post_csv(admin, ev["id"], csv_of("barcode", codes[:2]), key="k2"))
    await resume(admin, small["id"])
    for action in ("cancel", "resume"):
        r = await admin.post(f"/admin/attendance-imports/{small['id']}/{action}")
        assert r.status_code == 409 and r.json()["error"]["code"] == "import_finished"
    cancels = await value(
        api, "SELECT count(*) FROM event.event_audit_log WHERE verb = 'attendance_import_cancelled'"
    )
    assert cancels == 1


async def test_a_failing_batch_backs_its_job_off_then_fails_and_resume_revives_it(
    api: Api, admin, db_url: str
):
    ev = await make_event(admin)
    codes = await seed_open(api, ev["id"], 4, 500_000)
    job = await created(await post_csv(admin, ev["id"], csv_of("barcode", codes)))
    path = f"/admin/attendance-imports/{job['id']}"
    quick = Settings(database_url=db_url, pool_min=1, pool_max=2, lock_timeout_ms=100)
    pool = await create_pool(db_url, quick)
    holder = await asyncpg.connect(db_url)
    now = datetime.now(UTC)
    try:
        # another transaction holds the event row: every batch times out on its lock
        tx = holder.transaction()
        await tx.start()
        await holder.execute(
            "SELECT 1 FROM event.events WHERE id = $1 FOR UPDATE", uuid.UUID(ev["id"])
        )
        waits = []
        at = now
        for attempt in range(1, 6):
            summary = await run_import_pass(pool, ImportOptions(), at)
            assert (summary.batches, summary.failed) == (1, 1), attempt
            view = (await admin.get(path)).json()
            assert view["processed"] == 0 and view["last_error"] == "busy"
            assert view["attempts"] == attempt
            if attempt < 5:
                assert view["state"] == "paused"
                retry = datetime.fromisoformat(view["next_attempt_at"])
                waits.append((retry - at).total_seconds())
                if attempt == 1:  # the loop sleeps until the retry time, not less
                    loop = hand_loop(pool, quick, standalone_ports(), lambda t=at: t)
                    assert await loop.lanes["imports"].tick() == (0.0, 5.0)
                # backing off: a pass before the retry time leaves the job alone
                assert (
                    await run_import_pass(pool, ImportOptions(), retry - timedelta(seconds=1))
                ).batches == 0
                at = retry
        assert waits == [5.0, 10.0, 20.0, 40.0]
        assert view["state"] == "failed" and view["next_attempt_at"] is None
        # failed: no pass takes it any more, however late
        assert (await run_import_pass(pool, ImportOptions(), at + timedelta(days=1))).batches == 0
        await tx.rollback()
    finally:
        await holder.close()
        await pool.close()
    assert (
        await value(
            api, "SELECT count(*) FROM event.attendance_import_rows WHERE outcome IS NOT NULL"
        )
        == 0
    )
    view = await resume(admin, job["id"])
    assert (view["state"], view["marked"], view["attempts"], view["last_error"]) == (
        "completed",
        4,
        0,
        None,
    )
    verbs = await fetch(
        api,
        "SELECT verb, summary FROM event.event_audit_log WHERE object_id = $1 ORDER BY id",
        uuid.UUID(job["id"]),
    )
    assert [v["verb"] for v in verbs] == [
        "attendance_import_created",
        "attendance_import_paused",
        "attendance_import_failed",
        "attendance_import_queued",
        "attendance_import_completed",
    ]
    assert verbs[1]["summary"] == {"from": "queued", "to": "paused", "error": "busy", "attempts": 1}


async def test_errors_are_capped_at_100_and_all_counted(admin):
    ev = await make_event(admin)
    values = [str(900_000 + i) for i in range(150)]
    job = await created(await post_csv(admin, ev["id"], csv_of("barcode", values)))
    job = await resume(admin, job["id"])
    assert (job["state"], job["processed"], job["error_count"]) == ("completed", 150, 150)
    assert job["errors"] == [{"row": n, "code": "unknown_barcode"} for n in range(1, 101)]


async def test_importing_writes_no_outbox_row_and_arms_no_lead_rule(api: Api, admin):
    ev = await make_event(admin)
    codes = await seed_open(api, ev["id"], 5, 600_000)
    _, draft_code = await one(api, ev["id"], "draft")
    tpl = await admin.post("/admin/templates", json={"name": "T", "body": "Hello"})
    mail = {
        "event_id": ev["id"],
        "template_ref": tpl.json()["id"],
        "interval_unit": "now",
        "interval_kind": "after_sub",
        "interval_nbr": 0,
    }
    assert (await admin.post("/admin/mails", json=mail)).status_code == 201
    rule = {
        "name": "All confirmed",
        "trigger": "confirm",
        "predicates": [{"axis": "event", "value_ids": [ev["id"]]}],
    }
    assert (await admin.post("/admin/lead-rules", json=rule)).status_code == 201
    snapshot = (
        "SELECT (SELECT count(*) FROM event.outbox_messages) AS outbox,"
        " (SELECT count(*) FROM event.mail_registrations) AS receipts,"
        " (SELECT coalesce(json_agg(json_build_object('id', id, 'g', generation, 'done', done)"
        "   ORDER BY id)::text, '[]') FROM event.lead_requests) AS leads"
    )
    before = dict((await fetch(api, snapshot))[0])
    job = await created(await post_csv(admin, ev["id"], csv_of("barcode", [*codes, draft_code])))
    job = await resume(admin, job["id"])
    assert (job["marked"], job["errors"]) == (5, [{"row": 6, "code": "not_confirmed"}])
    after = dict((await fetch(api, snapshot))[0])
    assert after == before and after["outbox"] == 0
    # the probe can see an arming: confirming the draft queues the rule's request again
    reg = await value(api, "SELECT id FROM event.registrations WHERE barcode = $1", draft_code)
    assert (await admin.post(f"/admin/registrations/{reg}/confirm")).status_code == 200
    assert dict((await fetch(api, snapshot))[0])["leads"] != before["leads"]


# --- crashes and races -----------------------------------------------------------------------


async def test_a_sigkill_mid_import_leaves_whole_batches_and_resume_marks_each_once(
    api: Api, admin, db_url: str
):
    ev = await make_event(admin)
    codes = await seed_open(api, ev["id"], 2000, 700_000)
    token = await api.token("attendance:write")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_serve(db_url, port, EVENTS_IMPORT_BATCH="5", EVENTS_LOG_LEVEL="WARNING")
    try:
        await asyncio.to_thread(wait_ready, proc, base, 90)
        async with httpx.AsyncClient(base_url=f"{base}{API}", headers=token) as http:
            r = await post_csv(http, ev["id"], csv_of("barcode", codes))
            job = await created(r)
            path = f"/admin/attendance-imports/{job['id']}"
            progress = 0
            for _ in range(3000):
                progress = (await http.get(path)).json()["processed"]
                if progress > 0:
                    break
                await asyncio.sleep(0.005)
            proc.kill()  # SIGKILL: no shutdown, the batch in hand dies with its transaction
            await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    view = (await admin.get(f"/admin/attendance-imports/{job['id']}")).json()
    assert 0 < progress <= view["processed"] < 2000, (progress, view)
    assert view["processed"] % 5 == 0 and view["marked"] == view["processed"]
    marks = await value(
        api, "SELECT count(*) FROM event.event_audit_log WHERE verb = 'registration_set_done'"
    )
    done = await value(api, "SELECT count(*) FROM event.registrations WHERE state = 'done'")
    assert marks == done == view["processed"]
    finished = await resume(admin, job["id"])
    assert (finished["state"], finished["processed"], finished["marked"]) == (
        "completed",
        2000,
        2000,
    )
    per_registration = await fetch(
        api,
        MARKS_PER_REGISTRATION,
    )
    assert len(per_registration) == 2000
    assert {(p["version"], p["marks"]) for p in per_registration} == {(2, 1)}
    rows = await fetch(
        api,
        "SELECT outcome::text, count(*) AS n FROM event.attendance_import_rows GROUP BY 1",
    )
    assert [(r["outcome"], r["n"]) for r in rows] == [("marked", 2000)]


async def test_racing_resumes_and_passes_mark_each_registration_once(api: Api, admin):
    ev = await make_event(admin)
    codes = await seed_open(api, ev["id"], 200, 800_000)
    text = csv_of("barcode", codes + codes[:20])  # 20 duplicates at the end
    job = await created(await post_csv(admin, ev["id"], text))
    path = f"/admin/attendance-imports/{job['id']}"
    now = datetime.now(UTC)
    racers = [admin.post(f"{path}/resume") for _ in range(3)]
    passes = [run_import_pass(api.pool, ImportOptions(batch=7, cap=1000), now) for _ in range(2)]
    answers = await asyncio.gather(*racers, *passes)
    assert all(a.status_code == 200 for a in answers[:3])
    view = (await admin.get(path)).json()
    if view["state"] != "completed":  # every racer stood aside for another at the end
        view = await resume(admin, job["id"])
    assert (view["state"], view["processed"], view["marked"]) == ("completed", 220, 200)
    assert view["errors"] == [{"row": n, "code": "duplicate_row"} for n in range(201, 221)]
    per_registration = await fetch(
        api,
        MARKS_PER_REGISTRATION,
    )
    assert {(p["version"], p["marks"]) for p in per_registration} == {(2, 1)}
