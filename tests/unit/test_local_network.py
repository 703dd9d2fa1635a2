"""The pieces of the local pods' network filter that need no root: its exceptions and its script."""
from __future__ import annotations

from services.dispatch.backends import local_network


def test_the_pod_api_exception_is_the_origin_sagan_tells_the_pod():
    """Is the pod API's exception the address and port of its URL (default ports by scheme), and
    nothing for a URL that is not http(s)?"""
    found = local_network.api_destinations(["http://127.0.0.1:5000/api/progress", "http://127.0.0.1:5000/api/x",
                                            "https://[::1]/api/progress", "ssh://git@127.0.0.1/repo.git", ""])
    assert found == [("127.0.0.1", "tcp", 5000), ("::1", "tcp", 443)]


def test_only_resolvers_get_port_53(tmp_path):
    """Are the nameservers of resolv.conf allowed port 53 over UDP and TCP, and nothing else of it read?"""
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("# generated\nnameserver 127.0.0.53\nsearch example.org\nnameserver fe80::1%eth0\n"
                      "nameserver not-an-address\noptions edns0\n")
    assert local_network.resolver_destinations(resolv) == [
        ("127.0.0.53", "udp", 53), ("127.0.0.53", "tcp", 53), ("fe80::1", "udp", 53), ("fe80::1", "tcp", 53)]
    assert local_network.resolver_destinations(tmp_path / "missing") == []


def test_the_script_rejects_every_local_address_for_the_pod_user_only():
    """Does the one transaction filter only the pod user's packets, reject local, broadcast and
    multicast destinations (TCP with a reset), and put each exception in its family's set?"""
    script = local_network.ruleset(1234, [("127.0.0.1", "tcp", 5000)], [("::1", "udp", 53)])
    assert "meta skuid @pod_users jump pod" in script
    assert "add element inet sagan_local_pods pod_users { 1234 }" in script
    assert "fib daddr type { local, broadcast, multicast } meta l4proto tcp reject with tcp reset" in script
    assert "add element inet sagan_local_pods allowed4 { 127.0.0.1 . tcp . 5000 }" in script
    assert "add element inet sagan_local_pods allowed6 { ::1 . udp . 53 }" in script
    # The exceptions come before the rejections.
    assert script.index("@allowed4 accept") < script.index("reject with tcp reset")
