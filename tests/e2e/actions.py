"""What the owner does in the browser, and what every browser test checks afterwards."""
from __future__ import annotations

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
NO_RELOAD_MARK = "window.__saganNoReload = true"


def open_board(session):
    """Log in through the form, open the board and wait for it; mark the page to detect reloads."""
    page = session.login()
    page.goto("/board")
    page.locator("#board").wait_for()
    page.evaluate(NO_RELOAD_MARK)
    return page


def assert_not_reloaded(page):
    assert page.evaluate("window.__saganNoReload === true"), "the page was reloaded"


def assert_clean(session):
    """No CSP refusals and no script errors on any page of the session."""
    assert session.csp_problems() == []
    assert session.page_errors == []


def move_card(page, number: int, to: str, note: str | None = None):
    """Use the card's "Move to…" menu, as the owner would with a thumb or a mouse."""
    card = page.locator(f"#card-{number}")
    card.get_by_text("Move to…").click()
    card.get_by_label(f"New status for #{number}").select_option(to)
    if note:
        card.get_by_label(f"Note for #{number}").fill(note)
    card.get_by_role("button", name="Move").click()
