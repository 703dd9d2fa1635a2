"""The approval pages: queue, phone-first detail, ticks saved as made, decisions, errors."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import ApprovalRequest, db
from services import approvals, experiments
from services.actors import Actor

PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plans"


@pytest.fixture
def pending(app, make_experiment):
    """Factory: an experiment with a pending request for a fixture plan; returns the request id."""
    def make(plan="two_pod_seed_sweep.md", title="Seed sweep", replace=None):
        number = make_experiment(title, status="planning", runpod_account="personal")
        text = (PLANS / plan).read_text()
        for old, new in (replace or {}).items():
            text = text.replace(old, new)
        with app.app_context():
            submission = approvals.submit_plan(experiments.get_experiment(number), text,
                                               Actor("token", "t", "cli"), source="api")
            db.session.commit()
            return str(submission.approval.id) if submission.approval else None
    return make


def _status(app, request_id):
    with app.app_context():
        approval = db.session.get(ApprovalRequest, __import__("uuid").UUID(request_id))
        return approval.status, experiments.get_experiment(approval.experiment_id).status


def test_queue_lists_pending(client, owner, pending):
    """Does /approvals list the pending plan with its estimate?"""
    pending()
    page = client.get("/approvals")
    assert page.status_code == 200 and "Seed sweep" in page.text


def test_detail_shows_estimate_sections_checklist_textboxes_spec(client, owner, pending):
    """Does the page show the estimate, open Goal/Hypothesis, checklist, textboxes and the spec table?"""
    request_id = pending()
    page = client.get(f"/approvals/{request_id}").text
    assert "Estimated cost" in page and "price unknown for RTX4090" in page
    assert '<details class="panel plan-section" open>\n  <summary>Goal</summary>' in page
    assert 'name="answer-budget-notes"' in page and "Budget notes" in page
    assert "seed-sweep-a" in page and "Raw runpod-spec JSON" in page
    assert page.count('type="checkbox" name="checked"') == 3


def test_tick_is_saved_as_made(app, htmx_client, pending):
    """Does ticking a box post it and keep it (and refuse a label not on the list)?"""
    request_id = pending()
    ok = htmx_client.post(f"/approvals/{request_id}/checklist",
                          data={"label": "Ten seeds are enough", "checked": "on"},
                          headers={"X-CSRFToken": htmx_client.csrf})
    assert ok.status_code == 200 and "Saved" in ok.text
    bad = htmx_client.post(f"/approvals/{request_id}/checklist", data={"label": "made up", "checked": "on"},
                           headers={"X-CSRFToken": htmx_client.csrf})
    assert "not on this plan&#39;s checklist" in bad.text
    with app.app_context():
        approval = approvals.get_request(request_id)
        assert approval.checklist["Ten seeds are enough"] is True and "made up" not in approval.checklist


def test_a_tick_leaves_the_decision_forms_key_to_the_decision(app, htmx_client, pending):
    """htmx sends the enclosing decision form's fields (its one-time form_key too) with each
    tick: does the tick leave that key alone, so the Approve that follows still acts?"""
    request_id = pending()
    page = htmx_client.get(f"/approvals/{request_id}").text
    key = re.search(r'<input type="hidden" name="form_key" value="([^"]+)"', page).group(1)
    ticked = htmx_client.post(f"/approvals/{request_id}/checklist",
                              data={"label": "Ten seeds are enough", "checked": "on", "form_key": key},
                              headers={"X-CSRFToken": htmx_client.csrf})
    assert "Saved" in ticked.text
    decided = htmx_client.post(f"/approvals/{request_id}/resolve",
                               data={"decision": "approve", "confirm_unchecked": "1", "form_key": key},
                               headers={"X-CSRFToken": htmx_client.csrf, "HX-Request": ""})
    assert decided.status_code == 303
    assert _status(app, request_id) == ("approved", "approved")


def test_approve_with_unticked_items_asks_to_confirm(app, client, owner, pending):
    """Does approving with unticked items show them and change nothing until confirmed?"""
    request_id = pending()
    csrf = owner.csrf()
    refused = client.post(f"/approvals/{request_id}/resolve",
                          data={"decision": "approve", "csrf_token": csrf, "answer-budget-notes": "up to $10"})
    # Post/redirect/get, to the confirmation box itself (where the thumb is on a phone).
    assert refused.status_code == 303 and refused.headers["Location"].endswith("#confirm-unchecked")
    first = client.get(refused.headers["Location"])
    assert first.status_code == 200 and "Approve anyway" in first.text and 'id="confirm-unchecked"' in first.text
    assert "up to $10" in first.text  # answers survive the round trip
    assert _status(app, request_id) == ("pending", "plan_pending")
    done = client.post(f"/approvals/{request_id}/resolve",
                       data={"decision": "approve", "csrf_token": csrf, "confirm_unchecked": "1",
                             "answer-budget-notes": "up to $10"})
    assert done.status_code == 303
    assert _status(app, request_id) == ("approved", "approved")
    again = client.get(f"/approvals/{request_id}")
    assert "This request is <strong>approved</strong>" in again.text


def test_invalid_spec_cannot_be_approved(app, client, owner, make_experiment):
    """Is approval refused while the spec is invalid (no request exists to approve)?"""
    number = make_experiment("Bad spec", status="planning", runpod_account="personal")
    bad = (PLANS / "two_pod_seed_sweep.md").read_text().replace('"gpuType": "RTX 4090"', '"gpuType": "B300"')
    with app.app_context():
        submission = approvals.submit_plan(experiments.get_experiment(number), bad, Actor("owner"), source="owner")
        db.session.commit()
        assert submission.approval is None
        assert db.session.scalar(sa.select(sa.func.count(ApprovalRequest.id))) == 0


def test_blocker_plan_reads_acknowledge(app, client, owner, pending):
    """Does a blocker plan's first button read Acknowledge, and acknowledging block the experiment?"""
    request_id = pending("blocker_no_spec.md", "Survey mislabelled")
    page = client.get(f"/approvals/{request_id}").text
    assert "Blocker plan." in page and ">\n      Acknowledge</button>" in page
    client.post(f"/approvals/{request_id}/resolve", data={"decision": "approve", "csrf_token": owner.csrf(),
                                                          "confirm_unchecked": "1"})
    assert _status(app, request_id) == ("approved", "blocked")


