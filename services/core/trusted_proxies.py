"""Which address a request came from, behind the reverse proxies the owner trusts.

Rate limits (logins, bad bearer tokens, share pages) count per client address. Behind the
documented nginx deployment every request arrives from the proxy, so without this one
address was everybody: five bad logins from anyone locked the owner out, twenty bad
tokens blocked every pod.

SAGAN_TRUSTED_PROXIES lists the proxies' addresses or networks. Only when the direct peer
is one of them are the forwarded headers believed, through werkzeug's ProxyFix:

- the client is the right-most X-Forwarded-For entry that is not itself a trusted proxy
  (nginx's `$proxy_add_x_forwarded_for` appends the peer it saw, so entries to the left
  of that are whatever the client chose to send, and are never used);
- X-Forwarded-Proto from the first proxy sets the scheme; X-Forwarded-Host is never
  believed (nginx passes a client's own header through unless told otherwise, and the
  host feeds absolute URLs).

An untrusted peer's forwarded headers are ignored: it is the client.
"""
from __future__ import annotations

import ipaddress
from functools import lru_cache

from werkzeug.middleware.proxy_fix import ProxyFix

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def parse(raw: str) -> tuple[Network, ...]:
    """The networks in a comma-separated list of addresses and CIDR blocks; ValueError if one is not."""
    networks = []
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"SAGAN_TRUSTED_PROXIES: {item!r} is not an IP address or network "
                             "(e.g. 127.0.0.1, 10.0.0.0/8, ::1).") from None
    return tuple(networks)


def _is_trusted(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False  # "unknown", a hostname, garbage: never a proxy we trust
    return any(ip in network for network in networks)


def trusted_hops(environ: dict, networks: tuple[Network, ...]) -> int:
    """How many X-Forwarded-For entries, counted from the right, trusted proxies wrote (0: none)."""
    if not networks or not _is_trusted(environ.get("REMOTE_ADDR", ""), networks):
        return 0
    chain = [part.strip() for part in environ.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    hops = 1
    # chain[-hops] is the peer the hops-th proxy saw; while that is a proxy too, look one further left.
    while hops < len(chain) and _is_trusted(chain[-hops], networks):
        hops += 1
    return hops


class TrustedProxyFix:
    """WSGI middleware: ProxyFix for requests from trusted proxies, nothing for anyone else.

    The list is read from the app's config on each request (parsed once per value), so
    it follows the configuration rather than a copy taken at start-up.
    """

    def __init__(self, wsgi_app, config):
        self.wsgi_app = wsgi_app
        self.config = config

    def __call__(self, environ, start_response):
        hops = trusted_hops(environ, parse(self.config.get("SAGAN_TRUSTED_PROXIES") or ""))
        if hops == 0:
            return self.wsgi_app(environ, start_response)
        return ProxyFix(self.wsgi_app, x_for=hops, x_proto=1, x_host=0, x_port=0, x_prefix=0)(
            environ, start_response)
