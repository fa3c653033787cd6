"""The OpenAPI probe: every operation of the real app's document, fuzzed with positive and
negative examples, answers without a server error, with a body that conforms to the
schema it declares and a content type it declares. The app is `create_app` with the
public intake mounted and a capability secret, on this test's database; schemathesis runs
it in its own event loop (where the lifespan opens the pool). The rows the `{id}` routes
reach are created through that same app first, and part of the examples take their path
parameters from them. `EVENTS_FUZZ_EXAMPLES` bounds the examples per operation (small in
the suite, 200 in `make fuzz`); generation is derandomized, so a run is reproducible.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from events_svc import create_app
from events_svc.adapters.standalone import standalone_ports
from events_svc.ports import PartnerContact, Ports
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token
from tests.probes.helpers import API, Directory, event_body

EXAMPLES = int(os.environ.get("EVENTS_FUZZ_EXAMPLES", "10"))
SECRET = "fuzz-secret-0123456789abcdef"
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
MODES = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]


@pytest.fixture
def settings_(settings: Settings) -> Settings:
    # generous windows: the public routes are fuzzed, not throttled (429 stays a valid answer)
    return dataclasses.replace(
        settings,
        capability_secrets=(SECRET,),
        intake_public=True,
        rate_limit_ip="100000/minute",
        rate_limit_capability="100000/minute",
        rate_limit_email="100000/hour",
        public_base_url="https://events.example.org",
    )


@pytest.fixture
async def bearer(pool: asyncpg.Pool) -> dict[str, str]:
    token, _ = await create_token(pool, "fuzz", ["*"], None, datetime.now(UTC))
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def schema(settings_: Settings) -> Iterator[Any]:
    """The app's own document, loaded through the app (which starts its lifespan)."""
    # a directory that knows every partner, so sync-from-partner runs for real
    partner = PartnerContact(name="Partner", email="partner@example.org", phone="+1 555 0100")
    ports = standalone_ports(Ports(partner_directory=Directory(partner)))
    app = create_app(settings_, ports, intake_public=True)

    async def resolve(host: str, port: int) -> list[str]:  # any name: a public address
        return ["93.184.216.34"]

    app.state.events.egress.resolver = resolve  # the guard runs, without the network
    loaded = schemathesis.openapi.from_asgi("/openapi.json", app)
    loaded.config.generation.update(allow_x00=True)  # NUL in text: the commands refuse it
    yield loaded
    asgi.shutdown_lifespans()  # closes the pool before the test database is dropped


