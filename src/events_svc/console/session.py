"""The console's session cookie.

It carries the key of the operator's server-side session (`verbs.tokens`: one row per
sign-in, ended by sign-out, by revoking its token, or after `IDLE_S` unseen; never the
API token itself) and the session's CSRF secret. It is signed with itsdangerous,
`HttpOnly`, `SameSite=Strict`, `Secure` as `settings.console_cookie_secure` says, scoped
to the console's path, and re-issued on every answer. A cookie that does not verify
(forged, signed with another secret, not re-issued for `IDLE_S`) is no session; one that
verifies opens only what its row still allows.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

from events_svc.verbs.tokens import CONSOLE_IDLE, MAX_SESSION_KEY

COOKIE = "studio_session"
IDLE_S = int(CONSOLE_IDLE.total_seconds())
MAX_COOKIE = 1024  # a longer cookie is not one this console wrote
_SALT = "events-svc.studio.session"
_NOTE_SALT = "events-svc.studio.note"
NOTE_MAX_AGE = 600  # a note read back after its form's 303: minutes, not hours
MAX_NOTE = 4096  # a longer note is not one this console wrote


@dataclass(frozen=True)
class Session:
    """The key of the server-side session (None before sign-in) and the CSRF secret."""

    key: str | None
    csrf: str

    @staticmethod
    def fresh(key: str | None = None) -> Session:
        """A new session: a new CSRF secret (sign-in and sign-out both start one)."""
        return Session(key=key, csrf=secrets.token_urlsafe(32))

    def without_key(self) -> Session:
        """This browser's session once its server-side session is over: no key, the same
        CSRF secret (the pages it has open still post to the sign-in form)."""
        return Session(key=None, csrf=self.csrf)

    def csrf_matches(self, submitted: str | None) -> bool:
        """Whether a form's `csrf_token` is this session's (compared in constant time)."""
        if not submitted or len(submitted) > 100:
            return False
        return hmac.compare_digest(submitted.encode(), self.csrf.encode())


def _bind(session: Session, who: str) -> str:
    """A short digest of the session's CSRF secret and the operator's id (never the
    secret itself)."""
    return hashlib.sha256(f"{session.csrf}\n{who}".encode()).hexdigest()[:16]


class SessionCodec:
    """Sign and verify session cookies; the first secret signs, every one verifies."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("the console needs a secret to sign its sessions")
        # itsdangerous signs with the LAST key and verifies with all of them
        keyring = list(reversed(keys))
        sha = {"digest_method": hashlib.sha256}
        self._serializer = URLSafeTimedSerializer(keyring, salt=_SALT, signer_kwargs=sha)
        self._notes = URLSafeTimedSerializer(keyring, salt=_NOTE_SALT, signer_kwargs=sha)

    def dump_note(self, session: Session, who: str, payload: dict[str, Any]) -> str:
        """A signed note a form's 303 carries to its page (a desk scan's answer), bound to
        this session and this operator (`who`, the actor's id): another browser, the same
        one after sign-out, or another user of a host's sign-in cannot open it. It is
        signed, not encrypted: it holds nothing an address may not show."""
        value: str = self._notes.dumps({"n": payload, "s": _bind(session, who)})
        return value

    def load_note(self, session: Session, who: str, raw: str | None) -> dict[str, Any] | None:
        if not raw or len(raw) > MAX_NOTE:
            return None
        try:
            note = self._notes.loads(raw, max_age=NOTE_MAX_AGE)
        except BadSignature:
            return None
        if not isinstance(note, dict) or note.get("s") != _bind(session, who):
            return None
        payload = note.get("n")
        return payload if isinstance(payload, dict) else None

    def dump(self, session: Session) -> str:
        payload: dict[str, Any] = {"c": session.csrf}
        if session.key is not None:
            payload["k"] = session.key
        value: str = self._serializer.dumps(payload)
        return value

    def load(self, raw: str | None) -> Session | None:
        """The session of a cookie this console signed less than IDLE_S ago, else None
        (whether its key still names a live session is the verb's to say)."""
        if not raw or len(raw) > MAX_COOKIE:
            return None
        try:
            payload = self._serializer.loads(raw, max_age=IDLE_S)
        except BadSignature:  # SignatureExpired included
            return None
        if not isinstance(payload, dict):
            return None
        csrf, key = payload.get("c"), payload.get("k")
        if not isinstance(csrf, str) or not isinstance(key, str | None):
            return None
        if key is not None and not 0 < len(key) <= MAX_SESSION_KEY:
            return None
        return Session(key=key, csrf=csrf)

    def set_cookie_header(self, session: Session, *, secure: bool, path: str) -> bytes:
        flags = f"Max-Age={IDLE_S}; Path={path}; HttpOnly; SameSite=Strict"
        if secure:
            flags += "; Secure"
        return f"{COOKIE}={self.dump(session)}; {flags}".encode("latin-1")
