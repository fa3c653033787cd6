"""Delivery's settings: the relay URL's forms, the sender it requires, the gateway's
secret; a bad one stops the CLI with one line that never shows the password; what
`serve` says about held channels."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import pytest

from events_svc.__main__ import delivery_notice
from events_svc.settings import Settings, SettingsError, SmtpRelay

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123").decode()


def parsed(**env: str) -> Settings:
    return Settings.from_env({"EVENTS_DATABASE_URL": "postgresql://db/events", **env})


def test_relay_urls_parse_into_their_transport():
    plain = parsed(EVENTS_SMTP_URL="smtp://relay.example.org", EVENTS_MAIL_FROM="e@example.org")
    assert plain.smtp == SmtpRelay("relay.example.org", 25)
    strict = parsed(
        EVENTS_SMTP_URL="smtp://desk:p%40ss%2Fw0rd@relay.example.org:2525?starttls=require",
        EVENTS_MAIL_FROM="Events <events@example.org>",
    )
    assert strict.smtp == SmtpRelay(
        "relay.example.org", 2525, require_starttls=True, username="desk", password="p@ss/w0rd"
    )
    assert "p@ss" not in repr(strict)  # the password never prints with the settings
    implicit = parsed(EVENTS_SMTP_URL="smtps://relay.example.org", EVENTS_MAIL_FROM="e@x.org")
    assert implicit.smtp == SmtpRelay("relay.example.org", 465, implicit_tls=True)
    held = parsed()
    assert held.smtp is None and held.sms_gateway_url == ""
    tuned = parsed(
        EVENTS_SMTP_URL="smtp://relay.example.org",
        EVENTS_MAIL_FROM="e@example.org",
        EVENTS_SMTP_RATE="0",
        EVENTS_SMTP_CONCURRENCY="2",
    )
    assert (tuned.smtp_rate, tuned.smtp_concurrency) == (0, 2)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"EVENTS_SMTP_URL": "http://desk:hunter22@relay.example.org"}, "EVENTS_SMTP_URL"),
        ({"EVENTS_SMTP_URL": "smtp://desk:hunter22@relay.example.org:99999"}, "EVENTS_SMTP_URL"),
        ({"EVENTS_SMTP_URL": "smtp://desk:hunter22@relay.example.org?tls=1"}, "starttls"),
        ({"EVENTS_SMTP_URL": "smtps://desk:hunter22@r.example.org?starttls=require"}, "smtps"),
        ({"EVENTS_SMTP_URL": "smtp://desk:hunter22@relay.example.org"}, "EVENTS_MAIL_FROM"),
        (
            {"EVENTS_SMTP_URL": "smtp://relay.example.org", "EVENTS_MAIL_FROM": "not an address"},
            "EVENTS_MAIL_FROM",
        ),
        (
            {
                "EVENTS_SMTP_URL": "smtp://r.example.org",
                "EVENTS_MAIL_FROM": "e@example.org",
                "EVENTS_SMTP_CA_FILE": "/nonexistent/ca.pem",
            },
            "EVENTS_SMTP_CA_FILE",
        ),
        ({"EVENTS_SMS_GATEWAY_URL": "https://sms.example.org/send"}, "EVENTS_SMS_GATEWAY_SECRET"),
        (
            {"EVENTS_SMS_GATEWAY_URL": "https://sms.example.org", "EVENTS_SMS_GATEWAY_SECRET": "x"},
            "whsec_",
        ),
        (
            {"EVENTS_SMS_GATEWAY_URL": "sms.example.org", "EVENTS_SMS_GATEWAY_SECRET": SECRET},
            "http",
        ),
        ({"EVENTS_SMTP_RATE": "-1"}, "EVENTS_SMTP_RATE"),
        ({"EVENTS_SMTP_CONCURRENCY": "0"}, "EVENTS_SMTP_CONCURRENCY"),
    ],
)
def test_a_bad_delivery_setting_is_refused_without_echoing_a_secret(env: dict[str, str], says: str):
    with pytest.raises(SettingsError) as refused:
        parsed(**env)
    assert says in str(refused.value)
    assert "hunter22" not in str(refused.value)


def test_the_cli_stops_with_one_line_that_hides_the_password():
    for env, says in (
        ({"EVENTS_SMTP_URL": "smtp://desk:hunter22@relay.example.org:http"}, "EVENTS_SMTP_URL"),
        ({"EVENTS_SMTP_URL": "smtp://desk:hunter22@relay.example.org"}, "EVENTS_MAIL_FROM"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "events_svc", "migrate"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2
        [line] = r.stderr.strip().splitlines()
        assert line.startswith("events-svc: configuration error: ") and says in line
        assert "hunter22" not in r.stderr + r.stdout


def test_serve_says_which_channels_are_held_and_how_to_send_them():
    [held] = delivery_notice(parsed())  # one line for both channels
    assert held.startswith("mail and sms are held in the outbox")
    assert "EVENTS_SMTP_URL" in held and "EVENTS_SMS_GATEWAY_URL" in held
    both = parsed(
        EVENTS_SMTP_URL="smtp://relay.example.org",
        EVENTS_MAIL_FROM="e@example.org",
        EVENTS_SMS_GATEWAY_URL="https://sms.example.org/send",
        EVENTS_SMS_GATEWAY_SECRET=SECRET,
    )
    assert delivery_notice(both) == []
    silent = parsed(
        EVENTS_SMTP_URL="smtp://relay.example.org",
        EVENTS_MAIL_FROM="e@example.org",
        EVENT_SCHEDULER_ENABLED="false",
    )
    [sms, scheduler] = delivery_notice(silent)
    assert sms.startswith("sms is held in the outbox") and "EVENTS_SMTP_URL" not in sms
    assert "outbox drain --once" in scheduler
