"""The approval pages: queue, phone-first detail, ticks saved as made, decisions, errors."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import ApprovalRequest, db
from services.core.actors import Actor
from services.planning import approvals
from services.workflow import experiments

PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plans"


@pytest.fixture
def pending(app, make_experiment):
    """Factory: an experiment with a pending request for a fixture plan; returns the request id."""
    def make(plan="two_pod_seed_sweep.md", title="Seed sweep", replace=None):
        number = make_experiment(title, status="planning", pod_account="personal")
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


def test_every_owner_box_starts_unticked_with_the_planners_tick_as_a_label(app, client, owner, pending):
    """The planner wrote `- [x] Goal and hypothesis match the record`: does the owner's box for it
    start unticked (on the approval page and in the stored request), with "planner: checked"
    shown beside that item only?"""
    request_id = pending()
    with app.app_context():
        assert set(approvals.get_request(request_id).checklist.values()) == {False}
    page = client.get(f"/approvals/{request_id}").text
    boxes = re.findall(r'<label class="check-item">.*?</label>', page, re.S)
    assert len(boxes) == 3
    assert not any(re.search(r'<input type="checkbox"[^>]*\bchecked\b(?!")', box) for box in boxes)
    assert ["planner: checked" in box for box in boxes] == [True, False, False]
    assert "Goal and hypothesis match the record" in boxes[0]


def test_typed_answers_are_saved_as_typed_and_come_back(app, htmx_client, pending):
    """Does the autosave keep the typed textbox answers (a blank one removed), so that the page
    shows them again after a reload; and is the decision's own post still the last word?"""
    request_id = pending()
    headers = {"X-CSRFToken": htmx_client.csrf}
    saved = htmx_client.post(f"/approvals/{request_id}/answers",
                             data={"answer-budget-notes": "Up to $10.", "answer-seed-list": "0-9"}, headers=headers)
    assert saved.status_code == 200 and "Saved" in saved.text
    cleared = htmx_client.post(f"/approvals/{request_id}/answers", data={"answer-seed-list": "  "}, headers=headers)
    assert cleared.status_code == 200
    with app.app_context():
        assert approvals.get_request(request_id).answers == {"budget-notes": "Up to $10."}
    page = htmx_client.get(f"/approvals/{request_id}", headers={"HX-Request": ""}).text
    assert re.search(r'<textarea name="answer-budget-notes"[^>]*>Up to \$10\.</textarea>', page)
    done = htmx_client.post(f"/approvals/{request_id}/resolve",
                            data={"decision": "approve", "confirm_unchecked": "1", "answer-budget-notes": "$12."},
                            headers={**headers, "HX-Request": ""})
    assert done.status_code == 303
    with app.app_context():
        assert approvals.get_request(request_id).answers == {"budget-notes": "$12."}


@pytest.mark.parametrize("data, status, message", [
    ({"answer-budget-notes": "x" * 10_001}, 400, "at most 10,000 characters"),
    ({"answer-no-such-box": "hello"}, 400, "The plan has no textbox &#39;no-such-box&#39;"),
    ({"note": "no answers here"}, 400, "Send at least one answer"),
])
def test_a_bad_autosave_says_why_and_changes_nothing(app, htmx_client, pending, data, status, message):
    """Too long, a box the plan does not have, nothing to save: is each refused with its sentence
    and the stored answers left as they were?"""
    request_id = pending()
    headers = {"X-CSRFToken": htmx_client.csrf}
    htmx_client.post(f"/approvals/{request_id}/answers", data={"answer-budget-notes": "kept"}, headers=headers)
    refused = htmx_client.post(f"/approvals/{request_id}/answers", data=data, headers=headers)
    assert refused.status_code == status and message in refused.text and "tick-status error" in refused.text
    with app.app_context():
        assert approvals.get_request(request_id).answers == {"budget-notes": "kept"}


def test_autosave_refuses_a_decided_request_an_unknown_one_and_a_missing_csrf(app, client, htmx_client, owner,
                                                                              pending):
    """Does the autosave refuse a request already decided (409), an unknown request (404) and a
    post without the CSRF token (400), leaving the answers alone?"""
    request_id = pending()
    headers = {"X-CSRFToken": htmx_client.csrf}
    with app.app_context():
        approval = approvals.get_request(request_id)
        approvals.reject(approval, Actor("owner"), note="not now", answers={"budget-notes": "final"})
        db.session.commit()
    late = htmx_client.post(f"/approvals/{request_id}/answers", data={"answer-budget-notes": "later"}, headers=headers)
    assert late.status_code == 409 and "already rejected" in late.text
    unknown = htmx_client.post("/approvals/00000000-0000-4000-8000-000000000000/answers",
                               data={"answer-budget-notes": "x"}, headers=headers)
    assert unknown.status_code == 404
    no_csrf = htmx_client.post(f"/approvals/{request_id}/answers", data={"answer-budget-notes": "x"})
    assert no_csrf.status_code == 400
    with app.app_context():
        assert approvals.get_request(request_id).answers == {"budget-notes": "final"}


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
    number = make_experiment("Bad spec", status="planning", pod_account="personal")
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
