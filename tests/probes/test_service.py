"""Service routes, settings, the error contract, and the curl smoke probe against `serve`."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from events_svc import create_app, errors
from events_svc.app import api_routes
from events_svc.settings import Settings, SettingsError
from tests.probes.helpers import (
    BASE,
    Api,
    drop_database,
    free_port,
    new_database,
    start_serve,
    wait_ready,
    with_database,
)

ROOT = Path(__file__).resolve().parents[2]


async def test_healthz_and_readyz(api: Api):
    c = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://t")
    assert (await c.get("/healthz")).json() == {"status": "ok"}
    assert (await c.get("/readyz")).json() == {"status": "ready"}
    await c.aclose()


async def test_unknown_routes_answer_the_error_shape(api: Api):
    r = await api.client.get("/admin/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await api.client.put("/admin/events")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


async def test_openapi_lists_the_error_bodies(api: Api):
    root = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://t")
    doc = (await root.get("/openapi.json")).json()
    await root.aclose()
    assert "ErrorBody" in doc["components"]["schemas"]
    responses = doc["paths"]["/api/v1/event/admin/events"]["post"]["responses"]
    for status in ("401", "403", "409", "422", "503"):
        assert status in responses


def test_every_refusal_has_a_unique_code_and_a_4xx_or_503_status():
    codes = [e.code for e in errors.all_errors()]
    assert len(codes) == len(set(codes))
    assert all(400 <= e.status < 500 or e.status == 503 for e in errors.all_errors())


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("EVENT_MAIL_BATCH", "many"),
        ("EVENT_MAIL_CRON_LIMIT", "0"),
        ("EVENT_TRUSTED_PROXY", "maybe"),
        ("EVENTS_PORT", "70000"),
        ("EVENTS_DATABASE_URL", "mysql://x"),
        ("EVENT_CAPABILITY_SECRET", "short"),
    ],
)
def test_a_bad_setting_names_its_variable(var: str, value: str):
    with pytest.raises(SettingsError, match=var):
        Settings.from_env({var: value})


def test_bool_tolerant_settings_and_defaults():
    s = Settings.from_env(
        {"EVENT_TRUSTED_PROXY": "Yes", "EVENT_CAPABILITY_SECRET": "a" * 20 + ", " + "b" * 20}
    )
    assert s.trusted_proxy is True and s.capability_secrets == ("a" * 20, "b" * 20)
    d = Settings.from_env({})
    defaults = (d.mail_batch, d.mail_cron_limit, d.trusted_proxy, d.intake_public)
    assert defaults == (50, 1000, False, False)


def test_the_cli_stops_with_one_clear_line_on_a_bad_setting():
    env = {**os.environ, "EVENT_MAIL_BATCH": "lots"}
    r = subprocess.run(
        [sys.executable, "-m", "events_svc", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "events-svc: configuration error: EVENT_MAIL_BATCH='lots' is not an integer"
    ]


def test_smoke_script_passes_against_a_real_serve_process(db_url: str, tmp_path: Path):
    port = free_port()
    proc = start_serve(
        db_url,
        port,
        output=subprocess.PIPE,
        EVENTS_DATA_DIR=str(tmp_path),
        EVENT_CAPABILITY_SECRET="smoke-secret-0123456789",
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(proc, base)
        r = subprocess.run(
            ["bash", str(ROOT / "scripts" / "smoke.sh"), base],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stdout
        assert "smoke: PASS" in r.stdout
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    # no relay and no gateway here: serve said so once, with how to turn delivery on
    assert out.count("mail and sms are held in the outbox") == 1


async def test_a_missing_database_answers_503_not_500():
    port = free_port()  # nothing listens there
    url = f"postgresql://postgres@127.0.0.1:{port}/events"
    app = create_app(Settings(database_url=url, pool_min=0, pool_max=2, connect_timeout_s=2))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            r = await c.get("/readyz")
            assert r.status_code == 503 and r.json()["reason"] == "database_unavailable"
            r = await c.get("/api/v1/event/admin/events", headers={"Authorization": "Bearer evt_x"})
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "database_unavailable"
            assert r.headers["retry-after"] == "5"


async def test_apps_of_one_process_share_routes_but_not_their_context(
    admin_url: str, template_url: str, settings: Settings, api: Api
):
    """The routes are built once per process (`api_routes`): a second app over another
    database answers from its own pool and settings, and an app without the public
    intake has no intake route even after one with it was made."""
    from tests.probes.conftest import TEMPLATE

    other_name = await new_database(admin_url, TEMPLATE)
    other = dataclasses.replace(settings, database_url=with_database(admin_url, other_name))
    try:
        with_intake = create_app(other, intake_public=True)
        async with with_intake.router.lifespan_context(with_intake):
            b = httpx.AsyncClient(transport=httpx.ASGITransport(app=with_intake), base_url=BASE)
            headers = await api.token("*")  # minted in the first app's database
            assert (await api.client.get("/admin/events", headers=headers)).status_code == 200
            refused = await b.get("/admin/events", headers=headers)
            assert refused.status_code == 401, refused.text
            intake = await b.post(f"/intake/{uuid.uuid4()}", json={"attendees": []})
            # the route is there (no capability secret in these settings)
            assert intake.json()["error"]["code"] == "event_capability_secret_not_configured"
            await b.aclose()
        # the very route objects of the process's sets, one set per intake flag
        shared = {id(r) for r in api_routes(intake=True)}
        assert shared <= {id(r) for r in with_intake.routes}
        assert not shared & {id(r) for r in api.app.routes}
        assert {id(r) for r in api_routes(intake=False)} <= {id(r) for r in api.app.routes}
        without = await api.client.post(f"/intake/{uuid.uuid4()}", json={"attendees": []})
        assert (without.status_code, without.json()["error"]["code"]) == (404, "not_found")
    finally:
        await drop_database(admin_url, other_name)
