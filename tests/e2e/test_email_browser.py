"""Email settings and the unsubscribe page in Chromium, on a phone and a laptop, light and
dark: the owner saves the SMTP server, sends a test email that reaches the loopback server,
and a stranger's browser (no login) unsubscribes from one kind through an emailed link."""
from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from models import NotificationEmail, db
from services.core import settings
from services.workflow import email_notify, email_settings
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll, assert_thumb_sized
from tests.fakes.smtp_server import FakeSmtp

TAP_EXEMPT = ".skip-link, label input[type=checkbox], label input[type=radio]"
# The parts of the pages this test is about: the Email panel of Settings, the unsubscribe page.
TAP_SCOPE = "#email, main.share-page"


def _fits(page, viewport, path: str) -> None:
    """No sideways scrolling, and on a phone the email controls thumb-high."""
    assert_no_sideways_scroll(page, path)
    if viewport is PHONE:
        assert_thumb_sized(page, TAP_EXEMPT, path, scope=TAP_SCOPE, both_sides=False)


@pytest.mark.parametrize("viewport, scheme", [(PHONE, "light"), (PHONE, "dark"), (DESKTOP, "light"),
                                              (DESKTOP, "dark")], ids=["phone", "phone-dark", "laptop", "laptop-dark"])
def test_email_settings_and_unsubscribe_fit_and_work(browser_session, owner_account, app, viewport, scheme):
    shots = os.environ.get("SAGAN_EMAIL_SHOTS")
    name = f"{viewport['width']}-{scheme}"
    with app.app_context():  # one email the server refused to the last try
        db.session.add(NotificationEmail(kind="failure", subject="Failed or blocked: #12 Sweep the learning rate",
                                         body_text="-", body_html="-", status="failed", attempts=4,
                                         last_error="The SMTP server refused: 550 5.7.1 Message rejected by policy"))
        db.session.commit()
    with FakeSmtp() as fake:
        session = browser_session(viewport, color_scheme=scheme)
        page = session.login()
        page.goto("/settings#email")
        email = page.locator("#email")
        email.get_by_label("SMTP server").fill(fake.host)
        email.get_by_label("Port", exact=True).fill(str(fake.port))
        email.get_by_label("Security").select_option("none")
        email.get_by_label("From address").fill("sagan@example.org")
        email.get_by_label("Your address").fill("owner@example.org")
        email.get_by_role("button", name="Save email server").click()
        expect(page.get_by_role("status").first).to_contain_text("Saved")
        page.locator("#email").get_by_role("button", name="Send a test email").click()
        expect(page.locator("#email [role=status]")).to_contain_text("Sent a test email to owner@example.org")
        expect(page.locator("#email")).to_contain_text("550 5.7.1 Message rejected by policy")
        assert fake.received[-1].message["Subject"] == "Sagan test email"
        _fits(page, viewport, "/settings")
        if shots:
            page.locator("#email").screenshot(path=f"{shots}/settings-email-{name}.png")

        with app.app_context():
            token_url = email_notify.unsubscribe_url("owner_turn").replace("http://localhost", "")
        stranger = browser_session(viewport, color_scheme=scheme)  # the mail client's browser: no login
        mail = stranger.page
        mail.goto(token_url)
        expect(mail.locator("h1")).to_have_text("Stop “Your turn (batched)” emails?")
        _fits(mail, viewport, "/email/unsubscribe")
        if shots:
            mail.screenshot(path=f"{shots}/unsubscribe-ask-{name}.png", full_page=True)
        mail.get_by_role("button", name="Unsubscribe").click()
        expect(mail.locator("h1")).to_have_text("Unsubscribed")
        if shots:
            mail.screenshot(path=f"{shots}/unsubscribe-done-{name}.png", full_page=True)
        with app.app_context():
            assert email_settings.kinds_enabled()["owner_turn"] is False
            assert email_settings.kinds_enabled()["failure"] is True
            settings.put("email_kinds", None)
            db.session.commit()
        assert_clean(session)
        assert_clean(stranger)
