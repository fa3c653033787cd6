"""A real HTTP receiver for the webhook probes: a threading HTTP/1.1 server on loopback
(keep-alive) that records every request and answers by a script.

`script` is a list of answers taken one per request (then `default`): a status as text
(`"200"`, `"500"`, `"410"`), `"302"` (a redirect to `/elsewhere` on the same server),
`"hang"` (answer nothing for `hang_s`), `"slow"` (wait `delay_s`, or until `gate` is set
when one is given, then 200) or `"big"`
(200 with a body of `BIG` bytes). Each request records the client's port: a new port is a
new connection. A request whose body stops short (its sender killed mid-send) is not
recorded: no receiver would act on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BIG = 4 * 1024 * 1024


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    port: int = 0

    @property
    def doc(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str = ""
    script: list[str] = field(default_factory=list)
    default: str = "200"
    delay_s: float = 0.0
    hang_s: float = 3.0
    gate: threading.Event | None = None
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: dict[str, int] = field(default_factory=dict)
    most_in_flight: dict[str, int] = field(default_factory=dict)

    def next_answer(self) -> str:
        with self.lock:
            return self.script.pop(0) if self.script else self.default

    def got(self, path: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if path is None or r.path == path]

    async def wait_for(
        self, n: int, path: str | None = None, within: float = 10.0
    ) -> list[Request]:
        """Until `n` requests (to `path`) arrived; fails after `within` seconds."""
        deadline = time.monotonic() + within
        while len(found := self.got(path)) < n:
            assert time.monotonic() < deadline, f"{len(found)} of {n} requests arrived"
            await asyncio.sleep(0.01)
        return found


@contextlib.contextmanager
def receiver(**options: Any) -> Iterator[Receiver]:
    """A started receiver; `url` is its base (`http://127.0.0.1:<port>`)."""
    state = Receiver(**options)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            if len(body) < length:  # the sender died mid-request: nothing was received
                self.close_connection = True
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            with state.lock:
                state.requests.append(
                    Request(self.path, headers, body, time.monotonic(), self.client_address[1])
                )
                state.in_flight[self.path] = state.in_flight.get(self.path, 0) + 1
                state.most_in_flight[self.path] = max(
                    state.most_in_flight.get(self.path, 0), state.in_flight[self.path]
                )
            try:
                self._answer(state.next_answer())
            finally:
                with state.lock:
                    state.in_flight[self.path] -= 1

        def _answer(self, action: str) -> None:
            if action == "hang":
                time.sleep(state.hang_s)
                self.close_connection = True
                return
            if action == "slow":
                if state.gate is not None:
                    state.gate.wait(10)
                else:
                    time.sleep(state.delay_s)
                action = "200"
            if action == "big":
                self.send_response(200)
                self.send_header("content-length", str(BIG))
                self.end_headers()
                with contextlib.suppress(OSError):  # the reader stops early and hangs up
                    for _ in range(BIG // 65536):
                        self.wfile.write(b"x" * 65536)
                self.close_connection = True
                return
            status = int(action)
            self.send_response(status)
            if status in (301, 302, 307, 308):
                self.send_header("location", "/elsewhere")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
