"""Settings: the only reader of the environment.

One immutable object, built once by the CLI (or by a host) and passed down.
Every knob is parsed strictly; a bad value raises `SettingsError` naming the
variable, and the CLI turns that into one clear line and a non-zero exit.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parseaddr
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from events_svc.text import whole_number

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f", ""}


class SettingsError(ValueError):
    """A configuration value that cannot be used; the message names the variable."""


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = whole_number(raw.strip())  # ASCII digits only: no sign, "_" or other script
    if value is None:
        raise SettingsError(f"{name}={raw!r} is not an integer")
    if value < minimum:
        raise SettingsError(f"{name}={value} must be >= {minimum}")
    return value


def _is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: not known to be loopback
        return False


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingsError(f"{name}={raw!r} is not a boolean (use true/false)")


def _secrets(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = env.get(name, "")
    parts = tuple(p.strip() for p in raw.split(",") if p.strip())
    for part in parts:
        if len(part) < 16:
            # never echo the value: it is a secret
            raise SettingsError(f"{name} holds a secret shorter than 16 characters")
    return parts


def _url(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    value = raw.strip()
    if not value.startswith(("postgresql://", "postgres://")):
        raise SettingsError(f"{name} must be a postgresql:// URL")
    return value


def _sender(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip() or "events@localhost"
    if "@" not in value or any(c.isspace() for c in value):
        raise SettingsError(f"{name}={value!r} is not an email address")
    return value


def _clock(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, "").strip() or default
    hh, _, mm = value.partition(":")
    if not (hh.isdigit() and mm.isdigit() and int(hh) < 24 and int(mm) < 60):
        raise SettingsError(f"{name}={value!r} is not a time of day HH:MM (UTC)")
    return f"{int(hh):02}:{int(mm):02}"


def _limit(env: Mapping[str, str], name: str, default: str) -> str:
    from limits import parse  # noqa: PLC0415 - the rate-limit grammar ("60/minute")

    value = env.get(name, "").strip() or default
    try:
        parse(value)
    except ValueError:
        raise SettingsError(f"{name}={value!r} is not a rate limit like 60/minute") from None
    return value


def _base_url(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip().rstrip("/")
    if value and not value.startswith(("http://", "https://")):
        raise SettingsError(f"{name}={value!r} must be an absolute http(s) URL")
    return value


def _endpoint(env: Mapping[str, str], url_name: str, secret_name: str) -> tuple[str, str]:
    """An outgoing endpoint's URL (absolute http(s), or empty: none) and its secret, as
    given (checked by the caller when there is a URL; never echoed)."""
    url = env.get(url_name, "").strip()
    secret = env.get(secret_name, "").strip()
    if url and (not url.startswith(("http://", "https://")) or any(c.isspace() for c in url)):
        raise SettingsError(f"{url_name} must be an absolute http(s) URL")
    try:
        netloc = urlsplit(url).netloc
    except ValueError:  # an unclosed IPv6 bracket
        raise SettingsError(f"{url_name} must be an absolute http(s) URL") from None
    if url and "@" in netloc:
        # never echo the value: it carries a credential
        raise SettingsError(
            f"{url_name} must not carry a user or password (user:password@): "
            f"put the credential in {secret_name}"
        )
    return url, secret


def _webhook(env: Mapping[str, str], url_name: str, secret_name: str) -> tuple[str, str]:
    """The lead webhook's URL (or empty: no webhook) and its secret (16+ characters,
    required with a URL)."""
    url, secret = _endpoint(env, url_name, secret_name)
    if not url:
        return "", secret
    if len(secret) < 16:
        raise SettingsError(f"{secret_name} must hold 16+ characters when {url_name} is set")
    return url, secret


def _proxy(env: Mapping[str, str], name: str) -> str:
    """A proxy URL for the operator's own partners (`http://` or `https://`), or empty:
    direct. It may carry credentials: an error names the variable, never the
    value."""
    value = env.get(name, "").strip()
    if not value:
        return ""
    try:
        url = urlsplit(value)
        url.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        raise SettingsError(f"{name} must be a proxy URL like http://proxy.internal:3128") from None
    if url.scheme not in {"http", "https"} or not url.hostname:
        raise SettingsError(f"{name} must be a proxy URL like http://proxy.internal:3128")
    return value


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK_PROXIES: tuple[Network, ...] = (
    ipaddress.ip_network("127.0.0.1/32"),
    ipaddress.ip_network("::1/128"),
)


def _networks(env: Mapping[str, str], name: str) -> tuple[Network, ...]:
    """Comma-separated addresses or CIDR networks (IPv4, IPv6); default loopback."""
    raw = env.get(name, "").strip()
    if not raw:
        return LOOPBACK_PROXIES
    networks: list[Network] = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise SettingsError(
                f"{name}: {entry!r} is neither an IP address nor a CIDR network"
            ) from None
    if not networks:
        raise SettingsError(f"{name} names no address or network")
    return tuple(networks)


def _cores() -> int:
    return os.cpu_count() or 1


def _storage(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip() or "memory://"
    if not value.startswith(("memory://", "redis://", "rediss://")):
        raise SettingsError(f"{name} must be memory:// or a redis:// URL")
    return value


@dataclass(frozen=True)
class SmtpRelay:
    """The relay of `EVENTS_SMTP_URL`: `smtp://` (STARTTLS when offered, or required with
    `?starttls=require`) or `smtps://` (implicit TLS); AUTH when it holds credentials."""

    host: str
    port: int
    implicit_tls: bool = False
    require_starttls: bool = False
    username: str = ""
    password: str = field(default="", repr=False)


_SMTP_SHAPE = "must be smtp://[user:password@]host[:port][?starttls=require] or smtps://..."


def _smtp(env: Mapping[str, str], name: str) -> SmtpRelay | None:
    """The relay, or None (mail is held in the outbox). The URL may hold a password:
    an error names the variable and the rule, never the value."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        url = urlsplit(raw)
        port = url.port
    except ValueError:
        raise SettingsError(f"{name} {_SMTP_SHAPE}") from None
    if url.scheme not in {"smtp", "smtps"} or not url.hostname or url.path not in {"", "/"}:
        raise SettingsError(f"{name} {_SMTP_SHAPE}")
    options = dict(parse_qsl(url.query, keep_blank_values=True))
    starttls = options.pop("starttls", "auto")
    if options or starttls not in {"auto", "require"}:
        raise SettingsError(f"{name} accepts one option, starttls=require")
    if url.scheme == "smtps" and starttls == "require":
        raise SettingsError(f"{name}: smtps:// is TLS from the start; starttls applies to smtp://")
    implicit = url.scheme == "smtps"
    return SmtpRelay(
        host=url.hostname,
        port=port or (465 if implicit else 25),
        implicit_tls=implicit,
        require_starttls=starttls == "require",
        username=unquote(url.username or ""),
        password=unquote(url.password or ""),
    )


