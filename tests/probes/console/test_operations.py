"""The console's event operations (kind → preview → confirm → progress → result) in a real
browser at 1440x900 and 390x844, with JavaScript on and off, held to the admin API: the
same audience and triggers as a twin operation run through the API, the page following
the batches by itself (or resumed by hand), a cancel keeping the triggers already written,
and the same refusal codes (a stale start, a repeated or concurrent start, a missing
revision, a finished operation, a bad date range, a missing scope)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from events_svc.verbs.operations import OperationOptions, run_operation_pass
from tests.probes.console.kit import (
    RUNS,
    client_of,
    code_of,
    console_of,
    shot_name,
    submit,
)
from tests.probes.helpers import (
    MOVED,
    Api,
    api_status,
    finish,
    make_event,
    preview,
    seed,
    start,
    trigger_rows,
)

SIZES = ["desktop", "phone"]


async def api_operation_result(api: Api, admin: httpx.AsyncClient) -> dict[str, Any]:
    """The same reschedule on a twin event through the admin API, run to its end."""
    twin = await make_event(admin)
    await seed(api, twin["id"], 5, base=1000)
    return await finish(admin, await start(admin, await preview(admin, twin["id"])))


@pytest.mark.parametrize(("size", "js"), RUNS)
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