class World:
    """Real rows for the path parameters, created through the fuzzed app itself."""

    def __init__(self, app: Any, auth: dict[str, str]) -> None:
        self.client = asgi.get_client(app)
        self.auth = auth
        self.ids: dict[str, str] = {}

    def post(self, path: str, body: Any, key: str | None = None, status: int = 201) -> Any:
        r = self.client.post(API + path, json=body, headers=self.auth)
        assert r.status_code == status, (path, r.text)
        answer = r.json()
        if key is not None:
            self.ids[key] = answer["id"]
        return answer

    def build(self) -> dict[str, str]:
        ids = self.ids
        self.post(
            "/admin/templates",
            {"name": "Reminder", "subject": "Hi", "body": "Hello {{ registration.name }}"},
            "template",
        )
        self.post("/admin/stages", {"name": "New"}, "stage")
        self.post("/admin/tag-categories", {"name": "Topic"}, "category")
        self.post("/admin/tags", {"name": "Python", "category_id": ids["category"]}, "tag")
        kind = self.post("/admin/types", {"name": "Conference"}, "type")
        kind = self.post(f"/admin/types/{ids['type']}/tickets", {"name": "Std"})
        ids["line"] = kind["tickets"][0]["id"]
        question = self.post(
            "/admin/questions", {"title": "Diet", "answers": [{"name": "Vegan"}]}, "question"
        )
        ids["answer"] = question["answers"][0]["id"]
        self.post("/admin/events", event_body(date_tz="Europe/Lisbon"), "event")
        self.post(f"/admin/events/{ids['event']}/questions", {"question_id": ids["question"]})
        self.post("/admin/tickets", {"event_id": ids["event"], "name": "Std"}, "ticket")
        category = {"name": "Corner", "product_ref": "P-1"}
        self.post("/admin/booth-categories", category, "booth_category")
        booth_line = {"name": "Hall", "booth_category_id": ids["booth_category"]}
        self.post(f"/admin/types/{ids['type']}/booths", booth_line)
        booth = {"event_id": ids["event"], "name": "B1", "booth_category_id": ids["booth_category"]}
        self.post("/admin/booths", booth, "booth")
        line = {"order_id": str(uuid.uuid4()), "order_line_id": str(uuid.uuid4())}
        self.post(f"/admin/booths/{ids['booth']}/bookings", line, "booking")
        self.post(
            "/admin/mails", {"event_id": ids["event"], "template_ref": ids["template"]}, "mail"
        )
        self.post(
            "/admin/registrations",
            {
                "event_id": ids["event"],
                "name": "Ada Lovelace",
                "event_ticket_id": ids["ticket"],
                "partner_id": str(uuid.uuid4()),
            },
            "registration",
        )
        # a mail sent at once to each new attendee: one outbox message to name
        now = {"interval_kind": "after_sub", "interval_unit": "now", "interval_nbr": 0}
        line = self.post(
            "/admin/mails", {"event_id": ids["event"], "template_ref": ids["template"], **now}
        )
        self.post(
            "/admin/registrations",
            {"event_id": ids["event"], "name": "Grace Hopper", "email": "grace@example.org"},
        )
        self.post(f"/admin/mails/{line['id']}/run", {}, status=200)
        queued = self.client.get(
            f"{API}/admin/outbox", params={"event_id": ids["event"]}, headers=self.auth
        )
        ids["outbox"] = queued.json()["items"][0]["id"]
        self.post(
            f"/admin/events/{ids['event']}/publish",
            {"date_publish": "2020-01-01T00:00:00Z"},
            status=200,
        )
        self.post("/admin/events", event_body(is_multi_slots=True), "multi")
        self.post(
            "/admin/slots",
            {
                "event_id": ids["multi"],
                "date_begin": "2027-05-10T10:00:00Z",
                "date_end": "2027-05-10T11:00:00Z",
            },
            "slot",
        )
        self.post(  # a lead rule on the event, and its queued request
            "/admin/lead-rules",
            {"name": "Leads", "predicates": [{"axis": "event", "value_ids": [ids["event"]]}]},
            "lead_rule",
        )
        job = self.client.post(  # an attendance import job of the event
            f"{API}/admin/events/{ids['event']}/attendance-imports",
            json={"rows": [{"barcode": "1"}]},
            headers={**self.auth, "Idempotency-Key": "fuzz"},
        )
        assert job.status_code == 202, job.text
        ids["import_job"] = job.json()["id"]
        # event operations of the event: a previewed reschedule and a started reminder
        operations = f"/admin/events/{ids['event']}/operations"
        reminder = self.post(
            operations,
            {"kind": "reminder", "params": {"audience_cutoff": datetime.now(UTC).isoformat()}},
        )
        started = self.client.post(
            f"{API}/admin/operations/{reminder['id']}/start",
            headers={**self.auth, "If-Match": str(reminder["revision"])},
        )
        assert started.status_code == 202, started.text
        ids["started_operation"] = reminder["id"]
        moved = {"date_begin": "2027-06-10T09:00:00Z", "date_end": "2027-06-12T18:00:00Z"}
        self.post(operations, {"kind": "reschedule", "params": moved}, "operation")
        mint = f"/admin/events/{ids['event']}/capabilities"
        ids["ics"] = self.post(f"{mint}/ics", {}, status=200)["token"]
        ids["tickets"] = self.post(
            f"{mint}/my-tickets", {"registration_ids": [ids["registration"]]}, status=200
        )["token"]
        ids["intake"] = self.post(f"{mint}/intake", {}, status=200)["token"]
        # a full event with its waiting list on, and someone waiting: an entry and its link
        self.post("/admin/events", event_body(seats_max=1), "listed")
        listed = ids["listed"]
        self.post(
            f"/admin/events/{listed}/publish", {"date_publish": "2020-01-01T00:00:00Z"}, status=200
        )
        self.post("/admin/registrations", {"event_id": listed, "name": "Taken"})
        settings = f"{API}/admin/events/{listed}/waitlist-settings"
        assert (
            self.client.put(settings, json={"enabled": True}, headers=self.auth).status_code == 200
        )
        waiting = self.client.post(
            f"{API}/intake/{listed}/waitlist", json={"name": "Wes", "email": "wes@example.org"}
        )
        assert waiting.status_code == 201, waiting.text
        ids["waitlist_entry"] = waiting.json()["waitlist_entry_id"]
        ids["waitlist"] = waiting.json()["status_url"].rsplit("/", 1)[1]
        hook = {"url": "https://hooks.example.com/in", "event_types": ["ping"]}
        self.post("/admin/webhooks", hook, "webhook")
        ids["webhook_delivery"] = self.post(
            f"/admin/webhooks/{ids['webhook']}/ping", {}, status=202
        )["id"]
        return ids


