"""Browser fixtures: the real app served on a free port, and Chromium driven by Playwright.

The server shares the session `app` from tests/conftest.py, so the schema built by the
migrations and the per-test cleanup (empty tables, empty Redis database) apply here too.
Chromium is Debian's (/usr/bin/chromium); a missing browser fails the run, it never skips.
"""
from __future__ import annotations

import pytest

from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD
from tests.e2e.actions import DESKTOP
from tests.e2e.live import CSP_RECORDER, LiveServer, chromium_missing_message, launch_chromium


@pytest.fixture(scope="session")
def live_server(app):
    """The app behind a real HTTP server on 127.0.0.1, for the whole session."""
    with LiveServer(app) as server:
        yield server


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium per session."""
    problem = chromium_missing_message()
    if problem:
        pytest.fail(problem, pytrace=False)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        yield chromium
        chromium.close()


class BrowserSession:
    """A fresh browser context (own cookies) with everything its pages logged."""

    def __init__(self, browser, base_url: str, viewport: dict, color_scheme: str = "light"):
        self.context = browser.new_context(base_url=base_url, viewport=viewport,
                                           color_scheme=color_scheme)
        self.context.add_init_script(CSP_RECORDER)
        self.console: list[str] = []
        self.page_errors: list[str] = []
        self.page = self.new_page()

    def new_page(self):
        page = self.context.new_page()
        page.set_default_timeout(10_000)
        page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
        page.on("pageerror", lambda exc: self.page_errors.append(str(exc)))
        return page

    def login(self, email: str = OWNER_EMAIL, password: str = OWNER_PASSWORD):
        """Log in through the real login form and land on the board."""
        page = self.page
        page.goto("/login")
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(lambda url: not url.rstrip("/").endswith("/login"))
        return page

    def csp_problems(self) -> list[str]:
        """CSP refusals seen in the console, or recorded by the page itself."""
        problems = [m for m in self.console if "content security policy" in m.lower()]
        for page in self.context.pages:
            problems += page.evaluate("window.__cspViolations || []")
        return problems

    def close(self):
        self.context.close()


@pytest.fixture
def browser_session(browser, live_server):
    """Factory for isolated browser contexts (a second tab of another device, say)."""
    sessions: list[BrowserSession] = []

    def make(viewport: dict | None = None, color_scheme: str = "light") -> BrowserSession:
        session = BrowserSession(browser, live_server.url, viewport or DESKTOP, color_scheme)
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()


@pytest.fixture
def owner_account(auth):
    """The owner account (not logged in anywhere yet)."""
    auth.create_owner()
    return auth


@pytest.fixture
def fast_board_poll(app, monkeypatch):
    """The board polls every second instead of every five, for tests that wait on it."""
    monkeypatch.setitem(app.config, "POLL_BOARD_SECONDS", 1)
    return 1
