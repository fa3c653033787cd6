"""The console's export (columns → preview → confirm → download) in a real browser at
1440x900 and 390x844, with JavaScript on and off, held to the admin API: the default and
added columns, the same CSV (header, rows, masked values) as the API's for the same
columns, a confirmation that works once (the API's 409 when reused), and the same refusal
codes for duplicate, unknown or missing columns and an unknown event."""

from __future__ import annotations

import asyncio
import csv
import io
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.probes.console.kit import (
    RUNS,
    client_of,
    code_of,
    console_of,
    shot_name,
    submit,
)
from tests.probes.helpers import Api, api_status, make_event, seed

# the defaults the choose page checks, in file order
DEFAULT_COLUMNS = ["id", "name", "email", "state", "ticket", "barcode", "created_at"]


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


@pytest.mark.parametrize(("size", "js"), RUNS)
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
