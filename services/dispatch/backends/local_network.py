"""What a local pod can reach on the network: everything outside this host, nothing of it.

A local pod keeps the host's network (it clones repositories and installs packages), so
without more a pod's code could open any port listening on the host: Redis and PostgreSQL
on loopback, the web server, anything bound to one of the host's addresses. It is closed in
the kernel, by a packet filter keyed on the pod's user: every local pod runs as the
dedicated pod user (SAGAN_LOCAL_POD_USER, possible only when Sagan runs as root), and the
nftables table `inet sagan_local_pods` rejects whatever that user sends to an address of
this host — `fib daddr type local`, which is every loopback address and every address of
every interface, as the kernel's own routing table knows them at the moment the packet is
sent, so an address added later is covered too — and to a broadcast or multicast address.
A TCP attempt is answered with a reset (the pod sees "connection refused" at once, never a
hang), anything else with an ICMP port-unreachable.

Two exceptions, both destinations the pod is told to use by Sagan itself, never by the
plan: the origin of its progress and artifact URLs (the pod API: the web server when
SAGAN_BASE_URL names this host) and a DNS resolver of /etc/resolv.conf that listens on this
host (port 53 only). Each is one address and one port in the table's sets, added when a pod
starts and kept (never timed out: an exception that expired under a running pod would cut
it off its pod API); they come from Sagan's settings, so a host gathers only a few.

Where the filter cannot be set up — Sagan is not root (there is no separate user to filter
on), `nft` is missing or the kernel refuses the table — `check` raises NotIsolated and the
local backend refuses to start the pod, unless the owner opted in to unisolated local pods
(SAGAN_LOCAL_PODS_UNISOLATED=1): then the pod runs with the host's loopback in reach, and
the worker's log says so at every pod.
"""
from __future__ import annotations

import ipaddress
import shutil
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

TABLE = "sagan_local_pods"
NFT_TIMEOUT_SECONDS = 20
RESOLV_CONF = Path("/etc/resolv.conf")
OPT_IN = "SAGAN_LOCAL_PODS_UNISOLATED"


class NotIsolated(Exception):
    """The filter that keeps a pod off the host could not be set up; the message says why and what to do."""


def nft_path() -> str | None:
    return shutil.which("nft")


def ruleset(uid: int, api: list[tuple[str, str, int]], dns: list[tuple[str, str, int]]) -> str:
    """The nft script (one atomic transaction) that installs the table, idempotently, with the
    pod user and the exceptions. `api` and `dns` are (address, protocol, port) triples.

    The table is declared with `add` (kept if present) and its chains are flushed and
    refilled, so running it again changes nothing but what it adds to the sets."""
    lines = [
        f"add table inet {TABLE}",
        f"add set inet {TABLE} pod_users {{ type uid; }}",
        f"add set inet {TABLE} allowed4 {{ type ipv4_addr . inet_proto . inet_service; }}",
        f"add set inet {TABLE} allowed6 {{ type ipv6_addr . inet_proto . inet_service; }}",
        f"add chain inet {TABLE} output {{ type filter hook output priority filter; policy accept; }}",
        f"add chain inet {TABLE} pod",
        f"flush chain inet {TABLE} output",
        f"flush chain inet {TABLE} pod",
        # Only packets a pod's process sends (the socket's owner is the pod user) go on.
        f"add rule inet {TABLE} output meta skuid @pod_users jump pod",
        f"add rule inet {TABLE} pod ip daddr . meta l4proto . th dport @allowed4 accept",
        f"add rule inet {TABLE} pod ip6 daddr . meta l4proto . th dport @allowed6 accept",
        f"add rule inet {TABLE} pod fib daddr type {{ local, broadcast, multicast }} meta l4proto tcp "
        "reject with tcp reset",
        f"add rule inet {TABLE} pod fib daddr type {{ local, broadcast, multicast }} "
        "reject with icmpx port-unreachable",
        f"add element inet {TABLE} pod_users {{ {int(uid)} }}",
    ]
    for address, protocol, port in [*api, *dns]:
        family = "allowed6" if ipaddress.ip_address(address).version == 6 else "allowed4"
        lines.append(f"add element inet {TABLE} {family} {{ {address} . {protocol} . {int(port)} }}")
    return "\n".join(lines) + "\n"


def api_destinations(urls: list[str]) -> list[tuple[str, str, int]]:
    """(address, "tcp", port) for each address the pod API's URLs resolve to.

    Resolved here, when the pod starts: the filter matches addresses, not names. A name that
    does not resolve adds nothing (the pod's posts then fail as they would anyway)."""
    found: list[tuple[str, str, int]] = []
    for url in urls:
        parts = urlsplit(url or "")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            continue
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            continue
        for info in infos:
            address = info[4][0].split("%")[0]
            entry = (str(ipaddress.ip_address(address)), "tcp", port)
            if entry not in found:
                found.append(entry)
    return found


def resolver_destinations(resolv_conf: Path = RESOLV_CONF) -> list[tuple[str, str, int]]:
    """The resolvers of resolv.conf, port 53 over UDP and TCP (a pod must resolve names to
    clone and install; a resolver on this host, such as systemd-resolved's 127.0.0.53,
    would otherwise be refused like any other local port)."""
    try:
        text = resolv_conf.read_text()
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            try:
                address = str(ipaddress.ip_address(fields[1].split("%")[0]))
            except ValueError:
                continue
            found += [(address, "udp", 53), (address, "tcp", 53)]
    return found


def missing_prerequisite(is_root: bool) -> str | None:
    """Why the filter could not be set up on this host (not root, no nft), without touching
    the firewall; None when it can be tried. For start-up messages: `check` is the proof."""
    if not is_root:
        return "Sagan is not running as root, so local pods cannot run as a user of their own to filter on"
    if nft_path() is None:
        return "nft is not installed (Debian/Ubuntu: apt-get install nftables)"
    return None


def check(uid: int | None, api_urls: list[str]) -> None:
    """Install (or refresh) the filter for pods running as `uid`; NotIsolated when it cannot be.

    `uid` is None when the pods would run as Sagan's own user (Sagan is not root): a filter on
    that user would cut Sagan off its own services, so there is nothing to filter on."""
    if uid is None:
        raise NotIsolated(
            "Local pods are kept off this host's own network services by a packet filter on the pod "
            "user, which needs Sagan's worker to run as root (it then starts pods as "
            "SAGAN_LOCAL_POD_USER). Run the worker serving the local queue as root, or set "
            f"{OPT_IN}=1 to run local pods without it (they can then reach every service on this "
            "host's loopback: see docs/pods.md (Local pods)).")
    nft = nft_path()
    if nft is None:
        raise NotIsolated(
            "Local pods are kept off this host's own network services by an nftables filter, and `nft` "
            "is not installed (Debian/Ubuntu: apt-get install nftables). Install it, or set "
            f"{OPT_IN}=1 to run local pods without it (see docs/pods.md (Local pods)).")
    script = ruleset(uid, api_destinations(api_urls), resolver_destinations())
    try:
        done = subprocess.run([nft, "-f", "-"], input=script, capture_output=True, text=True,
                              timeout=NFT_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NotIsolated(f"Could not run nft to keep local pods off this host ({exc}). "
                          f"Fix it, or set {OPT_IN}=1 (see docs/pods.md (Local pods)).") from None
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        raise NotIsolated(f"nft refused the filter that keeps local pods off this host "
                          f"({reason[-1] if reason else f'exit {done.returncode}'}). The kernel needs "
                          f"nf_tables with the fib and reject expressions. Fix it, or set {OPT_IN}=1 "
                          "(see docs/pods.md (Local pods)).")

