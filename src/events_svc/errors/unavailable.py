"""503: the service cannot answer now, or is not composed for this."""

from __future__ import annotations

from events_svc.errors.base import DomainError


class Busy(DomainError):
    """The object is busy; retry shortly."""

    code = "busy"
    status = 503
    headers = {"Retry-After": "1"}


class CapabilitySecretNotConfigured(DomainError):
    """Capability links are not available: no secret is configured."""

    code = "event_capability_secret_not_configured"
    status = 503


class DatabaseUnavailable(DomainError):
    """The database is unavailable; retry shortly."""

    code = "database_unavailable"
    status = 503
    headers = {"Retry-After": "5"}


class DocumentsBusy(DomainError):
    """Every place for documents in this process stayed taken; retry shortly."""

    code = "documents_busy"
    status = 503
    headers = {"Retry-After": "5"}


class PartnerDirectoryNotComposed(DomainError):
    """No partner directory is wired into this deployment."""

    code = "partner_directory_not_composed"
    status = 503


class PartnerDirectoryUnavailable(DomainError):
    """The partner directory failed or did not answer in time; retry shortly."""

    code = "partner_directory_unavailable"
    status = 503
    headers = {"Retry-After": "5"}


class TemplateRendererNotComposed(DomainError):
    """No template renderer is wired into this deployment: no line can name a template."""

    code = "template_renderer_not_composed"
    status = 503
