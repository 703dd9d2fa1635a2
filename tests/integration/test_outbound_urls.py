"""Outbound URLs: ssh repository URLs get the same public-host checks as
https and refuse option injection; the webhook's host is re-checked at delivery and the
post goes to the very address checked (DNS rebinding); the repository can be cleared.

DNS is the one outside service here, and `fake_dns` stands in for it: names under `.test`
answer what the test says, at the moment it asks — including a different answer later,
which is exactly what a rebinding DNS server does (a short TTL, then a private address).
Every other name goes to the real resolver. Everything else is real: the settings forms,
the webhook job's code, httpx, a loopback TCP listener and HTTP receiver.
"""
from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from models import db
from services.core import outbound, settings
from services.workflow import notify
from tests.integration.code_fixtures import call, tool_context

PUBLIC = "93.184.216.34"


@pytest.fixture
def fake_dns(monkeypatch):
    """{name: [addresses]} that socket.getaddrinfo answers for `.test` names; `asked` counts lookups."""
    answers: dict[str, list[str]] = {}
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name and name.endswith(".test"):
            asked.append(name)
            if name not in answers:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                     (a, port or 0, 0, 0) if ":" in a else (a, port or 0)) for a in answers[name]]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, asked


@pytest.fixture
def public_only(app, monkeypatch):
    """The production rule: no private, loopback or link-local hosts (tests allow them by default)."""
    monkeypatch.setitem(app.config, "SAGAN_ALLOW_PRIVATE_URLS", False)


def _save_repo(client, owner, url):
    return client.post("/settings/research-repository", data={"research_repo_url": url, "research_repo_branch": "main",
                                                              "csrf_token": owner.csrf()})


def _stored(app, key="research_repo_url"):
    with app.app_context():
        return settings.get(key)


@pytest.mark.parametrize("url, address", [
    ("git@loopback.test:org/research.git", "127.0.0.1"),
    ("ssh://git@metadata.test/org/research.git", "169.254.169.254"),
    ("git@intranet.test:org/research.git", "10.0.0.5"),
    ("ssh://git@mapped.test:2222/org/research.git", "::ffff:127.0.0.1"),
    ("git@127.0.0.1:org/research.git", None),
    ("ssh://git@[::1]/org/research.git", None),
])
def test_ssh_urls_to_private_hosts_are_refused_like_https(app, client, owner, fake_dns, public_only, url, address):
    """An ssh URL whose host is (or resolves to) a private, loopback or link-local address is
    refused with the reason, and nothing is stored — as https always was."""
    answers, _ = fake_dns
    if address:
        answers[url.split("@", 1)[1].split(":")[0].split("/")[0]] = [address]
    page = _save_repo(client, owner, url)
    assert 'class="error"' in page.text and "non-public address" in page.text, page.text[-2000:]
    assert _stored(app) is None


def test_ssh_url_to_a_public_host_is_kept(app, client, owner, fake_dns, public_only):
    """The same check lets a public ssh host through."""
    answers, _ = fake_dns
    answers["git.public.test"] = [PUBLIC]
    assert _save_repo(client, owner, "git@git.public.test:org/research.git").status_code == 303
    assert _stored(app) == "git@git.public.test:org/research.git"
    assert _save_repo(client, owner, "ssh://git@git.public.test:2222/org/research.git").status_code == 303


@pytest.mark.parametrize("url", [
    "ssh://-oProxyCommand=touch%20pwned/org/research.git",
    "ssh://git@-oProxyCommand/org/research.git",
    "git@-oProxyCommand:org/research.git",
    "-oProxyCommand=x@host.test:org/research.git",
    "git@host.test:-u/research.git",
    "ssh://git@host.test/-upload-pack=x",
    "ssh://git@host.test:0/org/research.git",
    "ext::sh -c touch% pwned",
])
def test_option_injection_in_ssh_urls_is_refused(app, client, owner, fake_dns, url):
    """A host, user or path starting with '-' (ssh would read an option such as
    -oProxyCommand) is refused even where private hosts are allowed; nothing is stored."""
    fake_dns[0]["host.test"] = [PUBLIC]
    page = _save_repo(client, owner, url)
    assert 'class="error"' in page.text, url
    assert _stored(app) is None


