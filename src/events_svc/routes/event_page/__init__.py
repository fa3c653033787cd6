"""The public event page and its forms (`page`: the routes; `forms`: the forms' fields read
into the intake's models and refusals put beside their fields)."""

from events_svc.routes.event_page.page import PATH, form_router, router

__all__ = ["PATH", "form_router", "router"]
