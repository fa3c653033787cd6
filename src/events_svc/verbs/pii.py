"""Masking of attendee PII in reads (the full values need registration:pii + pii=full).

email `j***@example.org`; phone `***` + its last two digits; name: the first
letter of each word followed by `***`. company_name is not masked.
"""

from __future__ import annotations

from typing import Any


def mask_email(email: str) -> str:
    if not email:
        return ""
    local, at, domain = email.partition("@")
    if not at:
        return local[:1] + "***"
    return f"{local[:1]}***@{domain}"


def mask_phone(phone: str) -> str:
    digits = [c for c in phone if c.isdigit()]
    if not phone:
        return ""
    return "***" + "".join(digits[-2:])


def mask_name(name: str) -> str:
    return " ".join(word[:1] + "***" for word in name.split())


def mask_registration(view: dict[str, Any]) -> dict[str, Any]:
    masked = dict(view)
    masked["name"] = mask_name(view.get("name") or "")
    masked["email"] = mask_email(view.get("email") or "")
    masked["phone"] = mask_phone(view.get("phone") or "")
    return masked
