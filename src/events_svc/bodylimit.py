"""Request body limits: a body larger than its route accepts is refused before parsing.

An ASGI middleware in front of every route. A `Content-Length` over the limit is
answered 413 `payload_too_large` at once, without reading the body; a body sent
without one (chunked) is read up to the limit and refused as soon as it passes
it. Nothing past the limit is ever held in memory, so an anonymous client cannot
make the service read and parse a 200 MB body. The limit is
`EVENTS_MAX_BODY_BYTES` (1 MiB), except on the routes of `ROUTE_LIMITS` (an attendance
import takes up to 5 MiB).
"""

from __future__ import annotations

import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from events_svc import errors
from events_svc.models.attendance import MAX_IMPORT_BYTES

# (path pattern, limit): the routes whose bodies may be larger than the general limit
ROUTE_LIMITS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"/admin/events/[^/]+/attendance-imports/?\Z"), MAX_IMPORT_BYTES),
    (re.compile(r"/studio/events/[^/]+/attendance/?\Z"), MAX_IMPORT_BYTES + 64 * 1024),  # + form
)


def limit_for(path: str, default: int) -> int:
    """The body limit of the route at `path` (matched on the end of the path)."""
    for pattern, limit in ROUTE_LIMITS:
        if pattern.search(path):
            return limit
    return default


class BodyLimit:
    """Refuse request bodies over the limit (413 payload_too_large)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope.get("path", ""), self.limit)
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            await _refuse(send, limit)
            return
        # read the body now (at most `limit` bytes), then hand it to the app as it came
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([], message, receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _refuse(send, limit)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(chunks, None, receive), send)


def _replay(chunks: list[bytes], last: Message | None, receive: Receive) -> Receive:
    """A receive that answers the body read so far, then defers to the real one."""
    pending: list[Message] = (
        [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]
        if last is None
        else [last]
    )

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay


async def _refuse(send: Send, limit: int) -> None:
    refusal = errors.PayloadTooLarge(
        f"The request body is larger than {limit} bytes.", limit_bytes=limit
    )
    body = json.dumps(refusal.body()).encode()
    await send(
        {
            "type": "http.response.start",
            "status": refusal.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
