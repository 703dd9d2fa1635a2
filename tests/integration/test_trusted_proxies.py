"""Rate limits count the client behind a trusted reverse proxy, never the proxy itself, and
an untrusted peer cannot pick its address with X-Forwarded-For.

Requests here look the way the documented nginx (docs/deploy.md) sends them: from
127.0.0.1, with `X-Forwarded-For: $proxy_add_x_forwarded_for` — whatever the client sent
in that header, then the address nginx saw.
"""
from __future__ import annotations

import pytest
from werkzeug.test import Client
from werkzeug.wrappers import Request

from app import create_app
from config import TestConfig
from services.core.trusted_proxies import TrustedProxyFix
from tests.conftest import OWNER_PASSWORD, csrf_from

NGINX = "127.0.0.1"


@pytest.fixture
def behind_nginx(app, monkeypatch):
    monkeypatch.setitem(app.config, "SAGAN_TRUSTED_PROXIES", f"{NGINX}, 10.1.0.0/16")
    return app


def _client_via_nginx(app, client_address, *, claimed=None):
    """A test client whose requests arrive from nginx on behalf of `client_address`."""
    client = app.test_client()
    forwarded = f"{claimed}, {client_address}" if claimed else client_address
    client.environ_base.update({"REMOTE_ADDR": NGINX, "HTTP_X_FORWARDED_FOR": forwarded,
                                "HTTP_X_FORWARDED_PROTO": "https",
                                # a browser's same-origin Referer, which CSRF checks on https
                                "HTTP_REFERER": "https://localhost/login"})
    return client


def _login(client, password):
    page = client.get("/login")
    return client.post("/login", data={"email": "owner@example.com", "password": password,
                                       "csrf_token": csrf_from(page.text)})


def test_five_bad_logins_from_one_client_do_not_lock_out_another(behind_nginx, auth):
    """Behind nginx, one client's failures limit that client only; the owner still logs in."""
    auth.create_owner()
    attacker = _client_via_nginx(behind_nginx, "203.0.113.5")
    for _ in range(behind_nginx.config["LOGIN_MAX_FAILURES"]):
        assert _login(attacker, "guessing-password").status_code == 401
    assert _login(attacker, OWNER_PASSWORD).status_code == 429
    owner = _client_via_nginx(behind_nginx, "198.51.100.7")
    assert _login(owner, OWNER_PASSWORD).status_code == 302


def test_without_trusted_proxies_everyone_behind_nginx_is_one_address(app, auth):
    """The failure this fixes: with no trusted proxy configured, nginx's address is all Sagan
    sees, so one client's failures lock out another (the default must stay safe, not smart)."""
    assert not app.config["SAGAN_TRUSTED_PROXIES"]
    auth.create_owner()
    attacker = _client_via_nginx(app, "203.0.113.5")
    for _ in range(app.config["LOGIN_MAX_FAILURES"]):
        _login(attacker, "guessing-password")
    assert _login(_client_via_nginx(app, "198.51.100.7"), OWNER_PASSWORD).status_code == 429


def test_rotating_a_spoofed_forwarded_for_through_nginx_does_not_reset_the_limit(behind_nginx, auth):
    """What a client writes into X-Forwarded-For itself (left of nginx's entry) is never used."""
    auth.create_owner()
    for i in range(behind_nginx.config["LOGIN_MAX_FAILURES"]):
        attacker = _client_via_nginx(behind_nginx, "203.0.113.5", claimed=f"192.0.2.{i}")
        assert _login(attacker, "guessing-password").status_code == 401
    again = _client_via_nginx(behind_nginx, "203.0.113.5", claimed="192.0.2.200")
    assert _login(again, OWNER_PASSWORD).status_code == 429