# Addresses that are not public although `is_private` is False for most of them (or `is_global`
# is True on Python 3.11.7): each was accepted before for repository and webhook URLs.
NOT_PUBLIC = [
    pytest.param("100.64.0.1", id="shared-address-space-cgnat"),
    pytest.param("192.0.0.8", id="ietf-protocol-assignments"),
    pytest.param("198.18.0.1", id="benchmarking"),
    pytest.param("0.0.0.0", id="unspecified"),
    pytest.param("224.0.0.1", id="ipv4-multicast"),
    pytest.param("192.88.99.1", id="6to4-relay-anycast"),
    pytest.param("::ffff:10.0.0.1", id="ipv4-mapped-private"),
    pytest.param("64:ff9b::7f00:1", id="nat64-of-loopback"),
    pytest.param("64:ff9b:1::a00:1", id="nat64-local-use"),
    pytest.param("2002:7f00:1::1", id="6to4-of-loopback"),
    pytest.param("::127.0.0.1", id="ipv4-compatible-loopback"),
    pytest.param("fc00::1", id="unique-local"),
    pytest.param("fe80::1", id="ipv6-link-local"),
    pytest.param("fec0::1", id="ipv6-site-local"),
    pytest.param("ff0e::1", id="ipv6-global-multicast"),
    pytest.param("3fff::1", id="ipv6-documentation"),
]
# Public addresses, including IPv4 ones reached through NAT64 and 6to4: still accepted.
PUBLIC_ADDRESSES = [PUBLIC, "2606:2800:220:1:248:1893:25c8:1946", "64:ff9b::5db8:d822", "2002:5db8:d822::1"]


def _literal(address: str) -> str:
    return f"[{address}]" if ":" in address else address


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_non_public_addresses_are_refused_for_the_repository_and_the_webhook(app, client, owner, fake_dns,
                                                                            public_only, address):
    """Is every URL whose host is, or resolves to, an address that is not globally reachable
    refused — https and ssh repository URLs and the webhook, by literal and by name — with
    nothing stored?"""
    answers, _ = fake_dns
    answers["sneaky.test"] = [address]
    for url in ("https://sneaky.test/org/research.git", "git@sneaky.test:org/research.git",
                f"ssh://git@{_literal(address)}/org/research.git", f"https://{_literal(address)}/org/research.git"):
        page = _save_repo(client, owner, url)
        assert 'class="error"' in page.text and "non-public address" in page.text, (url, page.text[-2000:])
    for url in ("https://sneaky.test/hook", f"https://{_literal(address)}/hook"):
        page = client.post("/settings/webhook", data={"webhook_url": url, "csrf_token": owner.csrf()})
        assert page.status_code == 200 and "non-public address" in page.text, url
    assert _stored(app) is None and _stored(app, "webhook_url") is None


@pytest.mark.parametrize("address", PUBLIC_ADDRESSES)
def test_public_addresses_are_kept(app, client, owner, fake_dns, public_only, address):
    """Are public hosts, IPv6 and public IPv4 behind NAT64 or 6to4 included, still accepted?"""
    fake_dns[0]["public.test"] = [address]
    assert _save_repo(client, owner, "https://public.test/org/research.git").status_code == 303
    assert client.post("/settings/webhook", data={"webhook_url": "https://public.test/hook",
                                                  "csrf_token": owner.csrf()}).status_code == 303
    assert _stored(app) == "https://public.test/org/research.git"


def test_a_name_with_one_shared_address_among_public_ones_is_refused(app, client, owner, fake_dns, public_only):
    """Does one non-public address among a name's answers refuse it (a client may pick any of them)?"""
    fake_dns[0]["mixed.test"] = [PUBLIC, "100.64.0.1"]
    page = _save_repo(client, owner, "https://mixed.test/org/research.git")
    assert "non-public address (100.64.0.1)" in page.text and _stored(app) is None


