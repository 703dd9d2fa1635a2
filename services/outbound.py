"""Which outbound URLs Sagan may call (the owner's webhook, the research repository):
https (or the schemes a caller allows) to hosts that resolve to public addresses only, so a
setting cannot point Sagan at its own network or the cloud metadata service.
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from flask import current_app

from services.errors import ValidationError


class OutboundRefused(ValidationError):
    """An outbound URL's host is (now) private or does not resolve: nothing was sent."""

    code = "outbound_refused"


def _forbidden(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if getattr(ip, "ipv4_mapped", None):  # ::ffff:127.0.0.1 is 127.0.0.1
        ip = ip.ipv4_mapped
    return ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_unspecified \
        or ip.is_multicast


def resolve_allowed(host: str, *, field: str = "url") -> list[str]:
    """The addresses `host` resolves to, each checked: OutboundRefused if it does not resolve,
    or (unless SAGAN_ALLOW_PRIVATE_URLS) if any address is private, loopback, link-local
    (169.254.169.254, the cloud metadata service) or otherwise not public."""
    host = (host or "").strip("[]")
    try:
        addresses = list(dict.fromkeys(info[4][0] for info in socket.getaddrinfo(host, None,
                                                                               type=socket.SOCK_STREAM)))
    except (socket.gaierror, UnicodeError):
        raise OutboundRefused(f"The host {host} does not resolve.", field=field) from None
    if not current_app.config.get("SAGAN_ALLOW_PRIVATE_URLS"):
        for address in addresses:
            if _forbidden(ipaddress.ip_address(address.split("%")[0])):
                raise OutboundRefused(f"{host} resolves to a private or loopback address ({address}); "
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