def test_an_untrusted_peer_cannot_choose_its_address(behind_nginx, auth):
    """A peer that is not a trusted proxy is the client, whatever X-Forwarded-For says."""
    auth.create_owner()
    direct = behind_nginx.test_client()
    direct.environ_base["REMOTE_ADDR"] = "192.0.2.77"
    for i in range(behind_nginx.config["LOGIN_MAX_FAILURES"]):
        direct.environ_base["HTTP_X_FORWARDED_FOR"] = f"198.51.100.{i}"
        assert _login(direct, "guessing-password").status_code == 401
    direct.environ_base["HTTP_X_FORWARDED_FOR"] = "198.51.100.99"
    assert _login(direct, OWNER_PASSWORD).status_code == 429
    # …and the address it claimed was never charged for those failures.
    assert _login(_client_via_nginx(behind_nginx, "198.51.100.1"), OWNER_PASSWORD).status_code == 302


def test_chained_trusted_proxies_are_skipped_to_find_the_client(behind_nginx, auth):
    """A load balancer in 10.1.0.0/16 in front of nginx: the client is the entry before it."""
    auth.create_owner()
    attacker = _client_via_nginx(behind_nginx, "10.1.2.3", claimed="203.0.113.5")  # client, balancer
    for _ in range(behind_nginx.config["LOGIN_MAX_FAILURES"]):
        _login(attacker, "guessing-password")
    assert _login(attacker, OWNER_PASSWORD).status_code == 429
    owner = _client_via_nginx(behind_nginx, "10.1.2.3", claimed="198.51.100.7")
    assert _login(owner, OWNER_PASSWORD).status_code == 302


def test_bad_tokens_from_one_client_do_not_block_pods_behind_nginx(behind_nginx, api_client):
    """Twenty bad bearer tokens from one client leave another client's valid token working."""
    good = api_client("read")
    guesser = _client_via_nginx(behind_nginx, "203.0.113.5")
    for i in range(behind_nginx.config["BEARER_MAX_FAILURES"]):
        assert guesser.get("/api/statuses", headers={"Authorization": f"Bearer sk_guess{i}"}).status_code == 401
    assert guesser.get("/api/statuses", headers={"Authorization": f"Bearer {good.secret}"}).status_code == 429
    pod = _client_via_nginx(behind_nginx, "198.51.100.7")
    assert pod.get("/api/statuses", headers={"Authorization": f"Bearer {good.secret}"}).status_code == 200


def test_the_scheme_comes_from_the_trusted_proxy_only():
    """X-Forwarded-Proto is believed from nginx and ignored from anyone else; X-Forwarded-Host never."""
    seen = {}

    def recorder(environ, start_response):
        request = Request(environ)
        seen.update(scheme=request.scheme, host=request.host, addr=request.remote_addr)
        start_response("204 No Content", [])
        return [b""]

    client = Client(TrustedProxyFix(recorder, {"SAGAN_TRUSTED_PROXIES": NGINX}))
    client.get("/", environ_base={"REMOTE_ADDR": NGINX}, headers={
        "X-Forwarded-For": "203.0.113.5", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example"})
    assert seen == {"scheme": "https", "host": "localhost", "addr": "203.0.113.5"}
    client.get("/", environ_base={"REMOTE_ADDR": "192.0.2.77"}, headers={
        "X-Forwarded-For": "1.2.3.4", "X-Forwarded-Proto": "https"})
    assert seen == {"scheme": "http", "host": "localhost", "addr": "192.0.2.77"}


@pytest.mark.parametrize("value", ["127.0.0.1, nginx.internal", "10.0.0.0/33", "300.1.1.1"])
def test_a_malformed_trusted_proxy_list_stops_start_up(value):
    """A typo in SAGAN_TRUSTED_PROXIES is a clear start-up error, not a silently open door."""
    class Misconfigured(TestConfig):
        SAGAN_TRUSTED_PROXIES = value
    with pytest.raises(ValueError, match="SAGAN_TRUSTED_PROXIES"):
        create_app(Misconfigured)
