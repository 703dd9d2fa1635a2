"""Writing a plan by hand with agents off, in a browser at 390 px: the template goes into the
box with one press, the owner writes over each guidance line, and the plan reaches approval."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.planning import plans
from tests.e2e.actions import PHONE, assert_clean

pytestmark = pytest.mark.browser


def test_a_plan_from_the_template_reaches_approval_on_a_phone(app, browser_session, owner_account,
                                                               make_experiment, monkeypatch):
    """With no model key: is the template offered open, does its button fill the empty box (and
    ask before replacing typed text), and does the written plan land on its approval page?"""
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "")
    number = make_experiment("Which schedules do pruning papers use?", status="planning", kind="survey")
    session = browser_session(PHONE)
    page = session.login()
    page.goto(f"/experiments/{number}")
    page.get_by_text("Paste a plan").click()
    box = page.locator("textarea[data-plan-box]")
    box.fill("my own start")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Put the template in the box").click()
    assert box.input_value() == "my own start"  # refused replacement keeps the owner's text
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Put the template in the box").click()
    assert box.input_value().startswith("## Goal\n" + plans.GUIDANCE["goal"])
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:  # docs/screenshots/README.md
        page.locator(".plan-template").scroll_into_view_if_needed()
        page.screenshot(path=str(Path(shots) / "plan-template-phone-light.png"))
    written = box.input_value()
    for field, line in plans.GUIDANCE.items():
        written = written.replace(line, "- [ ] Ten papers are enough" if field == "approval_checklist"
                                  else f"Written by hand: {field}.")
    box.fill(written)
    page.get_by_role("button", name="Submit plan").click()
    page.wait_for_url("**/approvals/**")
    assert page.get_by_text("Ten papers are enough").is_visible()
    assert_clean(session)