def _mail_from(env: Mapping[str, str], name: str, required: bool) -> str:
    """The From of every mail (`Name <addr>` or `addr`); required with a relay."""
    value = env.get(name, "").strip()
    if not value:
        if required:
            raise SettingsError(f"{name} must be set when EVENTS_SMTP_URL is set")
        return ""
    _, addr = parseaddr(value)
    local, _, domain = addr.rpartition("@")
    if not local or "." not in domain or any(c.isspace() for c in addr) or "\n" in value:
        raise SettingsError(f"{name}={value!r} is not a sender like 'Events <events@example.org>'")
    return value


def _file(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    path = Path(raw)
    if not path.is_file():
        raise SettingsError(f"{name}={raw!r} is not a readable file")
    return path


def _gateway(env: Mapping[str, str], url_name: str, secret_name: str) -> tuple[str, str]:
    """The sms gateway's URL (or empty: sms held in the outbox) and its signing secret
    in the `whsec_` form (base64 of 16+ bytes)."""
    url, secret = _endpoint(env, url_name, secret_name)
    if not url:
        return "", secret
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not secret.startswith("whsec_") or len(key) < 16:
        raise SettingsError(
            f"{secret_name} must be whsec_ followed by the base64 of 16+ random bytes "
            f"when {url_name} is set"
        )
    return url, secret


POOLERS = ("session", "transaction")


@dataclass(frozen=True)
class Settings:
    """Every knob of the service; see the configuration table in README.md."""

    database_url: str | None = None
    # "session" (a direct server or a session pooler) or "transaction" (PgBouncer in
    # transaction pooling: no prepared-statement cache, timeouts per transaction)
    db_pooler: str = "session"
    # for what needs a session of its own (LISTEN, the migrations' advisory lock)
    database_direct_url: str | None = None
    data_dir: Path = field(default_factory=lambda: Path(".events-data"))
    host: str = "127.0.0.1"
    port: int = 8000
    pool_min: int = 2
    pool_max: int = 10
    lock_timeout_ms: int = 5000
    statement_timeout_ms: int = 30000
    connect_timeout_s: int = 5
    pool_wait_s: int = 10
    capability_secrets: tuple[str, ...] = ()
    mail_batch: int = 50
    mail_cron_limit: int = 1000
    trusted_proxy: bool = False
    # with trusted_proxy: the peers that may name the client (X-Forwarded-For)
    trusted_proxy_ips: tuple[Network, ...] = LOOPBACK_PROXIES
    intake_public: bool = False
    migrations_dir: Path | None = None
    log_level: str = "INFO"
    mail_sender: str = "events@localhost"
    scheduler_enabled: bool = True
    scheduler_floor_s: int = 1200
    done_sweep_at: str = "03:41"
    ics_ttl_s: int = 30 * 86400
    intake_ttl_s: int = 30 * 86400
    form_ttl_s: int = 3 * 3600  # a public page's form token: how long a form may be filled
    rate_limit_ip: str = "120/minute"
    rate_limit_capability: str = "60/minute"
    rate_limit_email: str = "10/hour"
    rate_limit_desk: str = "600/minute"
    rate_limit_event_intake: str = "1200/minute"
    rate_limit_storage: str = "memory://"
    public_base_url: str = ""
    max_body_bytes: int = 1024 * 1024
    lead_batch: int = 200
    lead_cron_limit: int = 1000
    lead_webhook_url: str = ""
    lead_webhook_secret: str = field(default="", repr=False)
    import_batch: int = 500
    operation_batch: int = 1000
    export_timeout_s: int = 600
    export_max_rows: int = 2_000_000
    export_concurrency: int = 2
    trigger_dispatch: bool = False
    console_secrets: tuple[str, ...] = field(default=(), repr=False)
    # None: Secure unless the service listens on loopback (`console_cookie_secure`)
    console_secure_cookie: bool | None = None
    register_batch_max: int = 64
    smtp: SmtpRelay | None = None
    mail_from: str = ""
    smtp_ca_file: Path | None = None
    smtp_rate: int = 20  # messages per second; 0: no limit
    smtp_concurrency: int = 4
    smtp_timeout_s: int = 30
    sms_gateway_url: str = ""
    sms_gateway_secret: str = field(default="", repr=False)
    sms_gateway_timeout_s: int = 10  # a whole call: connect, send and answer
    sms_gateway_concurrency: int = 4  # calls at once per process
    # the operator's own partners (sms gateway, lead sink) through this proxy; never webhooks
    outbound_proxy: str = field(default="", repr=False)
    delivery_batch: int = 100
    delivery_lease_s: int = 300
    webhook_allow_private: bool = False
    webhook_lease_s: int = 120
    webhook_retention_days: int = 30
    # documents (badge sheets, tickets PDFs) rendered at once per process
    document_concurrency: int = field(default_factory=_cores)

    @property
    def console_cookie_secure(self) -> bool:
        """Whether the console's session cookie carries `Secure`: as set, else on unless
        the service listens on a loopback address (a local `make run` over plain http)."""
        if self.console_secure_cookie is not None:
            return self.console_secure_cookie
        return not _is_loopback(self.host)

    @property
    def session_url(self) -> str | None:
        """The URL of a connection that keeps its session (LISTEN, a session advisory
        lock): the direct one when set, else the pooled URL (a direct server then)."""
        return self.database_direct_url or self.database_url

    def __post_init__(self) -> None:
        if self.db_pooler not in POOLERS:
            raise SettingsError(
                f"EVENTS_DB_POOLER={self.db_pooler!r} is not one of {', '.join(POOLERS)}"
            )
        if self.db_pooler == "transaction" and self.database_url and not self.database_direct_url:
            raise SettingsError(
                "EVENTS_DB_POOLER=transaction needs EVENTS_DATABASE_DIRECT_URL (the "
                "migrations' lock and the scheduler's LISTEN need a session of their own)"
            )
        if self.pool_min > self.pool_max:
            raise SettingsError(
                f"EVENTS_POOL_MIN={self.pool_min} exceeds EVENTS_POOL_MAX={self.pool_max}"
            )
        if not 0 < self.port < 65536:
            raise SettingsError(f"EVENTS_PORT={self.port} is not a TCP port")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Parse the environment (or the mapping given) into settings."""
        e = os.environ if env is None else env
        level = e.get("EVENTS_LOG_LEVEL", "INFO").strip().upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise SettingsError(f"EVENTS_LOG_LEVEL={level!r} is not DEBUG/INFO/WARNING/ERROR")
        migrations = e.get("EVENTS_MIGRATIONS_DIR", "").strip()
        relay = _smtp(e, "EVENTS_SMTP_URL")
        gateway_url, gateway_secret = _gateway(
            e, "EVENTS_SMS_GATEWAY_URL", "EVENTS_SMS_GATEWAY_SECRET"
        )
        webhook_url, webhook_secret = _webhook(
            e, "EVENT_LEAD_WEBHOOK_URL", "EVENT_LEAD_WEBHOOK_SECRET"
        )
        trusted_proxy = _bool(e, "EVENT_TRUSTED_PROXY", False)
        return cls(
            database_url=_url(e, "EVENTS_DATABASE_URL"),
            db_pooler=e.get("EVENTS_DB_POOLER", "").strip().lower() or "session",
            database_direct_url=_url(e, "EVENTS_DATABASE_DIRECT_URL"),
            data_dir=Path(e.get("EVENTS_DATA_DIR", "").strip() or ".events-data"),
            host=e.get("EVENTS_HOST", "").strip() or "127.0.0.1",
            port=_int(e, "EVENTS_PORT", 8000),
            pool_min=_int(e, "EVENTS_POOL_MIN", 2, minimum=0),
            pool_max=_int(e, "EVENTS_POOL_MAX", 10),
            lock_timeout_ms=_int(e, "EVENTS_LOCK_TIMEOUT_MS", 5000),
            statement_timeout_ms=_int(e, "EVENTS_STATEMENT_TIMEOUT_MS", 30000),
            connect_timeout_s=_int(e, "EVENTS_CONNECT_TIMEOUT_S", 5),
            pool_wait_s=_int(e, "EVENTS_POOL_WAIT_S", 10),
            capability_secrets=_secrets(e, "EVENT_CAPABILITY_SECRET"),
            mail_batch=_int(e, "EVENT_MAIL_BATCH", 50),
            mail_cron_limit=_int(e, "EVENT_MAIL_CRON_LIMIT", 1000),
            trusted_proxy=trusted_proxy,
            trusted_proxy_ips=(
                _networks(e, "EVENT_TRUSTED_PROXY_IPS") if trusted_proxy else LOOPBACK_PROXIES
            ),
            intake_public=_bool(e, "EVENT_INTAKE_PUBLIC", False),
            migrations_dir=Path(migrations) if migrations else None,
            log_level=level,
            mail_sender=_sender(e, "EVENT_MAIL_SENDER"),
            scheduler_enabled=_bool(e, "EVENT_SCHEDULER_ENABLED", True),
            scheduler_floor_s=_int(e, "EVENT_SCHEDULER_FLOOR_S", 1200),
            done_sweep_at=_clock(e, "EVENT_DONE_SWEEP_AT", "03:41"),
            ics_ttl_s=_int(e, "EVENT_ICS_TTL_S", 30 * 86400),
            intake_ttl_s=_int(e, "EVENT_INTAKE_TTL_S", 30 * 86400),
            form_ttl_s=_int(e, "EVENT_FORM_TTL_S", 3 * 3600),
            rate_limit_ip=_limit(e, "EVENT_RATE_LIMIT_IP", "120/minute"),
            rate_limit_capability=_limit(e, "EVENT_RATE_LIMIT_CAPABILITY", "60/minute"),
            rate_limit_email=_limit(e, "EVENT_RATE_LIMIT_EMAIL", "10/hour"),
            rate_limit_desk=_limit(e, "EVENT_RATE_LIMIT_DESK", "600/minute"),
            rate_limit_event_intake=_limit(e, "EVENT_RATE_LIMIT_EVENT_INTAKE", "1200/minute"),
            rate_limit_storage=_storage(e, "EVENT_RATE_LIMIT_STORAGE"),
            public_base_url=_base_url(e, "EVENTS_PUBLIC_BASE_URL"),
            max_body_bytes=_int(e, "EVENTS_MAX_BODY_BYTES", 1024 * 1024, minimum=1024),
            lead_batch=_int(e, "EVENT_LEAD_BATCH", 200),
            lead_cron_limit=_int(e, "EVENT_LEAD_CRON_LIMIT", 1000),
            lead_webhook_url=webhook_url,
            lead_webhook_secret=webhook_secret,
            import_batch=_int(e, "EVENTS_IMPORT_BATCH", 500),
            operation_batch=_int(e, "EVENTS_OPERATION_BATCH", 1000),
            export_timeout_s=_int(e, "EVENTS_EXPORT_TIMEOUT_S", 600),
            export_max_rows=_int(e, "EVENTS_EXPORT_MAX_ROWS", 2_000_000),
            export_concurrency=_int(e, "EVENTS_EXPORT_CONCURRENCY", 2),
            trigger_dispatch=_bool(e, "EVENT_TRIGGER_DISPATCH", False),
            console_secrets=_secrets(e, "EVENTS_CONSOLE_SECRET"),
            console_secure_cookie=(
                _bool(e, "EVENTS_CONSOLE_SECURE_COOKIE", False)
                if e.get("EVENTS_CONSOLE_SECURE_COOKIE", "").strip()
                else None
            ),
            register_batch_max=_int(e, "EVENTS_REGISTER_BATCH_MAX", 64),
            smtp=relay,
            mail_from=_mail_from(e, "EVENTS_MAIL_FROM", required=relay is not None),
            smtp_ca_file=_file(e, "EVENTS_SMTP_CA_FILE"),
            smtp_rate=_int(e, "EVENTS_SMTP_RATE", 20, minimum=0),
            smtp_concurrency=_int(e, "EVENTS_SMTP_CONCURRENCY", 4),
            smtp_timeout_s=_int(e, "EVENTS_SMTP_TIMEOUT_S", 30),
            sms_gateway_url=gateway_url,
            sms_gateway_secret=gateway_secret,
            sms_gateway_timeout_s=_int(e, "EVENTS_SMS_GATEWAY_TIMEOUT_S", 10),
            sms_gateway_concurrency=_int(e, "EVENTS_SMS_GATEWAY_CONCURRENCY", 4),
            outbound_proxy=_proxy(e, "EVENTS_OUTBOUND_PROXY"),
            delivery_batch=_int(e, "EVENTS_DELIVERY_BATCH", 100),
            delivery_lease_s=_int(e, "EVENTS_DELIVERY_LEASE_S", 300),
            webhook_allow_private=_bool(e, "EVENTS_WEBHOOK_ALLOW_PRIVATE", False),
            webhook_lease_s=_int(e, "EVENTS_WEBHOOK_LEASE_S", 120, minimum=15),
            webhook_retention_days=_int(e, "EVENTS_WEBHOOK_RETENTION_DAYS", 30),
            document_concurrency=_int(e, "EVENTS_DOCUMENT_CONCURRENCY", _cores()),
        )
