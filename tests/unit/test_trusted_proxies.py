"""Which X-Forwarded-For entry is the client (services/core/trusted_proxies.py), without an app."""
from __future__ import annotations

import pytest

from services.core.trusted_proxies import parse, trusted_hops

PROXIES = parse("127.0.0.1, ::1, 10.1.0.0/16")


@pytest.mark.parametrize("peer, forwarded, hops", [
    ("127.0.0.1", "203.0.113.5", 1),                     # nginx on loopback, one client
    ("::1", "2001:db8::7", 1),                            # the same over IPv6
    ("127.0.0.1", "198.51.100.1, 203.0.113.5", 1),       # the left entry is the client's own claim
    ("127.0.0.1", "203.0.113.5, 10.1.2.3", 2),           # a trusted balancer before nginx is skipped
    ("127.0.0.1", "10.1.2.4, 10.1.2.3", 2),              # all trusted: the left-most is all we know
    ("127.0.0.1", "", 1),                                 # no header: ProxyFix leaves the peer
    ("127.0.0.1", "unknown, 203.0.113.5", 1),            # garbage is never a trusted proxy
    ("192.0.2.50", "203.0.113.5", 0),                    # an untrusted peer: its header is ignored
    ("unknown", "203.0.113.5", 0),
])
def test_trusted_hops(peer, forwarded, hops):
    """How many right-hand entries trusted proxies wrote, so ProxyFix picks the client."""
    assert trusted_hops({"REMOTE_ADDR": peer, "HTTP_X_FORWARDED_FOR": forwarded}, PROXIES) == hops


def test_no_trusted_proxies_means_no_forwarded_header_is_believed():
    """The default (empty) trusts nobody, even loopback."""
    assert parse("") == () and trusted_hops({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}, ()) == 0


@pytest.mark.parametrize("raw", ["localhost", "10.0.0.0/33", "1.2.3", "127.0.0.1;10.0.0.1"])
def test_malformed_entries_are_refused_by_name(raw):
    """A typo names the entry and the setting."""
    with pytest.raises(ValueError, match="SAGAN_TRUSTED_PROXIES"):
        parse(raw)