# the rows a path parameter may name; `obj_id` depends on the collection it is under
_BY_NAME = {
    "registration_id": ["registration"],
    "event_id": ["event", "multi"],
    "question_id": ["question"],
    "answer_id": ["answer"],
    "type_id": ["type"],
    "line_id": ["line"],
    "ticket_id": ["ticket"],
    "slot_id": ["slot"],
    "mail_id": ["mail"],
    "template_id": ["template"],
    "event_id_or_capability": ["event", "intake"],
    "booth_category_id": ["booth_category"],
    "booth_id": ["booth"],
    "booking_id": ["booking"],
    "rule_id": ["lead_rule"],
    "job_id": ["import_job"],
    "operation_id": ["operation", "started_operation"],
    "message_id": ["outbox"],
    "entry_id": ["waitlist_entry"],
    "endpoint_id": ["webhook"],
    "delivery_id": ["webhook_delivery"],
}
_OBJ_BY_COLLECTION = {
    "stages": "stage",
    "tag-categories": "category",
    "tags": "tag",
    "types": "type",
}
_CAPABILITY_BY_ROUTE = {"ics": "ics", "my-tickets": "tickets", "waitlist": "waitlist"}


def _real_parameters(path: str, ids: dict[str, str]) -> list[dict[str, str]]:
    """Every combination of real rows for the path's parameters (none: no combination)."""
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    parts = path.split("/")
    choices: list[list[tuple[str, str]]] = []
    for name in names:
        if name == "obj_id":
            keys = [_OBJ_BY_COLLECTION[parts[parts.index("{obj_id}") - 1]]]
        elif name == "capability":
            keys = [_CAPABILITY_BY_ROUTE[parts[parts.index("{capability}") - 1]]]
        elif name == "kind":
            choices.append([(name, "tickets")])
            continue
        elif name == "purpose":  # a trigger purpose
            choices.append([(name, "event_rescheduled")])
            continue
        else:
            keys = _BY_NAME[name]
        choices.append([(name, ids[key]) for key in keys])
    return [dict(combo) for combo in itertools.product(*choices)] if names else []


