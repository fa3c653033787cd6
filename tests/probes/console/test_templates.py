"""The console's template pages call the template verbs: create and edit (with the mail's
tickets PDF box), the API's refusals beside the form with the values kept, the scope."""

from __future__ import annotations

import httpx

from tests.probes.console.kit import code_of, console_of
from tests.probes.helpers import Api


async def test_create_and_edit_a_template_with_its_tickets_box(api: Api, admin: httpx.AsyncClient):
    async with console_of(api, "event:read", "template:write") as (c, csrf):
        page = await c.get("/templates")
        assert page.status_code == 200 and "Attach the attendee" in page.text
        made = await c.post(
            "/templates",
            data={
                "csrf_token": csrf,
                "kind": "mail",
                "name": "Your ticket",
                "subject": "Ticket for {{ event.name }}",
                "body": "Hello {{ registration.name }}",
                "attach_tickets": "1",
            },
        )
        assert made.status_code == 303
        template_id = made.headers["location"].split("/templates/")[1].split("?")[0]
        stored = (await admin.get(f"/admin/templates/{template_id}")).json()
        assert stored["attach_tickets"] is True and stored["name"] == "Your ticket"

        edited = await c.post(  # the box unticked: no tickets any more
            f"/templates/{template_id}",
            data={"csrf_token": csrf, "name": "Your ticket", "subject": "S", "body": "Hi"},
        )
        assert edited.status_code == 303
        assert (await admin.get(f"/admin/templates/{template_id}")).json()[
            "attach_tickets"
        ] is False

        broken = await c.post(
            f"/templates/{template_id}",
            data={"csrf_token": csrf, "name": "Your ticket", "body": "{{ registration.nope }}"},
        )
        assert broken.status_code == 422
        assert "template_variable_unknown" in code_of(broken.text)
        assert "registration.nope" in broken.text  # the value kept in the form
        sms = await c.post(
            "/templates",
            data={
                "csrf_token": csrf,
                "kind": "sms",
                "name": "T",
                "body": "Hi",
                "attach_tickets": "1",
            },
        )
        assert sms.status_code == 422 and "field_not_writable" in code_of(sms.text)

    async with console_of(api, "event:read") as (c, csrf):
        page = await c.get(f"/templates/{template_id}")
        assert page.status_code == 200 and "Save" not in page.text
        refused = await c.post(
            f"/templates/{template_id}", data={"csrf_token": csrf, "name": "X", "body": "Y"}
        )
        assert refused.status_code == 403 and "template:write" in refused.text
