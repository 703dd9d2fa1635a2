"""Beliefs in a real browser (SPEC §11.2): the belief page fits a phone and a laptop; the links
panel adds a link in place (htmx), shows a refusal beside its form, and deletes only after the
owner confirms; accepting a proposed update from the page makes the next version."""
from __future__ import annotations

import pytest

from models import db
from services.core.actors import Actor
from services.research import beliefs
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll

pytestmark = pytest.mark.browser

OWNER = Actor("owner", None, "Owner")


@pytest.fixture
def belief_with_proposal(app, make_experiment):
    """B1 with a pending proposal from experiment #N; answers N."""
    number = make_experiment("Insecure code, three seeds")
    with app.app_context():
        belief = beliefs.create_belief({"title": "Narrow finetuning generalizes broadly", "status": "active",
                                        "evidence": f"#{number}: a first seed."}, OWNER)
        beliefs.propose_update(belief, None, None, status="supported", confidence="MODERATE",
                               text="It generalizes, on three seeds.", evidence=f"#{number}: three seeds.",
                               reasoning="All three seeds agree.")
        db.session.commit()
    return number


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_link_panel_adds_refuses_and_deletes_in_place(browser_session, owner_account, belief_with_proposal,
                                                          viewport):
    """Does the panel add "#N tests this" without a page load, show "No experiment #999" beside the
    form, keep the link when the owner cancels the confirmation, and delete it when they accept?"""
    session = browser_session(viewport)
    page = session.login()
    page.goto("/beliefs/1")
    assert_no_sideways_scroll(page, slack=1)
    page.locator("#links summary").click()
    page.get_by_label("Linked record").fill("#999")
    page.get_by_role("button", name="Add link").click()
    page.locator("#links .error").get_by_text("No experiment #999.").wait_for()
    assert page.get_by_label("Linked record").input_value() == "#999"
    page.get_by_label("Relation").select_option("tests")
    page.get_by_label("Linked record").fill(f"#{belief_with_proposal}")
    page.get_by_role("button", name="Add link").click()
    row = page.locator("#links .link-row")
    row.get_by_text(f"#{belief_with_proposal} Insecure code, three seeds").wait_for()
    assert page.url.endswith("/beliefs/1")  # swapped in place
    assert_no_sideways_scroll(page, slack=1)
    page.once("dialog", lambda dialog: dialog.dismiss())
    row.get_by_role("button", name="Delete this link").click()
    page.wait_for_timeout(300)
    assert page.locator("#links .link-row").count() == 1
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete this link").click()
    page.locator("#links").get_by_text("No links yet.").wait_for()
    assert_clean(session)


def test_accepting_a_proposal_from_the_page_makes_the_next_version(browser_session, owner_account,
                                                                   belief_with_proposal):
    """Does "Accept as proposed" on a phone land on the history with version 2 and the proposal gone?"""
    session = browser_session(PHONE)
    page = session.login()
    page.goto("/beliefs/1")
    page.get_by_role("button", name="Accept as proposed").click()
    page.wait_for_url("**/beliefs/1#history")
    assert "version 2" in page.locator(".belief-head").inner_text()
    assert "It generalizes, on three seeds." in page.locator("#belief").inner_text()
    assert page.locator("#proposals").count() == 0
    assert_no_sideways_scroll(page, slack=1)
    assert_clean(session)