# body and query fields that name rows, per variant: the event with its ticket, or the
# multi-slot event with its slot (a mismatched pair is one more refusal to probe)
_SHARED_ROWS = {
    "question_id": "question",
    "template_ref": "template",
    "template_id": "template",
    "category_id": "category",
    "stage_id": "stage",
    "event_type_id": "type",
    "value_answer_id": "answer",
    "slot_id": "slot",
    "booth_category_id": "booth_category",
}
_VARIANTS = {
    "event": {**_SHARED_ROWS, "event_id": "event", "event_ticket_id": "ticket"},
    "multi": {**_SHARED_ROWS, "event_id": "multi", "event_slot_id": "slot"},
}
_LIST_ROWS = {
    "tag_ids": "tag",
    "registration_ids": "registration",
    "answer_ids": "answer",
    "value_ids": "event",
}


def _with_rows(value: Any, rows: dict[str, str], ids: dict[str, str]) -> Any:
    """The value with its row-naming fields pointed at real rows (same JSON types)."""
    if isinstance(value, list):
        return [_with_rows(item, rows, ids) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key in rows and isinstance(item, str):
            out[key] = ids[rows[key]]
        elif key in _LIST_ROWS and isinstance(item, list):
            out[key] = [ids[_LIST_ROWS[key]]]
        else:
            out[key] = _with_rows(item, rows, ids)
    return out


def _real_rows(ids: dict[str, str]) -> Any:
    """Point a case's body and query at real rows, for two thirds of the examples."""

    def apply(drawn: tuple[Any, str | None]) -> Any:
        case, variant = drawn
        if variant is not None:
            rows = _VARIANTS[variant]
            case.body = _with_rows(case.body, rows, ids)
            if case.query:
                case.query = _with_rows(case.query, rows, ids)
        return case

    return apply


def _order(operation: Any) -> tuple[int, str]:
    # reads first, deletes last: later operations still reach the rows the world created
    rank = {"get": 0, "post": 1, "patch": 1, "put": 1, "delete": 2}
    return rank.get(operation.method.lower(), 1), operation.label


def _fuzz(
    operation: Any, strategy: Any, auth: dict[str, str], statuses: Counter[int]
) -> tuple[int, dict[str, str]]:
    """Run one operation's examples: (cases sent, one report per distinct failure)."""
    cases = 0
    failures: dict[str, str] = {}

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        nonlocal cases
        cases += 1
        try:
            response = case.call(headers=dict(auth))
            statuses[response.status_code] += 1
            case.validate_response(response, checks=CHECKS)
        except BaseExceptionGroup as group:  # the failed checks, with a curl to replay one
            for exc in group.exceptions:
                failures.setdefault(str(exc).splitlines()[0], str(group)[:3000])
        except Exception as exc:  # the app raised through the transport
            failures.setdefault(f"{type(exc).__name__}: {exc}"[:200], repr(case)[:3000])

    run()
    return cases, failures


@pytest.mark.timeout(max(120, EXAMPLES * 8))
@pytest.mark.long
def test_every_operation_answers_within_its_contract(
    schema: Any, bearer: dict[str, str], capsys: pytest.CaptureFixture[str]
):
    ids = World(schema.app, bearer).build()
    operations = sorted((result.ok() for result in schema.get_all_operations()), key=_order)
    cases = 0
    statuses: Counter[int] = Counter()
    failures: dict[tuple[str, str], str] = {}
    for operation in operations:
        strategies = [operation.as_strategy(generation_mode=mode) for mode in MODES]
        for real in _real_parameters(operation.path, ids):
            strategies += [
                operation.as_strategy(generation_mode=mode, path_parameters=real) for mode in MODES
            ]
        strategy = st.tuples(st.one_of(strategies), st.sampled_from([None, "event", "multi"]))
        sent, found = _fuzz(operation, strategy.map(_real_rows(ids)), bearer, statuses)
        cases += sent
        failures.update({(operation.label, title): report for title, report in found.items()})

    with capsys.disabled():
        print(
            f"\nschemathesis: {len(operations)} operations, {cases} cases, "
            f"{len(failures)} failures ({EXAMPLES} examples per operation); statuses "
            f"{dict(sorted(statuses.items()))}"
        )
        for (label, title), report in failures.items():
            print(f"--- {label}: {title}\n{report}")
    assert not failures, sorted(failures)
