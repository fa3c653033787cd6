"""The waiting-list section of the console's event page: the event's settings (with the
mail templates an offer may use), its entries in queue order, masked, and the values of
its forms. The forms' routes are `waitlist.py`'s.

It reads through the verbs of `routes/waitlist.py`: `get_settings` (GET
/admin/events/{id}/waitlist-settings), `list_entries` (GET /admin/events/{id}/waitlist)
in its masked mode only, and `list_templates` (GET /admin/templates) for the template
choice. A full read of names and emails stays an audited API read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from pydantic import ValidationError

from events_svc.actors import Actor
from events_svc.console.web import FieldError, Form, query_text, validation_errors
from events_svc.documents import when
from events_svc.routes.deps import ServiceContext
from events_svc.verbs import waitlist as verbs
from events_svc.verbs.mail import templates

PAGE_SIZE = 50
TEMPLATE_CHOICES = 200  # the templates list verb's largest page
BUILT_IN = "Built-in text"
STATUSES = {
    "waiting": ("Waiting", "info"),
    "offered": ("Offered", "warn"),
    "accepted": ("Accepted", "good"),
    "declined": ("Declined", "bad"),
    "expired": ("Expired", "bad"),
    "removed": ("Removed", "bad"),
}
REMOVABLE = frozenset({"waiting", "offered"})
# the settings form's refusals in words (the model's own messages name no range)
FIELD_WORDS = {
    "offer_hours": "Enter a whole number of hours from 1 to 336.",
    "offer_template_id": "Choose a template of the list.",
}


@dataclass(frozen=True)
class ListQuery:
    """The list's status filter and page, from the event page's query string or from the
    hidden fields of an entry's form (`problems` when the status is not a choice)."""

    status: str | None
    cursor: str | None
    problems: list[FieldError]

    def kept(self) -> dict[str, str]:
        """What an entry's form carries back to the same view of the list."""
        kept = {"waitlist_status": self.status, "waitlist_cursor": self.cursor}
        return {k: v for k, v in kept.items() if v is not None}


def list_query(values: Mapping[str, str]) -> ListQuery:
    status = query_text(values, "waitlist_status", 20)
    problems: list[FieldError] = []
    if status is not None and status not in STATUSES:
        problems.append(FieldError("Choose a status.", "validation_failed", "waitlist_status"))
        status = None
    return ListQuery(status, query_text(values, "waitlist_cursor", 512), problems)


def event_of(form: Form) -> UUID | None:
    """The event page an entry's form was sent from (its hidden `event_id`)."""
    try:
        return UUID(form.text("event_id"))
    except ValueError:
        return None


def settings_values(form: Form) -> dict[str, Any]:
    """The settings form as the fields of the PUT body (no template: the built-in text)."""
    return {
        "enabled": form.values.get("enabled") == "1",
        "offer_hours": form.values.get("offer_hours", ""),  # a whole number: as typed
        "offer_template_id": form.optional("offer_template_id"),
    }


def settings_problems(exc: ValidationError) -> list[FieldError]:
    """The body model's refusal of the settings form, in words, linked to its fields."""
    return [
        FieldError(FIELD_WORDS.get(p.field or "", p.message), p.code, p.field)
        for p in validation_errors(exc)
    ]


def entry_row(
    entry: Mapping[str, Any], tickets: Mapping[UUID, str], slots: Mapping[UUID, str], tz: str
) -> dict[str, Any]:
    """An entry as the masked list answers it (name and email masked by the verb)."""
    status = entry["status"]
    ticket, slot = entry["event_ticket_id"], entry["event_slot_id"]
    return {
        "id": entry["id"],
        "status": STATUSES.get(status, (status, "info")),
        "position": entry["position"],
        "seats": entry["seats"],
        "ticket": tickets.get(ticket, "A ticket") if ticket else "—",
        "slot": slots.get(slot, "A slot") if slot else "—",
        "name": entry["name"],
        "email": entry["email"],
        "joined": when(entry["created_at"], tz),
        "deadline": when(entry["offer_expires_at"], tz) if status == "offered" else None,
        "can_offer": status == "waiting",
        "can_remove": status in REMOVABLE,
    }


async def section(
    ctx: ServiceContext,
    actor: Actor,
    event: Mapping[str, Any],
    tickets: Mapping[UUID, str],
    slots: Mapping[UUID, str],
    query: ListQuery,
    typed: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The section's context, or None without `event:read` (the settings' scope): the
    settings, the settings form (`event:write`; `typed` keeps a refused form's values),
    and one page of entries (`registration:read`) with their buttons
    (`registration:write`)."""
    if not actor.has("event:read"):
        return None
    event_id = event["id"]
    settings = await verbs.get_settings(ctx.db(), actor, event_id)
    listed = await templates.list_templates(
        ctx.db(), actor, links_unavailable=ctx.links.unavailable, limit=TEMPLATE_CHOICES
    )
    mail = [(str(t["id"]), t["name"]) for t in listed["items"] if t["kind"] == "mail"]
    current = settings["offer_template_id"]
    if current is not None and all(value != str(current) for value, _ in mail):
        mail.insert(0, (str(current), "The template chosen now"))
    template = dict(mail).get(str(current), "") if current is not None else BUILT_IN
    form = {
        "enabled": settings["enabled"],
        "offer_hours": str(settings["offer_hours"]),
        "offer_template_id": str(current) if current is not None else "",
    }
    if typed is not None:
        form = {k: "" if typed[k] is None else typed[k] for k in form}
    rows: list[dict[str, Any]] = []
    next_query: dict[str, str] | None = None
    can_list = actor.has("registration:read")
    if can_list and not query.problems:
        listing = await verbs.list_entries(
            ctx.db(),
            actor,
            event_id,
            status=query.status,
            cursor=query.cursor,
            limit=PAGE_SIZE,
            pii_full=False,
        )
        rows = [entry_row(e, tickets, slots, event["date_tz"]) for e in listing["items"]]
        if listing["next_cursor"]:
            next_query = {**query.kept(), "waitlist_cursor": listing["next_cursor"]}
    first = {"waitlist_status": query.status} if query.status else {}
    return {
        "settings": settings,
        "template": template,
        "form": form,
        "templates": [("", BUILT_IN), *mail],
        "can_write": actor.has("event:write"),
        "can_list": can_list,
        "can_act": can_list and actor.has("registration:write"),
        "statuses": [("", "Every status"), *((k, v[0]) for k, v in STATUSES.items())],
        "query": query,
        "kept": query.kept(),
        "rows": rows,
        "next_query": next_query,
        "first_query": first,
        "paged": query.cursor is not None,
    }