class _Listener:
    """A loopback TCP port that counts connections (a stand-in for any internal service)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self):
        self.sock.close()


def test_webhook_host_rebound_to_loopback_is_refused_at_delivery(app, client, owner, fake_dns, public_only,
                                                                 make_experiment):
    """Public when saved, 127.0.0.1 at delivery: the job refuses, and nothing ever connects to
    the internal port (before, httpx resolved the name again itself and connected)."""
    answers, _ = fake_dns
    listener = _Listener()
    try:
        answers["hooks.rebind.test"] = [PUBLIC]
        url = f"https://hooks.rebind.test:{listener.port}/hook"
        saved = client.post("/settings/webhook", data={"webhook_url": url, "csrf_token": owner.csrf()})
        assert saved.status_code == 303 and _stored(app, "webhook_url") == url
        answers["hooks.rebind.test"] = ["127.0.0.1"]  # the rebinding answer
        number = make_experiment("Rebinding", status="plan_pending")
        with app.app_context():
            from services.workflow import experiments
            experiment = experiments.get_experiment(number)
            with pytest.raises(outbound.OutboundRefused, match="non-public address"):
                notify.deliver(experiment.id)
        assert listener.accepted == 0
    finally:
        listener.close()


def test_webhook_host_rebound_to_shared_address_space_is_refused_at_delivery(app, fake_dns, public_only,
                                                                            make_experiment):
    """Is a webhook whose name now answers 100.64.0.1 (carrier-grade NAT space, neither private
    nor public) refused at delivery, not posted to?"""
    answers, asked = fake_dns
    answers["hooks.cgnat.test"] = ["100.64.0.1"]
    with app.app_context():
        settings.put("webhook_url", "https://hooks.cgnat.test/hook")
        db.session.commit()
    number = make_experiment("Shared space", status="plan_pending")
    with app.app_context():
        from services.workflow import experiments
        with pytest.raises(outbound.OutboundRefused, match=r"non-public address \(100\.64\.0\.1\)"):
            notify.deliver(experiments.get_experiment(number).id)
    assert asked == ["hooks.cgnat.test"]


@pytest.fixture
def receiver():
    """A loopback webhook receiver that records each post's Host header and body."""
    received = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received.append({"host": self.headers.get("Host"), "body": json.loads(body)})
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.received = received
    yield server
    server.shutdown()


def test_delivery_resolves_once_and_connects_to_that_address(app, fake_dns, receiver, make_experiment):
    """One lookup per delivery; the connection goes to the address it returned, with the
    configured name in the Host header (a second lookup could have answered anything)."""
    answers, asked = fake_dns
    answers["hooks.pinned.test"] = ["127.0.0.1"]
    with app.app_context():
        settings.put("webhook_url", f"http://hooks.pinned.test:{receiver.server_port}/hook")
        db.session.commit()
    number = make_experiment("Pinned", status="plan_pending")
    with app.app_context():
        from services.workflow import experiments
        assert notify.deliver(experiments.get_experiment(number).id) == 200
    assert asked == ["hooks.pinned.test"]
    assert receiver.received[0]["host"] == f"hooks.pinned.test:{receiver.server_port}"
    assert receiver.received[0]["body"]["experiment"]["number"] == number


def test_the_research_repository_is_clear_only_with_confirmation(app, client, owner):
    """Clearing needs the box ticked (else an error and nothing changes); then URL, branch and
    commands are all gone and the clear form no longer shows."""
    with app.app_context():
        for key, value in (("research_repo_url", "git@github.com:org/research.git"), ("research_repo_branch", "dev"),
                           ("research_repo_test_command", "pytest -q"), ("research_repo_lint_command", "ruff .")):
            settings.put(key, value)
        db.session.commit()
    assert "Clear repository" in client.get("/settings").text
    refused = client.post("/settings/research-repository/clear", data={"csrf_token": owner.csrf()})
    assert refused.status_code == 200 and "Tick the box to confirm" in refused.text
    assert _stored(app) == "git@github.com:org/research.git"
    forged = client.post("/settings/research-repository/clear", data={"confirm": "yes"})
    assert forged.status_code == 400 and _stored(app) == "git@github.com:org/research.git"  # CSRF
    cleared = client.post("/settings/research-repository/clear", data={"confirm": "yes", "csrf_token": owner.csrf()})
    assert cleared.status_code == 303
    with app.app_context():
        assert {key: settings.get(key) for key in settings.REPO_KEYS} == dict.fromkeys(settings.REPO_KEYS)
    assert "Clear repository" not in client.get("/settings").text


def test_code_tools_recheck_the_repository_host_before_fetching(app, fake_dns, public_only, make_experiment,
                                                                monkeypatch):
    """A repository host that resolves privately by the time a worktree is made is not cloned."""
    answers, _ = fake_dns
    answers["repo.rebind.test"] = ["127.0.0.1"]
    base = Path(tempfile.mkdtemp(prefix="sagan-rebind-", dir="/tmp"))
    base.chmod(0o711)  # the sandbox user must be able to walk down to worktrees
    monkeypatch.setitem(app.config, "SAGAN_WORKSPACES_DIR", str(base / "workspaces"))
    with app.app_context():
        settings.put("research_repo_url", "https://repo.rebind.test/org/research.git")
        db.session.commit()
    number = make_experiment("Rebinding repository", status="implementing")
    with app.app_context():
        result = call(tool_context(number), "list_files")
    assert result.is_error and "not reachable safely" in result.content and "non-public address" in result.content
    try:
        assert not list((base / "workspaces").glob("*/repo.git"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
