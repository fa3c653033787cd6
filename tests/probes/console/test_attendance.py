"""The console's attendance import pages in a real browser at 1440x900 and 390x844, with
JavaScript on and off, and over plain HTTP: a CSV's upload → progress → result with its
per-row errors (the page refreshing itself with JavaScript, resumed by hand without it),
cancel keeping the rows already processed, resume refused on a cancelled job, a double
submit making one job, bodies over the API's bounds and a bad header, and a token without
the scope seeing the 403 naming it — each compared with the same import through the admin
API (same counters, same row errors, same refusal codes)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from playwright.async_api import Page

from events_svc.models.attendance import MAX_IMPORT_BYTES, MAX_IMPORT_ROWS
from events_svc.verbs.attendance import ImportOptions, run_import_pass
from tests.probes.console.kit import RUNS, UNKNOWN, attendee, client, suffix
from tests.probes.helpers import api_status, make_event

# --- the attendance import -----------------------------------------------------------------


async def import_cases(admin: httpx.AsyncClient, event_id: str) -> str:
    """A CSV: two good rows, a row already marked, a duplicate, an unknown barcode and a
    malformed row (its rows' codes are the same for each call's own registrations)."""
    good = [await attendee(admin, event_id) for _ in range(2)]
    done = await attendee(admin, event_id)
    assert (await admin.post(f"/admin/registrations/{done['id']}/set-done")).status_code == 200
    lines = ["note,barcode"]
    lines += [f"first,{good[0]['barcode']}", f"second,{good[1]['barcode']}"]
    lines += [f"done,{done['barcode']}", f"again,{good[0]['barcode']}"]
    lines += [f"unknown,{UNKNOWN}", "typo,12ab"]
    return "\n".join(lines) + "\n"


ROW_ERRORS = [(4, "duplicate_row"), (5, "unknown_barcode"), (6, "malformed_row")]


async def table_errors(page: Page) -> list[tuple[int, str]]:
    rows = page.locator("table.att-errors tbody tr")
    found = []
    for i in range(await rows.count()):
        cells = rows.nth(i).locator("td")
        found.append((int(await cells.nth(0).inner_text()), await cells.nth(1).inner_text()))
    return found


async def counter(page: Page, name: str) -> int:
    return int(await page.inner_text(f"#import-{name}"))


@pytest.mark.parametrize(("size", "js"), RUNS)
async def test_import_with_errors_then_its_result_like_the_api(studio, admin, pool, size, js):
    ev = await make_event(admin, name="Import day")
    ours, twins = await import_cases(admin, ev["id"]), await import_cases(admin, ev["id"])
    page = await studio.open("attendance:write", "event:read", size=size, js=js)
    await page.goto(studio.url(f"/events/{ev['id']}/attendance"))
    await studio.shot(page, f"import-upload-{suffix(size, js)}")
    await page.set_input_files(
        "#field-csv_file",
        files=[{"name": "scans.csv", "mimeType": "text/csv", "buffer": ours.encode()}],
    )
    async with page.expect_navigation():
        await page.click("button:has-text('Start import')")
    assert "/attendance-imports/" in page.url and "done=import_started" in page.url
    job_url = page.url.split("?")[0]
    assert await page.inner_text("#import-state") == "Queued"
    assert (await page.get_attribute("#import-progress", "data-poll")) is not None
    assert await counter(page, "total") == 6 and await counter(page, "processed") == 0
    await studio.shot(page, f"import-progress-{suffix(size, js)}")
    if js:  # the pass runs as the scheduler loop would; the page refreshes itself
        job_id = uuid.UUID(job_url.rsplit("/", 1)[1])
        await run_import_pass(pool, ImportOptions(), datetime.now(UTC), job_id=job_id)
        await page.wait_for_selector("#import-state:has-text('Completed with refused rows')")
    else:  # no JavaScript: Refresh shows the same state, Resume runs the batches now
        async with page.expect_navigation():
            await page.click("#import-progress a:has-text('Refresh')")
        assert await page.inner_text("#import-state") == "Queued"
        async with page.expect_navigation():
            await page.click("button:has-text('Resume now')")
        assert "done=import_resumed" in page.url
    assert await page.inner_text("#import-state") == "Completed with refused rows"
    assert await page.get_attribute("#import-progress", "data-poll") is None
    text = await studio.shot(page, f"import-result-{suffix(size, js)}")
    assert "2 rows marked, 3 rows refused, 1 already marked" in text
    assert "is queued" not in text  # the creation's notice does not outlive the queue
    console = [await counter(page, k) for k in ("processed", "marked", "already", "errors")]
    assert console == [6, 2, 1, 3]
    assert await table_errors(page) == ROW_ERRORS
    # parity: the same CSV (the twins' barcodes) through the API
    headers = {"content-type": "text/csv", "idempotency-key": "parity"}
    made = await admin.post(
        f"/admin/events/{ev['id']}/attendance-imports", content=twins.encode(), headers=headers
    )
    assert made.status_code == 202, made.text
    job = (await admin.post(f"/admin/attendance-imports/{made.json()['id']}/resume")).json()
    assert [job[k] for k in ("processed", "marked", "already_marked", "error_count")] == console
    assert [(e["row"], e["code"]) for e in job["errors"]] == ROW_ERRORS
    # the event's page lists the import with its counters
    await page.goto(studio.url(f"/events/{ev['id']}/attendance"))
    listed = page.locator("table.stack tbody tr")
    assert await listed.count() == 2
    assert "Completed with refused rows" in await listed.first.inner_text()


async def console_job(studio: Any, page: Page, event_id: str, csv_text: str) -> str:
    """Start an import through the console's paste field; the job page's URL."""
    await page.goto(studio.url(f"/events/{event_id}/attendance"))
    await page.fill("#field-csv_text", csv_text)
    async with page.expect_navigation():
        await page.click("button:has-text('Start import')")
    return page.url.split("?")[0]


async def open_rows(admin: httpx.AsyncClient, event_id: str, n: int) -> str:
    guests = [await attendee(admin, event_id) for _ in range(n)]
    return "barcode\n" + "".join(f"{g['barcode']}\n" for g in guests)


@pytest.mark.parametrize(("size", "js"), [("desktop", True), ("phone", False)])
async def test_cancel_and_resume_refusals_equal_the_apis(studio, admin, pool, size, js):
    ev = await make_event(admin)
    page = await studio.open("attendance:write", size=size, js=js)
    job_url = await console_job(studio, page, ev["id"], await open_rows(admin, ev["id"], 4))
    job_id = uuid.UUID(job_url.rsplit("/", 1)[1])
    headers = {"content-type": "text/csv", "idempotency-key": "twin"}
    body = (await open_rows(admin, ev["id"], 4)).encode()
    twin = (
        await admin.post(
            f"/admin/events/{ev['id']}/attendance-imports", content=body, headers=headers
        )
    ).json()
    # one batch of 2 rows each, then cancel: processed rows keep their outcome
    for ident in (job_id, uuid.UUID(twin["id"])):
        await run_import_pass(pool, ImportOptions(batch=2, cap=1), datetime.now(UTC), job_id=ident)
    await page.goto(job_url)
    async with page.expect_navigation():
        await page.click("button:has-text('Cancel import')")
    assert "done=import_cancelled" in page.url
    assert await page.inner_text("#import-state") == "Cancelled"
    assert await page.locator("button:has-text('Resume now')").count() == 0
    await studio.shot(page, f"import-cancelled-{suffix(size, js)}")
    api_job = (await admin.post(f"/admin/attendance-imports/{twin['id']}/cancel")).json()
    assert api_job["state"] == "cancelled"
    keys = ("processed", "marked", "error_count")
    ours = [await counter(page, k) for k in ("processed", "marked", "errors")]
    assert ours == [api_job[k] for k in keys] == [2, 2, 0]
    # a stale page: the job was cancelled elsewhere after the page was opened
    stale_url = await console_job(studio, page, ev["id"], "barcode\n1\n")
    await admin.post(f"/admin/attendance-imports/{stale_url.rsplit('/', 1)[1]}/cancel")
    async with page.expect_navigation():
        await page.click("button:has-text('Resume now')")
    summary = await page.inner_text("#error-summary")
    assert "import_finished" in summary
    await studio.shot(page, f"import-refused-{suffix(size, js)}")
    status, code = await api_status(admin, "POST", f"/admin/attendance-imports/{twin['id']}/resume")
    assert (status, code) == (409, "import_finished")


# --- bounds, replays and scopes over plain HTTP ------------------------------------------


@asynccontextmanager
async def signed_in(app: Any, api: Any, *scopes: str) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the console, signed in with a fresh token of `scopes`."""
    headers = await api.token(*scopes)
    token = headers["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        csrf = hidden(await c.get("/sign-in"), "csrf_token")
        signed = await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        assert signed.status_code == 303
        yield c


def hidden(page: httpx.Response, name: str) -> str:
    marker = f'name="{name}" value="'
    start = page.text.index(marker) + len(marker)
    return page.text[start : page.text.index('"', start)]


async def test_a_double_submit_makes_one_job(app, api, admin):
    ev = await make_event(admin)
    rows = await open_rows(admin, ev["id"], 2)
    async with signed_in(app, api, "attendance:write") as c:
        form = await c.get(f"/events/{ev['id']}/attendance")
        data = {
            "csrf_token": hidden(form, "csrf_token"),
            "idempotency_key": hidden(form, "idempotency_key"),
            "csv_text": rows,
        }
        first = await c.post(f"/events/{ev['id']}/attendance", data=data)
        second = await c.post(f"/events/{ev['id']}/attendance", data=data)
        again = await c.get(f"/events/{ev['id']}/attendance")
    assert first.status_code == second.status_code == 303
    assert first.headers["location"].endswith("done=import_started")
    assert second.headers["location"].endswith("done=import_replayed")
    assert first.headers["location"].split("?")[0] == second.headers["location"].split("?")[0]
    assert hidden(again, "idempotency_key") != data["idempotency_key"]  # fresh per render
    count = await api.pool.fetchval("SELECT count(*) FROM event.attendance_imports")
    assert count == 1


async def test_bodies_over_the_apis_bounds_are_its_413(app, api, admin):
    ev = await make_event(admin)
    path = f"/admin/events/{ev['id']}/attendance-imports"
    too_many = "barcode\n" + "1\n" * (MAX_IMPORT_ROWS + 1)
    too_big = b"barcode\n" + b"1" * (MAX_IMPORT_BYTES - 8 + 1)
    async with signed_in(app, api, "attendance:write") as c:
        for body in (too_many.encode(), too_big):
            form = await c.get(f"/events/{ev['id']}/attendance")
            data = {"csrf_token": hidden(form, "csrf_token"), "idempotency_key": "k"}
            files = {"csv_file": ("scans.csv", body, "text/csv")}
            answer = await c.post(f"/events/{ev['id']}/attendance", data=data, files=files)
            assert answer.status_code == 413
            assert "payload_too_large" in answer.text and 'href="#field-csv_file"' in answer.text
            headers = {"content-type": "text/csv", "idempotency-key": "k"}
            status, code = await api_status(admin, "POST", path, content=body, headers=headers)
            assert (status, code) == (413, "payload_too_large")
        form = await c.get(f"/events/{ev['id']}/attendance")
        data = {"csrf_token": hidden(form, "csrf_token"), "idempotency_key": "k"}
        answer = await c.post(f"/events/{ev['id']}/attendance", data={**data, "csv_text": "x\n1"})
        assert answer.status_code == 422 and "import_header_invalid" in answer.text
        assert 'href="#field-csv_text"' in answer.text
    headers = {"content-type": "text/csv", "idempotency-key": "h"}
    refused = await api_status(admin, "POST", path, content=b"x\n1", headers=headers)
    assert refused == (422, "import_header_invalid")
    assert await api.pool.fetchval("SELECT count(*) FROM event.attendance_imports") == 0


@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_a_token_without_the_scope_sees_the_403_naming_it(studio, api, admin, size):
    ev = await make_event(admin)
    job = await admin.post(
        f"/admin/events/{ev['id']}/attendance-imports",
        content=b"barcode\n1\n",
        headers={"content-type": "text/csv", "idempotency-key": "d"},
    )
    page = await studio.open("event:read", "registration:read", size=size)
    for path, scope in (
        (f"/events/{ev['id']}/attendance", "attendance:write"),
        (f"/attendance-imports/{job.json()['id']}", "attendance:write"),
        (f"/desk?event_id={ev['id']}", "desk:scan"),
    ):
        answer = await page.goto(studio.url(path))
        assert answer is not None and answer.status == 403
        text = await page.inner_text("main")
        assert scope in text and "missing_scope" in text
    await page.goto(studio.url(f"/events/{ev['id']}/attendance"))
    await studio.shot(page, f"import-denied-{size}")
    headers = await api.token("event:read", "registration:read")
    path = f"/admin/events/{ev['id']}/attendance-imports"
    sent = {**headers, "content-type": "text/csv", "idempotency-key": "e"}
    denied = await api_status(api.client, "POST", path, content=b"barcode\n1\n", headers=sent)
    assert denied == (403, "missing_scope")
    scan = {"event_id": ev["id"], "barcode": "1"}
    denied = await api_status(api.client, "POST", "/admin/desk/scan", json=scan, headers=headers)
    assert denied == (403, "missing_scope")
