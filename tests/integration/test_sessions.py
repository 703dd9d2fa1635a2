"""Sessions end on the server: a cookie copied before logout stops working,
"sign out everywhere" ends every other browser, remember-me lasts 30 days, and the CSRF
secret is new after each login."""
from __future__ import annotations

from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, csrf_from


def _is_logged_in(client) -> bool:
    return client.get("/").status_code == 200


def _copy_cookies(source, target) -> None:
    """A stolen cookie jar: every cookie of `source` set on `target`."""
    for name in ("session", "remember_token"):
        cookie = source.get_cookie(name)
        if cookie is not None:
            target.set_cookie(name, cookie.value)


def _login(client, remember=False):
    page = client.get("/login")
    data = {"email": OWNER_EMAIL, "password": OWNER_PASSWORD, "csrf_token": csrf_from(page.text)}
    if remember:
        data["remember"] = "1"
    return client.post("/login", data=data)


def test_a_session_cookie_copied_before_logout_is_refused_after_it(app, client, auth):
    """Does a session cookie captured before logout stop working once the owner logs out?"""
    auth.create_owner()
    _login(client)
    thief = app.test_client()
    _copy_cookies(client, thief)
    assert _is_logged_in(thief)  # the attack: the copy works while the owner is signed in
    auth.logout()
    assert not _is_logged_in(client)
    assert not _is_logged_in(thief)
    assert thief.get("/").headers["Location"].startswith("/login")


def test_a_remember_me_cookie_copied_before_logout_is_refused_after_it(app, client, auth):
    """Does a captured remember-me cookie (without its session) stop signing anyone in after logout?"""
    auth.create_owner()
    _login(client, remember=True)
    thief = app.test_client()
    thief.set_cookie("remember_token", client.get_cookie("remember_token").value)
    assert _is_logged_in(thief)
    auth.logout()
    fresh = app.test_client()
    fresh.set_cookie("remember_token", thief.get_cookie("remember_token").value)
    assert not _is_logged_in(fresh)


def test_sign_out_everywhere_ends_other_browsers_and_keeps_this_one(app, client, auth):
    """Does "sign out everywhere else" end another browser's session and remember-me cookie,
    while the browser that asked stays signed in?"""
    auth.create_owner()
    _login(client)
    laptop = app.test_client()
    _login(laptop, remember=True)
    stolen = app.test_client()
    _copy_cookies(laptop, stolen)
    response = client.post("/logout/everywhere", data={"csrf_token": auth.csrf()})
    assert response.status_code == 303
    assert response.headers["Location"].startswith("/settings")
    assert _is_logged_in(client)
    assert "signed out" in client.get("/settings?signed_out=1").text
    assert not _is_logged_in(laptop)
    assert not _is_logged_in(stolen)


def test_sign_out_everywhere_needs_csrf(app, client, owner):
    """Is a cross-site POST to /logout/everywhere (no CSRF token) refused and nothing ended?"""
    other = app.test_client()
    _login(other)
    assert client.post("/logout/everywhere").status_code == 400
    assert _is_logged_in(other) and _is_logged_in(client)


def test_remember_me_lasts_at_most_thirty_days(app, client, auth):
    """Does the remember-me cookie expire within 30 days, not Flask-Login's 365?"""
    auth.create_owner()
    response = _login(client, remember=True)
    cookie = next(h for h in response.headers.getlist("Set-Cookie") if h.startswith("remember_token="))
    expires = next(part.split("=", 1)[1] for part in cookie.split("; ") if part.lower().startswith("expires="))
    days = (parsedate_to_datetime(expires) - datetime.now(timezone.utc)).total_seconds() / 86400
    assert 29 < days <= 30.01


def test_the_csrf_secret_rotates_at_login(app, client, auth):
    """Is a CSRF token from before login (a planted or captured one) useless after login?"""
    auth.create_owner()
    before = csrf_from(client.get("/login").text)
    client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD, "csrf_token": before})
    assert _is_logged_in(client)
    # The pre-login token no longer matches the session's secret: a state change with it fails.
    response = client.post("/logout", data={"csrf_token": before})
    assert response.status_code == 400
    assert _is_logged_in(client)
    after = csrf_from(client.get("/").text)
    assert after != before
    assert client.post("/logout", data={"csrf_token": after}).status_code == 303
