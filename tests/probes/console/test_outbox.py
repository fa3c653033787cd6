"""The console's outbox page: the delivery states with the API's filters and counts, and
a retry button that calls the same verb as POST /admin/outbox/{id}/retry."""

from __future__ import annotations

import re
import uuid

import asyncpg
import httpx

from events_svc.settings import Settings
from tests.probes.console.kit import code_of, console_of
from tests.probes.delivery.helpers import drainer, queue_mail, relay_settings
from tests.probes.delivery.sink import smtp_sink
from tests.probes.helpers import Api, make_event


async def _failed_and_sent(
    pool: asyncpg.Pool, settings: Settings, admin: httpx.AsyncClient
) -> tuple[str, dict[str, str]]:
    event = await make_event(admin)
    await queue_mail(pool, 2, recipient="grace{i}@example.org", event_id=uuid.UUID(event["id"]))
    with smtp_sink() as (sink, port):
        sink.script = ["250", "550 5.1.1 no such user"]
        await drainer(pool, relay_settings(settings, port)).drain()
    listed = (await admin.get("/admin/outbox", params={"event_id": event["id"]})).json()
    return event["id"], {m["delivery_state"]: m["id"] for m in listed["items"]}


async def test_the_page_filters_by_state_and_retries_a_failed_message(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
):
    event_id, ids = await _failed_and_sent(pool, settings, admin)
    async with console_of(api, "event:read", "registration:read", "scheduler:run") as (c, csrf):
        page = await c.get("/outbox", params={"event_id": event_id})
        assert page.status_code == 200
        assert f'id="message-{ids["sent"]}"' in page.text
        assert f'id="message-{ids["failed"]}"' in page.text
        assert "The relay refused the message (550)" in page.text
        assert "grace1@example.org" not in page.text  # masked
        # the counts link to their state; the filter keeps one state
        assert re.search(r"Failed</span> 1</a>", page.text)
        failed_only = await c.get(
            "/outbox", params={"event_id": event_id, "delivery_state": "failed"}
        )
        assert f'id="message-{ids["sent"]}"' not in failed_only.text
        assert f"/outbox/{ids['failed']}/retry" in failed_only.text  # a retry button
        bad = await c.get("/outbox", params={"delivery_state": "lost"})
        assert bad.status_code == 422 and 'href="#field-delivery_state"' in bad.text

        done = await c.post(
            f"/outbox/{ids['failed']}/retry",
            data={"csrf_token": csrf, "event_id": event_id, "delivery_state": "failed"},
        )
        assert done.status_code == 303
        assert done.headers["location"] == (
            f"/studio/outbox?event_id={event_id}&delivery_state=failed&done=outbox_retried"
        )
        message = (await admin.get("/admin/outbox", params={"delivery_state": "queued"})).json()
        assert ids["failed"] in {m["id"] for m in message["items"]}
        # again: the API's refusal and code, on the page with the filters kept
        again = await c.post(
            f"/outbox/{ids['failed']}/retry", data={"csrf_token": csrf, "event_id": event_id}
        )
        assert again.status_code == 409 and "outbox_message_not_retryable" in code_of(again.text)
        forged = await c.post(f"/outbox/{ids['sent']}/retry", data={"csrf_token": "forged"})
        assert forged.status_code == 403


async def test_without_scheduler_run_there_is_no_retry_button_and_no_retry(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
):
    event_id, ids = await _failed_and_sent(pool, settings, admin)
    async with console_of(api, "registration:read") as (c, csrf):
        page = await c.get("/outbox", params={"delivery_state": "failed"})
        assert page.status_code == 200 and f'id="message-{ids["failed"]}"' in page.text
        assert "/retry" not in page.text
        refused = await c.post(f"/outbox/{ids['failed']}/retry", data={"csrf_token": csrf})
        assert refused.status_code == 403 and "scheduler:run" in refused.text
    listed = await admin.get("/admin/outbox", params={"event_id": event_id})
    assert {m["delivery_state"] for m in listed.json()["items"]} == {"sent", "failed"}
