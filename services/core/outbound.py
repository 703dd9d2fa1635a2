"""Which outbound URLs Sagan may call (the owner's webhook, the research repository):
https (or the schemes a caller allows) to hosts that resolve to public addresses only, so a
setting cannot point Sagan at its own network or the cloud metadata service.
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from flask import current_app

from services.core.errors import ValidationError


class OutboundRefused(ValidationError):
    """An outbound URL's host is (now) private or does not resolve: nothing was sent."""

    code = "outbound_refused"


# Address blocks that `is_global` calls global on Python 3.11.7 (later releases correct some
# of them), listed so the rule does not depend on the Python version. None of them is where a
# webhook receiver or a git host lives.
_NOT_PUBLIC = tuple(ipaddress.ip_network(block) for block in (
    "192.0.0.0/24",    # IETF protocol assignments (only 192.0.0.9 and .10 are anycast services)
    "192.88.99.0/24",  # the retired 6to4 relay anycast
    "fec0::/10",       # site-local, deprecated but still routed inside some networks
    "64:ff9b:1::/48",  # NAT64 for local use: the IPv4 address behind it is a private one
    "3fff::/20",       # documentation
))
_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches through a translator, if it is one of those
    forms: IPv4-mapped (::ffff:a.b.c.d), 6to4 (2002:AABB:CCDD::/48) or the well-known NAT64
    prefix (64:ff9b::a.b.c.d, which a NAT64 gateway forwards to a.b.c.d)."""
    if ip.ipv4_mapped:
        return ip.ipv4_mapped
    if ip.sixtofour:
        return ip.sixtofour
    if ip in _NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """May Sagan connect to this address? Only if it is globally reachable: `is_global`, not
    `not is_private`, because shared address space (100.64.0.0/10, carrier-grade NAT),
    benchmarking (198.18.0.0/15) and others are neither private nor public. An IPv6 address
    that carries an IPv4 one is judged by the IPv4 address; multicast is never a host, and IPv6
    outside the blocks IANA has allocated (`is_reserved`: the rest of ::/8 such as the old
    IPv4-compatible ::a.b.c.d, and everything outside 2000::/3) is not routed."""
    if ip.version == 6:
        carried = _embedded_ipv4(ip)
        if carried is not None:
            return is_public(carried)
    outside_blocks = all(ip not in block for block in _NOT_PUBLIC if block.version == ip.version)
    return ip.is_global and not ip.is_multicast and not ip.is_reserved and outside_blocks


def resolve_allowed(host: str, *, field: str = "url") -> list[str]:
    """The addresses `host` resolves to, each checked: OutboundRefused if it does not resolve,
    or (unless SAGAN_ALLOW_PRIVATE_URLS) if any address is not public (`is_public`): private,
    loopback, link-local (169.254.169.254, the cloud metadata service), shared, reserved…"""
    host = (host or "").strip("[]")
    try:
        addresses = list(dict.fromkeys(info[4][0] for info in socket.getaddrinfo(host, None,
                                                                               type=socket.SOCK_STREAM)))
    except (socket.gaierror, UnicodeError):
        raise OutboundRefused(f"The host {host} does not resolve.", field=field) from None
    if not current_app.config.get("SAGAN_ALLOW_PRIVATE_URLS"):
        for address in addresses:
            if not is_public(ipaddress.ip_address(address.split("%")[0])):
                raise OutboundRefused(f"{host} resolves to a private, loopback or otherwise non-public address "
                                      f"({address}); "
                                      "set SAGAN_ALLOW_PRIVATE_URLS=1 to allow that.", field=field)
    return addresses


def check_outbound_url(url: str, *, schemes=("https",)) -> str:
    """A configured URL must be https (or the given schemes) and, unless allowed, public."""
    url = (url or "").strip()
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.hostname:
        raise ValidationError(f"The URL must start with {' or '.join(s + '://' for s in schemes)} and name a host.",
                              field="url")
    check_host(parts.hostname)
    return url


def check_host(host: str, *, field: str = "url") -> None:
    """A configured host must resolve to public addresses only — unless SAGAN_ALLOW_PRIVATE_URLS,
    when it is not even looked up (a test or an intranet host may not resolve from here)."""
    if not current_app.config.get("SAGAN_ALLOW_PRIVATE_URLS"):
        resolve_allowed(host, field=field)