def test_reject_without_note_shows_message(app, client, owner, pending):
    """Is a reject without a note refused with a message, nothing changed?"""
    request_id = pending()
    page = client.post(f"/approvals/{request_id}/resolve", data={"decision": "reject", "csrf_token": owner.csrf()},
                       follow_redirects=True)
    assert "Say why you reject the plan" in page.text
    assert _status(app, request_id) == ("pending", "plan_pending")
    client.post(f"/approvals/{request_id}/resolve",
                data={"decision": "reject", "note": "twelve seeds", "csrf_token": owner.csrf()})
    assert _status(app, request_id) == ("rejected", "planning")


def test_second_decision_is_refused_with_reason(app, client, owner, pending):
    """Does a second tab's decision on a resolved request say so, not act twice?"""
    request_id = pending()
    csrf = owner.csrf()
    client.post(f"/approvals/{request_id}/resolve", data={"decision": "defer", "note": "later", "csrf_token": csrf})
    client.post(f"/approvals/{request_id}/resolve",
                data={"decision": "approve", "confirm_unchecked": "1", "csrf_token": csrf})
    late = client.post(f"/approvals/{request_id}/resolve",
                       data={"decision": "reject", "note": "no", "csrf_token": csrf}, follow_redirects=True)
    assert "already approved" in late.text
    assert _status(app, request_id) == ("approved", "approved")


def test_unknown_request_is_404(client, owner):
    """Do a bad id and an unknown id answer 404?"""
    assert client.get("/approvals/not-a-uuid").status_code == 404
    assert client.get("/approvals/00000000-0000-4000-8000-000000000000").status_code == 404
