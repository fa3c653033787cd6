"""The console's export (columns → preview → confirm → download) and event operations
(kind → preview → confirm → progress → result) in a real browser at 1440x900 and 390x844,
with JavaScript on and off, each held to the admin API: the same CSV, the same audience
and triggers, the same refusal codes (a reused confirmation, a stale start, a finished
operation, a missing scope)."""

from __future__ import annotations

import asyncio
import csv
import io
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Page

from events_svc.verbs.operations import OperationOptions, run_operation_pass
from tests.probes.console.kit import api_status
from tests.probes.helpers import (
    BASE,
    MOVED,
    Api,
    finish,
    make_event,
    preview,
    seed,
    start,
    trigger_rows,
)

# each flow at both sizes, with JavaScript on and off
EXPORT_FLOWS = [("desktop", True), ("phone", True), ("desktop", False), ("phone", False)]
OPERATION_FLOWS = [("desktop", True), ("phone", True), ("desktop", False), ("phone", False)]
SIZES = ["desktop", "phone"]
# the defaults the choose page checks, in file order
DEFAULT_COLUMNS = ["id", "name", "email", "state", "ticket", "barcode", "created_at"]


def shot_name(area: str, size: str, js: bool) -> str:
    return f"{area}-{size}" + ("" if js else "-nojs")


async def client_of(api: Api, *scopes: str) -> httpx.AsyncClient:
    """An admin API client with a token of `scopes`."""
    headers = await api.token(*scopes)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=BASE, headers=headers
    )


