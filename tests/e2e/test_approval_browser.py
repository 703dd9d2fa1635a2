"""Approving a plan on a phone (SPEC §4.4): 390 px, no sideways scroll, ticks saved as made,
a textbox answered, confirmation for unticked items, and the decision lands once."""
from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from models import ApprovalRequest, WorkflowEvent, db
from services.core.actors import Actor
from services.planning import approvals
from services.workflow import experiments
from tests.e2e.actions import PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll

PLAN = (Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "two_pod_seed_sweep.md").read_text()

pytestmark = pytest.mark.browser


@pytest.fixture
def pending_request(app, make_experiment):
    number = make_experiment("Seed sweep on a phone", status="planning", pod_account="personal")
    with app.app_context():
        submission = approvals.submit_plan(experiments.get_experiment(number), PLAN,
                                           Actor("token", "t", "cli"), source="api")
        db.session.commit()
        return number, str(submission.approval.id)


def test_phone_approval_with_textbox_and_confirmation(app, browser_session, owner_account, pending_request):
    """The owner approves at 390 px: ticks an item, answers a textbox, confirms the rest."""
    number, request_id = pending_request
    session = browser_session(PHONE)
    page = session.login()
    page.goto(f"/approvals/{request_id}")
    assert_no_sideways_scroll(page, "the approval page")
    assert page.get_by_text("Estimated cost").is_visible()

    box = page.get_by_role("checkbox", name="Ten seeds are enough")
    box.check()
    page.get_by_text("Saved").first.wait_for()
    with app.app_context():
        assert approvals.get_request(request_id).checklist["Ten seeds are enough"] is True

    page.get_by_label("Budget notes").fill("Up to $10 is fine.")
    page.get_by_role("button", name="Approve", exact=True).click()
    page.get_by_text("2 checklist items are not ticked").wait_for()  # every box starts unticked
    assert page.get_by_label("Budget notes").input_value() == "Up to $10 is fine."
    approve_anyway = page.get_by_role("button", name="Approve anyway")
    height = approve_anyway.bounding_box()["height"]
    assert height >= 44
    approve_anyway.click()
    page.get_by_text("This request is").wait_for()
    assert "approved" in page.locator(".resolved").inner_text()
    assert_no_sideways_scroll(page, "the approved request")

    with app.app_context():
        approval = db.session.scalar(sa.select(ApprovalRequest))
        assert approval.status == "approved" and approval.answers == {"budget-notes": "Up to $10 is fine."}
        assert experiments.get_experiment(number).status == "approved"
        marker = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.marker == "epm:textbox-answers"))
        assert marker.metadata_ == {"answers": {"budget-notes": "Up to $10 is fine."}}
    assert_clean(session)


def test_approval_page_fits_360_px(browser_session, owner_account, pending_request):
    """Is the approval page usable at 360 px: no sideways scroll, big decision buttons that are
    not so tall that the three of them fill the screen (stacked, each a thumb's height)?"""
    _, request_id = pending_request
    session = browser_session({"width": 360, "height": 780})
    page = session.login()
    page.goto(f"/approvals/{request_id}")
    assert_no_sideways_scroll(page, "the approval page")
    for name in ("Approve", "Defer", "Reject"):
        assert 44 <= page.get_by_role("button", name=name, exact=True).bounding_box()["height"] <= 72
    assert_clean(session)
