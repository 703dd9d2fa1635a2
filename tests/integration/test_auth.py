"""Owner login and logout (SPEC §10): hashed passwords, throttling, safe redirects."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from models import User, db
from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, csrf_from


def _login(client, email=OWNER_EMAIL, password=OWNER_PASSWORD, next_url=None):
    page = client.get("/login")
    url = "/login" if next_url is None else "/login?" + next_url
    return client.post(url, data={"email": email, "password": password,
                                  "csrf_token": csrf_from(page.text)})


def _is_logged_in(client) -> bool:
    response = client.get("/")
    return response.status_code == 200


def test_password_is_stored_as_an_argon2_hash(app, auth):
    """Is the owner's password kept as an argon2id hash, never the plaintext?"""
    auth.create_owner()
    with app.app_context():
        user = db.session.scalar(sa.select(User))
        assert user.password_hash.startswith("$argon2id$")
        assert OWNER_PASSWORD not in user.password_hash


def test_login_with_right_password_opens_the_board(client, auth):
    """Does the right password redirect to the board and keep a session?"""
    auth.create_owner()
    response = _login(client)
    assert response.status_code == 302
    assert response.headers["Location"] == "/"
    assert _is_logged_in(client)


def test_session_cookie_is_httponly_and_samesite_lax(client, auth):
    """Is the session cookie HttpOnly and SameSite=Lax?"""
    auth.create_owner()
    response = _login(client)
    cookie = next(h for h in response.headers.getlist("Set-Cookie") if h.startswith("session="))
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie


def test_remember_me_cookie_is_httponly_and_samesite_lax(client, auth):
    """Is the "keep me logged in" cookie HttpOnly and SameSite=Lax like the session cookie?"""
    auth.create_owner()
    page = client.get("/login")
    response = client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                           "remember": "1", "csrf_token": csrf_from(page.text)})
    cookie = next(h for h in response.headers.getlist("Set-Cookie") if h.startswith("remember_token="))
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie


@pytest.mark.parametrize("email, password", [
    (OWNER_EMAIL, "wrong-password-123"),
    ("nobody@example.com", OWNER_PASSWORD),
])
def test_wrong_credentials_answer_401_with_a_message_and_no_session(client, auth, email, password):
    """Does a wrong password (or unknown email) get the same 401 message and no session?"""
    auth.create_owner()
    response = _login(client, email, password)
    assert response.status_code == 401
    assert "Wrong email or password." in response.text
    assert 'name="password"' in response.text  # the form is shown again
    assert not _is_logged_in(client)


def test_sixth_attempt_after_five_failures_is_rate_limited(client, auth):
    """After 5 failures from one address, is the 6th refused with 429 even with the right password?"""
    auth.create_owner()
    for _ in range(5):
        assert _login(client, password="not-the-password").status_code == 401
    response = _login(client)
    assert response.status_code == 429
    assert "Too many failed logins" in response.text
    assert not _is_logged_in(client)


def test_failures_from_another_address_do_not_lock_the_owner_out(app, auth):
    """Are failures counted per address (another address can still log in)?"""
    auth.create_owner()
    attacker = app.test_client()
    attacker.environ_base["REMOTE_ADDR"] = "203.0.113.9"
    for _ in range(6):
        _login(attacker, password="guessing-password")
    owner_client = app.test_client()
    assert _login(owner_client).status_code == 302


def test_successful_login_resets_the_failure_count(client, auth):
    """After a success, does the address get a fresh allowance of failures?"""
    auth.create_owner()
    for _ in range(4):
        _login(client, password="typo-password-1")
    assert _login(client).status_code == 302
    client.post("/logout", data={"csrf_token": csrf_from(client.get("/").text)})
    for _ in range(4):
        assert _login(client, password="typo-password-2").status_code == 401
    assert _login(client).status_code == 302


@pytest.mark.parametrize("target", [
    "https://evil.example", "//evil.example/path", "/\\evil.example", "https:/evil.example",
    "javascript:alert(1)", "http://localhost.evil.example/", "/\t/evil.example",
])
def test_next_never_redirects_off_site(client, auth, target):
    """Does `next` pointing off-site (or at a scheme) land on the board instead?"""
    from urllib.parse import urlencode
    auth.create_owner()
    response = _login(client, next_url=urlencode({"next": target}))
    assert response.status_code == 302
    assert response.headers["Location"] == "/"


def test_next_to_a_local_page_is_followed(client, auth):
    """Does a protected page redirect to login and, after login, back to itself?"""
    auth.create_owner()
    first = client.get("/experiments?sort=title")
    assert first.status_code == 302
    assert first.headers["Location"].startswith("/login?next=")
    login_url = first.headers["Location"]
    page = client.get(login_url)
    response = client.post(login_url, data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                            "csrf_token": csrf_from(page.text)})
    assert response.headers["Location"] == "/experiments?sort=title"


def test_logout_is_not_a_get(client, owner):
    """Is GET /logout refused (405) and the owner still logged in?"""
    assert client.get("/logout").status_code == 405
    assert _is_logged_in(client)


def test_logout_without_csrf_is_refused(client, owner):
    """Does a POST /logout without a CSRF token answer 400 and keep the session?"""
    response = client.post("/logout")
    assert response.status_code == 400
    assert "Reload the page" in response.text
    assert _is_logged_in(client)


def test_logout_with_csrf_ends_the_session(client, owner):
    """Does POST /logout with the token end the session and send the browser to login?"""
    response = owner.logout()
    assert response.status_code == 303
    assert response.headers["Location"] == "/login"
    response = client.get("/")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login")


def test_login_form_itself_is_csrf_protected(client, auth):
    """Is a login POST without the form's CSRF token refused (no login CSRF)?"""
    auth.create_owner()
    response = client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD})
    assert response.status_code == 400
    assert not _is_logged_in(client)


def test_password_change_ends_existing_sessions(app, client, owner, runner):
    """After `users set-password`, is the old session signed out?"""
    result = runner.invoke(args=["users", "set-password", "--email", OWNER_EMAIL,
                                 "--password", "a-brand-new-password"])
    assert result.exit_code == 0, result.output
    assert not _is_logged_in(client)


def test_expired_htmx_session_returns_to_the_page_after_login(client, auth):
    """When an htmx poll finds no session, does login bring the owner back to that page?"""
    auth.create_owner()
    response = client.get("/board/columns", headers={
        "HX-Request": "true", "HX-Current-URL": "http://localhost/experiments?sort=title"})
    assert response.status_code == 401
    login_url = response.headers["HX-Redirect"]
    page = client.get(login_url)
    after = client.post(login_url, data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                         "csrf_token": csrf_from(page.text)})
    assert after.headers["Location"] == "/experiments?sort=title"


def test_htmx_return_path_from_another_site_is_ignored(client, auth):
    """Does an HX-Current-URL on another host send the owner to the board after login?"""
    response = client.get("/board/columns", headers={
        "HX-Request": "true", "HX-Current-URL": "https://evil.example/phish"})
    assert "evil.example" not in response.headers["HX-Redirect"]


def test_failure_count_expires_after_a_minute(app, client, auth):
    """Are login failures counted in a window of one minute (the counter expires)?"""
    import redis
    auth.create_owner()
    _login(client, password="wrong-password-1")
    conn = redis.Redis.from_url(app.config["REDIS_URL"])
    keys = conn.keys("*login*")
    assert len(keys) == 1
    assert 0 < conn.ttl(keys[0]) <= 60
    conn.delete(keys[0])  # what a minute's wait does
    for _ in range(4):
        _login(client, password="wrong-password-2")
    assert _login(client).status_code == 302