@asynccontextmanager
async def console_of(api: Api, *scopes: str) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A console client signed in with a token of `scopes`, and its CSRF token."""
    transport = httpx.ASGITransport(app=api.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test/studio") as c:
        token = (await api.token(*scopes))["Authorization"].removeprefix("Bearer ")
        csrf = await csrf_of(c, "/sign-in")
        signed = await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        assert signed.status_code == 303
        yield c, await csrf_of(c, "/sign-in")


async def csrf_of(c: httpx.AsyncClient, path: str) -> str:
    text = (await c.get(path)).text
    return hidden(text, "csrf_token")


def hidden(text: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', text)
    assert found, name
    return found.group(1)


def code_of(text: str) -> list[str]:
    """The codes a console page shows (error page status line or error summary)."""
    return re.findall(r"<code>([a-z_]+)</code>", text)


async def submit(page: Page, label: str) -> int:
    """Click the submit button named `label`; the status of the page it leads to."""
    async with page.expect_navigation() as nav:
        await page.get_by_role("button", name=label).click()
    response = await nav.value
    assert response is not None
    return response.status


# --- export ----------------------------------------------------------------------------


async def api_export(api: Api, event_id: str, columns: list[str]) -> tuple[str, str]:
    """The API's preview and download of `columns` (a masked token); the CSV and the
    confirmation it used."""
    async with await client_of(api, "registration:export") as c:
        r = await c.post(f"/admin/events/{event_id}/exports/preview", json={"columns": columns})
        assert r.status_code == 200, r.text
        token = r.json()["confirmation_token"]
        csv_answer = await c.post(
            f"/admin/events/{event_id}/exports", json={"confirmation_token": token}
        )
        assert csv_answer.status_code == 200
        return csv_answer.text, token


def rows_of(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.mark.parametrize(("size", "js"), EXPORT_FLOWS)
async def test_export_preview_confirm_download_equals_the_api(
    studio: Any, api: Api, admin: httpx.AsyncClient, size: str, js: bool
) -> None:
    event = await make_event(admin)
    await seed(api, event["id"], 3)
    page = await studio.open("registration:export", size=size, js=js)
    await page.goto(studio.url(f"/events/{event['id']}/export"))
    checked = await page.locator("input[name=columns]:checked").evaluate_all(
        "els => els.map(e => e.value)"
    )
    assert checked == DEFAULT_COLUMNS
    assert "Email (masked)" in await page.inner_text("#field-columns")
    await studio.shot(page, shot_name("export-choose", size, js))

    await page.check("#field-columns-phone")
    assert await submit(page, "Preview the export") == 200
    assert await page.inner_text("#exp-row-count") == "3"
    assert "Expires at" in await page.inner_text("main")
    await studio.shot(page, shot_name("export-preview", size, js))

    async with page.expect_download() as info:
        await page.get_by_role("button", name="Confirm and download the CSV").click()
    download = await info.value
    assert download.suggested_filename.endswith(".csv")
    got = await asyncio.to_thread(Path(await download.path()).read_text)
    rows = rows_of(got)
    studio.secrets.update(line for line in got.splitlines()[1:] if line)
    assert rows[0] == [*DEFAULT_COLUMNS[:3], "phone", *DEFAULT_COLUMNS[3:]]
    expected, used = await api_export(api, event["id"], rows[0])
    assert rows == rows_of(expected)  # header, row count, masked values: the same file
    assert len(rows) == 4
    assert sorted(r[2] for r in rows[1:]) == ["g***@example.org"] * 3  # masked
    await studio.shot(page, shot_name("export-done", size, js))

    # the confirmation is single use: the same form again is the API's 409
    assert await submit(page, "Confirm and download the CSV") == 409
    assert "export_confirmation_invalid" in await page.inner_text("main")
    await studio.shot(page, shot_name("export-reused", size, js))
    async with await client_of(api, "registration:export") as c:
        path = f"/admin/events/{event['id']}/exports"
        again = await api_status(c, "POST", path, json={"confirmation_token": used})
    assert again == (409, "export_confirmation_invalid")


async def test_export_refusals_carry_the_api_codes(api: Api, admin: httpx.AsyncClient) -> None:
    event = await make_event(admin)
    path = f"/events/{event['id']}/export/preview"
    async with (
        console_of(api, "registration:export") as (c, csrf),
        await client_of(api, "registration:export") as a,
    ):
        api_path = f"/admin/events/{event['id']}/exports/preview"
        for columns, code in (
            (["id", "id"], "export_column_duplicate"),
            (["id", "nope"], "export_column_unknown"),
        ):
            page = await c.post(path, data={"csrf_token": csrf, "columns": columns})
            assert page.status_code == 422 and code in code_of(page.text)
            assert 'href="#field-columns"' in page.text  # the summary links the group
            assert await api_status(a, "POST", api_path, json={"columns": columns}) == (422, code)
        none = await c.post(path, data={"csrf_token": csrf})
        assert none.status_code == 422 and 'href="#field-columns"' in none.text
        assert (await api_status(a, "POST", api_path, json={"columns": []}))[0] == 422
        blank = await c.post(f"/events/{event['id']}/export", data={"csrf_token": csrf})
        assert blank.status_code == 422
        # an unknown event is 404 in both
        gone = "/events/00000000-0000-4000-8000-000000000000/export"
        assert (await c.get(gone)).status_code == 404


# --- event operations ------------------------------------------------------------------


async def api_operation_result(api: Api, admin: httpx.AsyncClient) -> dict[str, Any]:
    """The same reschedule on a twin event through the admin API, run to its end."""
    twin = await make_event(admin)
    await seed(api, twin["id"], 5, base=1000)
    return await finish(admin, await start(admin, await preview(admin, twin["id"])))


@pytest.mark.parametrize(("size", "js"), OPERATION_FLOWS)
async def test_operation_preview_confirm_progress_result_matches_the_api(
    studio: Any, api: Api, admin: httpx.AsyncClient, size: str, js: bool
) -> None:
    event = await make_event(admin)
    await seed(api, event["id"], 5)
    estimate = (await preview(admin, event["id"]))["audience_estimate"]
    page = await studio.open("event:operate", size=size, js=js)
    await page.goto(studio.url(f"/events/{event['id']}/operations"))
    assert await page.input_value("[id='field-params.date_tz']") == "Europe/Lisbon"
    await studio.shot(page, shot_name("operation-new", size, js))

    await page.select_option("#field-kind", "reschedule")
    # Lisbon is UTC+1 in June: MOVED's 09:00 and 18:00 UTC
    await page.fill("[id='field-params.date_begin']", "2027-06-10T10:00")
    await page.fill("[id='field-params.date_end']", "2027-06-12T19:00")
    assert await submit(page, "Preview the operation") == 200
    assert "done=operation_previewed" in page.url
    op_id = page.url.split("/operations/")[1].split("?")[0]
    view = (await admin.get(f"/admin/operations/{op_id}")).json()
    assert view["state"] == "previewed" and view["kind"] == "reschedule"
    for name in ("date_begin", "date_end"):
        assert datetime.fromisoformat(view["params"][name]) == datetime.fromisoformat(MOVED[name])
    assert await page.inner_text("#ops-audience-estimate") == str(estimate) == "5"
    await studio.shot(page, shot_name("operation-preview", size, js))

    assert await submit(page, "Confirm and start") == 200
    assert "done=operation_started" in page.url
    await run_operation_pass(
        api.pool, OperationOptions(batch=2, cap=1), datetime.now(UTC), operation_id=op_id
    )
    await page.reload()
    assert await page.locator("#operation-progress[data-poll]").count() == 1
    assert "2 of 5 processed" in await page.inner_text("#operation-progress")
    await studio.shot(page, shot_name("operation-progress", size, js))

    if js:  # the page follows the remaining batches by itself (studio.js polls)
        options = OperationOptions(batch=1000, cap=100)
        await run_operation_pass(api.pool, options, datetime.now(UTC), operation_id=op_id)
        await page.wait_for_function(
            "() => !document.querySelector('#operation-progress[data-poll]')"
            " && document.querySelector('#operation-progress').innerText.includes('Completed')"
        )
        await page.wait_for_load_state()
    else:  # without JavaScript, the operator resumes (or reloads) by hand
        assert await submit(page, "Resume now") == 200
        assert "done=operation_resumed" in page.url
    assert await page.locator("#operation-progress[data-poll]").count() == 0
    assert "Completed" in await page.inner_text("#operation-progress")
    assert await page.inner_text("#ops-triggers") == "5"
    await studio.shot(page, shot_name("operation-result", size, js))
    done = (await admin.get(f"/admin/operations/{op_id}")).json()
    twin = await api_operation_result(api, admin)
    for key in ("state", "audience", "triggers_created", "skipped_inactive", "error_count"):
        assert done[key] == twin[key], key
    assert len(await trigger_rows(api.pool, op_id)) == done["audience"] == 5


@pytest.mark.parametrize("size", SIZES)
async def test_a_stale_start_is_the_apis_412(
    studio: Any, api: Api, admin: httpx.AsyncClient, size: str
) -> None:
    event = await make_event(admin)
    await seed(api, event["id"], 2)
    op = await preview(admin, event["id"])
    page = await studio.open("event:operate", size=size)
    await page.goto(studio.url(f"/operations/{op['id']}"))
    moved = await admin.patch(f"/admin/events/{event['id']}", json={"name": "Renamed"})
    assert moved.status_code == 200 and moved.json()["revision"] > op["revision"]

    assert await submit(page, "Confirm and start") == 412
    text = await page.inner_text("main")
    assert "stale_revision" in text and "changed since you opened it" in text
    await studio.shot(page, f"operation-stale-{size}")
    path = f"/admin/operations/{op['id']}/start"
    old = {"If-Match": f'"{op["revision"]}"'}
    assert await api_status(admin, "POST", path, headers=old) == (412, "stale_revision")
    assert (await admin.get(f"/admin/operations/{op['id']}")).json()["state"] == "previewed"


@pytest.mark.parametrize(("size", "js"), [("desktop", True), ("phone", False)])
async def test_cancel_through_the_console_keeps_written_triggers(
    studio: Any, api: Api, admin: httpx.AsyncClient, size: str, js: bool
) -> None:
    event = await make_event(admin)
    await seed(api, event["id"], 4)
    op = await start(admin, await preview(admin, event["id"], "reminder"))
    await run_operation_pass(
        api.pool, OperationOptions(batch=1, cap=1), datetime.now(UTC), operation_id=op["id"]
    )
    page = await studio.open("event:operate", size=size, js=js)
    await page.goto(studio.url(f"/operations/{op['id']}"))
    assert "1 of 4 processed" in await page.inner_text("#operation-progress")
    assert await submit(page, "Cancel the operation") == 200
    assert "done=operation_cancelled" in page.url
    assert "Cancelled" in await page.inner_text("#operation-progress")
    assert await page.get_by_role("button", name="Resume now").count() == 0
    await studio.shot(page, shot_name("operation-cancelled", size, js))
    view = (await admin.get(f"/admin/operations/{op['id']}")).json()
    assert (view["state"], view["triggers_created"]) == ("cancelled", 1)
    assert len(await trigger_rows(api.pool, op["id"])) == 1


async def test_operation_refusals_carry_the_api_codes(api: Api, admin: httpx.AsyncClient) -> None:
    event = await make_event(admin)
    await seed(api, event["id"], 1)
    running = await start(admin, await preview(admin, event["id"], "reminder"))
    async with console_of(api, "event:operate") as (c, csrf):
        ops = f"/operations/{running['id']}"
        rev = str(running["revision"])
        again = await c.post(f"{ops}/start", data={"csrf_token": csrf, "revision": rev})
        assert again.status_code == 409 and "operation_already_started" in code_of(again.text)
        api_again = await api_status(admin, "POST", f"/admin{ops}/start", headers={"If-Match": rev})
        assert api_again == (409, "operation_already_started")
        # another reminder while this one runs
        second = await preview(admin, event["id"], "reminder")
        data = {"csrf_token": csrf, "revision": str(second["revision"])}
        busy = await c.post(f"/operations/{second['id']}/start", data=data)
        assert busy.status_code == 409 and "operation_in_progress" in code_of(busy.text)
        # without the previewed revision: the API's 428
        bare = await c.post(f"/operations/{second['id']}/start", data={"csrf_token": csrf})
        assert bare.status_code == 428 and "precondition_required" in code_of(bare.text)
        no_match = await api_status(admin, "POST", f"/admin/operations/{second['id']}/start")
        assert no_match == (428, "precondition_required")
        await finish(admin, running)
        done = await c.post(f"{ops}/resume", data={"csrf_token": csrf})
        assert done.status_code == 409 and "operation_finished" in code_of(done.text)
        assert await api_status(admin, "POST", f"/admin{ops}/resume") == (
            409,
            "operation_finished",
        )
        # the form's validation: the model's errors, linked to the fields
        form = {"csrf_token": csrf, "kind": "reschedule", "params.date_begin": "2027-06-12T10:00"}
        bad = await c.post(f"/events/{event['id']}/operations", data=form)
        assert bad.status_code == 422
        assert 'href="#field-params.date_end"' in bad.text
        order = {**form, "params.date_end": "2027-06-10T10:00"}
        backwards = await c.post(f"/events/{event['id']}/operations", data=order)
        assert backwards.status_code == 422 and 'href="#field-params.date_end"' in backwards.text
        body = {"kind": "reschedule", "params": {**MOVED, "date_end": "2027-06-01T00:00:00Z"}}
        create = f"/admin/events/{event['id']}/operations"
        api_order = await api_status(admin, "POST", create, json=body)
        assert api_order[0] == 422 and api_order[1] in code_of(backwards.text)


@pytest.mark.parametrize("size", SIZES)
async def test_without_event_operate_the_page_names_the_scope(
    studio: Any, api: Api, admin: httpx.AsyncClient, size: str
) -> None:
    event = await make_event(admin)
    page = await studio.open("event:read", "registration:read", size=size)
    answer = await page.goto(studio.url(f"/events/{event['id']}/operations"))
    assert answer is not None and answer.status == 403
    text = await page.inner_text("main")
    assert "event:operate" in text and "missing_scope" in text
    await studio.shot(page, f"operation-denied-{size}")
    export = await page.goto(studio.url(f"/events/{event['id']}/export"))
    assert export is not None and export.status == 403
    assert "registration:export" in await page.inner_text("main")
    async with await client_of(api, "event:read", "registration:read") as c:
        path = f"/admin/events/{event['id']}/operations"
        body = {"kind": "reminder", "params": {"audience_cutoff": "2026-01-01T00:00:00Z"}}
        assert await api_status(c, "POST", path, json=body) == (403, "missing_scope")
        exp = f"/admin/events/{event['id']}/exports/preview"
        assert await api_status(c, "POST", exp, json={"columns": ["id"]}) == (403, "missing_scope")
