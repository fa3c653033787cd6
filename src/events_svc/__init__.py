"""events-svc: event registration over PostgreSQL.

A host imports `create_app` (an ASGI app it can mount) or the two routers
`public_router()` / `admin_router()`; standalone, `events-svc serve` runs it.
"""

from events_svc.app import admin_router, create_app, public_router
from events_svc.settings import Settings
from events_svc.surface import EventSurface

__all__ = ["EventSurface", "Settings", "admin_router", "create_app", "public_router"]
