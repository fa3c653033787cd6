"""Where an outgoing request may go: ONE guard, for the webhook URL an operator writes and
for every delivery to it.

A URL is `http` or `https`, with a host and no credentials, and the HTTP client must
read the same host from it as the guard does (else it "cannot be read"). Its host (a name, or an
address written literally) must resolve only to public addresses: never a loopback,
private, link-local, carrier-grade NAT (100.64/10), multicast, unspecified or reserved
one, IPv4 or IPv6. An IPv6 address that carries an IPv4 one at a fixed place (mapped
`::ffff:0:0/96`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/96`) is judged as that IPv4
address. Refused whatever they carry (the IPv4 end a tunnel reaches cannot be judged):
6to4 `2002::/16` and its relays `192.88.99.0/24`, Teredo `2001::/32`, IPv4-compatible
`::/96`, the rest of the local-use NAT64 `64:ff9b:1::/48` (its longer-prefix forms embed
the IPv4 elsewhere), and site-local `fec0::/10`. These are a table of our own, not the
stdlib's flags, which miss some of them and differ between Python versions.
`EVENTS_WEBHOOK_ALLOW_PRIVATE=true` lifts the address rule (a test, or a private network
the operator trusts); the URL's shape is always checked.

The delivery connects to the address the guard approved (`EgressGuard.addresses`, called
by the sender's connection), so a name cannot resolve to a public address for the check
and to a private one for the connection. The resolver is a field: tests give it names of
their own.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import httpx

from events_svc import errors

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
RESOLVE_TIMEOUT_S = 5.0
# IPv6 blocks whose last 32 bits are an IPv4 address, judged as that address (RFC 4291,
# RFC 6052, RFC 8215); checked before `_REFUSED`, which holds a wider block of one of them
_CARRY_IPV4 = tuple(
    ipaddress.IPv6Network(block) for block in ("::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/96")
)
_REFUSED = tuple(
    ipaddress.ip_network(block)
    for block in (
        "100.64.0.0/10",  # carrier-grade NAT (RFC 6598)
        "192.88.99.0/24",  # 6to4 relay anycast (RFC 7526)
        "::/96",  # IPv4-compatible, deprecated (RFC 4291); also :: and ::1
        "2001::/32",  # Teredo: a tunnel to an IPv4 end (RFC 4380)
        "2002::/16",  # 6to4: a tunnel to an IPv4 end (RFC 3056), deprecated (RFC 7526)
        "64:ff9b:1::/48",  # local-use NAT64 outside its /96 form (RFC 8215)
        "fec0::/10",  # site-local, deprecated (RFC 3879)
    )
)


async def system_resolver(host: str, port: int) -> list[str]:
    """The system's answer for `host` (every address, in its order, once each)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public(address: Address) -> bool:
    """Whether a request may go to `address` (see the module docstring)."""
    if isinstance(address, ipaddress.IPv6Address) and any(address in b for b in _CARRY_IPV4):
        return is_public(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address.is_multicast or address.is_unspecified or address.is_reserved:
        return False
    if address.is_loopback or address.is_link_local or address.is_private:
        return False
    if any(address.version == b.version and address in b for b in _REFUSED):
        return False
    return address.is_global


def _refused(detail: str) -> errors.WebhookUrlNotAllowed:
    return errors.WebhookUrlNotAllowed(detail, field="url")


def parse_url(url: str) -> SplitResult:
    """The URL's parts once its shape is right: http(s), a host, no credentials."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError:
        raise _refused("The URL cannot be read.") from None
    if parts.scheme not in ("http", "https"):
        raise _refused("The URL must start with https:// or http://.")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise _refused("The URL must not carry credentials.")
    if not parts.hostname:
        raise _refused("The URL has no host.")
    try:  # the client must read the same host, or the URL is not one we can send to
        sent_to = httpx.URL(url).host
    except (httpx.InvalidURL, ValueError):  # an IDNA refusal is a ValueError
        raise _refused("The URL cannot be read.") from None
    if sent_to.lower() != parts.hostname.lower():
        raise _refused("The URL cannot be read.")
    return parts


def literal(host: str) -> Address | None:
    """The address a host names literally (None: a name to resolve)."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


@dataclass
class EgressGuard:
    """The policy and the resolver (see the module docstring)."""

    allow_private: bool = False
    resolver: Resolver = system_resolver

    async def _resolve(self, host: str, port: int) -> list[Address]:
        """The addresses of `host` (written literally, or resolved); empty: none found."""
        written = literal(host)
        if written is not None:
            return [written]
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                answer = await self.resolver(host, port)
        except (OSError, TimeoutError):
            return []
        return [a for a in (literal(text) for text in answer) if a is not None]

    def _judge(self, found: list[Address]) -> None:
        if not self.allow_private and not all(is_public(a) for a in found):
            raise _refused("The URL's host is not a public address.")

    async def addresses(self, host: str, port: int) -> list[str]:
        """The addresses a connection to `host` may use, in the resolver's order; refused
        (`webhook_url_not_allowed`) when any of them is not public, or none is found."""
        found = await self._resolve(host, port)
        if not found:
            raise _refused("The URL's host does not resolve.")
        self._judge(found)
        return [str(a) for a in found]

    async def check_url(self, url: str) -> None:
        """At write: the shape, and (unless private addresses are allowed) the addresses
        the host resolves to now. A name that does not resolve yet is accepted: every
        delivery checks again before it connects."""
        parts = parse_url(url)
        if self.allow_private:
            return
        port = parts.port or (443 if parts.scheme == "https" else 80)
        self._judge(await self._resolve(parts.hostname or "", port))
