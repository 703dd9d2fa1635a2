"""Failed htmx requests are shown, and the Content-Security-Policy holds, in a real browser.

htmx swaps no 4xx/5xx answer, so these check that static/js/sagan.js turns each kind of
failure into a visible, announced toast with the server's own sentence.
"""
from __future__ import annotations

import pytest

from tests.e2e.actions import assert_clean, assert_not_reloaded, move_card, open_board

pytestmark = pytest.mark.browser


def test_expired_csrf_token_shows_reload_toast(browser_session, owner_account, make_experiment):
    """Does a move with a bad CSRF token say so, offer Reload, and work again after reloading?"""
    number = make_experiment("Moved from a tab left open too long")
    session = browser_session()
    page = open_board(session)
    page.evaluate("""() => {
        document.body.setAttribute('hx-headers', '{"X-CSRFToken": "expired"}');
        document.querySelectorAll('input[name=csrf_token]').forEach(i => i.value = 'expired');
    }""")

    move_card(page, number, "planning")

    toast = page.locator("#toasts .toast")
    toast.wait_for()
    assert "CSRF check failed" in toast.inner_text()
    assert "Reload the page" in toast.inner_text()
    assert page.locator(f"[data-column=ideas] #card-{number}").count() == 1  # nothing moved
    assert page.locator("#toasts").get_attribute("aria-live") == "assertive"

    toast.get_by_role("button", name="Reload").click()
    page.wait_for_function("() => window.__saganNoReload === undefined")
    page.locator("#board").wait_for()
    assert page.locator("#toasts .toast").count() == 0
    move_card(page, number, "planning")
    page.locator(f"[data-column=planning] #card-{number}").wait_for()
    assert_clean(session)


def test_not_found_answer_shows_the_servers_sentence(browser_session, owner_account, make_experiment):
    """Does a 404 from an htmx request show the server's message, and can it be dismissed?"""
    make_experiment("Present")
    session = browser_session()
    page = open_board(session)

    page.evaluate("""() => htmx.ajax('POST', '/board/move/99999',
                                     {target: '#board', swap: 'outerHTML', values: {to: 'planning'}})""")

    toast = page.locator("#toasts .toast")
    toast.wait_for()
    assert "99999" in toast.inner_text() or "not found" in toast.inner_text().lower()
    assert toast.get_by_role("button", name="Reload").count() == 0  # reloading would not help
    assert page.locator("#board .column").count() >= 10  # the board was not swapped away
    toast.get_by_role("button", name="Dismiss").click()
    assert page.locator("#toasts .toast").count() == 0
    assert_not_reloaded(page)
    assert_clean(session)


def test_server_error_during_polls_shows_one_toast(browser_session, owner_account, make_experiment,
                                                   fast_board_poll, monkeypatch):
    """Does a poll failing with 500 again and again show one toast, not one per poll?"""
    make_experiment("Board during an outage")
    session = browser_session()
    page = open_board(session)
    from services.workflow import experiments

    def broken_version():
        raise RuntimeError("database went away (test)")

    monkeypatch.setattr(experiments, "board_version", broken_version)
    page.locator("#toasts .toast").wait_for()
    page.wait_for_timeout(2_500)  # a few more failing polls

    assert page.locator("#toasts .toast").count() == 1
    text = page.locator("#toasts .toast").inner_text()
    assert "Something went wrong on our side" in text
    assert "database went away" not in text  # no internals leak to the page
    assert page.locator("#board .column").count() >= 10
    assert_clean(session)


def test_network_failure_toast_clears_once_requests_get_through(browser_session, owner_account,
                                                                make_experiment, fast_board_poll):
    """Does a lost connection show a toast that goes away by itself when polls succeed again?"""
    make_experiment("Board on a flaky train connection")
    session = browser_session()
    page = open_board(session)

    page.route("**/board/columns*", lambda route: route.abort("internetdisconnected"))
    toast = page.locator("#toasts .toast")
    toast.wait_for()
    assert "could not be reached" in toast.inner_text()
    page.unroute("**/board/columns*")
    toast.wait_for(state="detached", timeout=5_000)
    assert_not_reloaded(page)
    assert_clean(session)


def test_pages_send_security_headers(browser_session, owner_account):
    """Does the browser receive the CSP and the other security headers on a page?"""
    session = browser_session()
    response = session.page.goto("/login")
    headers = response.headers
    csp = headers["content-security-policy"]
    for directive in ("script-src 'self'", "object-src 'none'", "base-uri 'self'",
                      "frame-ancestors 'none'", "form-action 'self'"):
        assert directive in csp
    assert "unsafe-eval" not in csp and "unsafe-inline" not in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"


def test_csp_refuses_inline_script_in_the_browser(browser_session, owner_account):
    """Would an injected inline script be refused (so an XSS could not run)?"""
    session = browser_session()
    page = open_board(session)
    ran = page.evaluate("""() => {
        const s = document.createElement('script');
        s.textContent = 'window.__inlineRan = true';
        document.head.appendChild(s);
        return window.__inlineRan === true;
    }""")
    assert ran is False
    page.wait_for_function("() => window.__cspViolations.length > 0")
    assert any("script-src" in v for v in page.evaluate("window.__cspViolations"))
