"""Plans, approvals and clarifying questions through the service and the JSON API (SPEC §4)."""
from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from models import ApprovalRequest, Experiment, PlanVersion, WorkflowEvent, db
from services.core.actors import Actor
from services.core.errors import ValidationError
from services.planning import approvals
from services.workflow import experiments

PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
TWO_POD = (PLANS / "two_pod_seed_sweep.md").read_text()
BLOCKER = (PLANS / "blocker_no_spec.md").read_text()
QUESTIONS = (PLANS / "questions_only.md").read_text()
# The old system's four-pod plan as it was written, `consolidation` block and all.
FOUR_PODS = (PLANS / "factor_screen_four_pods.md").read_text()
OWNER = Actor("owner", "owner-1", "Owner")


def _exp(app, number):
    return db.session.scalar(sa.select(Experiment).where(Experiment.number == number))


def _rows(model, **where):
    query = sa.select(sa.func.count()).select_from(model)
    for key, value in where.items():
        query = query.where(getattr(model, key) == value)
    return db.session.scalar(query)


@pytest.fixture
def planning(make_experiment):
    return make_experiment("Seed sweep", status="planning", pod_account="personal")


def test_submit_valid_plan_opens_request(app, api_client, planning):
    """Does a valid plan answer the version, plan, estimate and request, and move to plan_pending?"""
    client = api_client("read,write")
    response = client.post(f"/api/experiments/{planning}/plans", json={"markdown": TWO_POD})
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert body["planVersion"]["version"] == 1 and body["planVersion"]["source"] == "api"
    assert body["plan"]["textboxes"] == ["budget-notes", "seed-list"]
    assert body["plan"]["unknown_spec_fields"] == ["[0].owner_note"]
    assert body["estimate"]["unknown_prices"] == ["RTX4090"] and body["estimate"]["total_usd"] is None
    assert body["approvalRequest"]["title"] == "Approve experiment plan: Seed sweep"
    # Every box starts unticked for the owner, even the one the planner wrote as `[x]`.
    assert body["approvalRequest"]["checklist"] == {"Goal and hypothesis match the record": False,
                                                    "Budget of about $5 is acceptable": False,
                                                    "Ten seeds are enough": False}
    with app.app_context():
        assert _exp(app, planning).status == "plan_pending"


def test_invalid_spec_is_kept_without_request(app, api_client, planning):
    """Is a bad spec a 422 invalid_spec with field paths, stored as a version with no request?"""
    bad = TWO_POD.replace('"gpuType": "RTX 4090"', '"gpuType": "B300"')
    response = api_client("read,write").post(f"/api/experiments/{planning}/plans", json={"markdown": bad})
    assert response.status_code == 422
    body = response.get_json()
    assert body["error"] == "invalid_spec"
    assert any(p.startswith('[1].gpuType: unknown GPU "B300"') for p in body["problems"])
    with app.app_context():
        assert _rows(PlanVersion) == 1 and _rows(ApprovalRequest) == 0
        assert _exp(app, planning).status == "planning"


def test_consolidation_is_refused_not_ignored(app, api_client, planning):
    """A plan that asks to merge pods (`may_merge_pods: true`) is refused with the field path: merging
    is never acted on, so it is never silently ignored."""
    bad = TWO_POD.replace('"gpuType": "RTX 4090"', '"gpuType": "RTX 4090", "consolidation": {"may_merge_pods": true}')
    assert bad != TWO_POD
    response = api_client("read,write").post(f"/api/experiments/{planning}/plans", json={"markdown": bad})
    assert response.status_code == 422
    assert any(p.startswith("[1].consolidation: not supported") for p in response.get_json()["problems"])
    with app.app_context():
        assert _rows(ApprovalRequest) == 0 and _exp(app, planning).status == "planning"


def test_the_old_systems_four_pod_plan_is_accepted_with_its_consolidation_and_estimated(app, api_client, planning):
    """Every pod of the old system's plans says `"consolidation": {"may_merge_pods": false, …}` — what
    Sagan does anyway. The owner's four-pod plan is accepted as written (it was a 422), estimated,
    and approving it keeps the consolidation fields in the stored spec."""
    response = api_client("read,write").post(f"/api/experiments/{planning}/plans", json={"markdown": FOUR_PODS})
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert body["plan"]["spec_problems"] == [] and body["plan"]["unknown_spec_fields"] == []
    assert [pod["consolidation"] for pod in body["plan"]["spec"]] == [
        {"may_merge_pods": False, "merge_target_max_gpus_per_pod": 1}] * 4
    # Four A100 pods of 18 h at the catalogue's $1.49/GPU-h, plus 200 GB of disk each at $0.10 a
    # GB-month: about $109, the plan's own "≈ $110".
    estimate = body["estimate"]
    assert [(pod["gpu"], pod["hours"]) for pod in estimate["pods"]] == [("A100", 18.0)] * 4
    assert estimate["unknown_prices"] == []
    assert estimate["total_usd"] == pytest.approx(4 * (18 * 1.49 + 200 * 0.10 * 18 / 730), abs=0.01)
    with app.app_context():
        approvals.approve(db.session.scalar(sa.select(ApprovalRequest)), OWNER, confirm_unchecked=True)
        db.session.commit()
        stored = _exp(app, planning).pod_spec
    assert len(stored) == 4 and all(pod["consolidation"]["may_merge_pods"] is False for pod in stored)


def test_a_pod_name_that_is_a_list_is_an_invalid_spec(app, api_client, planning):
    """Is a list as a pod's name a 422 invalid_spec naming the field (it was a 500)?"""
    bad = TWO_POD.replace('"name": "seed-sweep-b"', '"name": ["seed-sweep-b"]')
    assert bad != TWO_POD
    response = api_client("read,write").post(f"/api/experiments/{planning}/plans", json={"markdown": bad})
    assert response.status_code == 422 and response.get_json()["error"] == "invalid_spec"
    assert "[1].name: must be text of 1–120 characters" in response.get_json()["problems"]
    with app.app_context():
        assert _rows(ApprovalRequest) == 0 and _exp(app, planning).status == "planning"


def test_bad_json_spec_names_line_and_column(api_client, planning):
    """Does broken spec JSON report its position?"""
    bad = TWO_POD.replace('"gpuCount": 1, "volumeGb": 20, "containerDiskGb": 20,\n   "cloudType": "SECURE", "estimatedMinutes": 90, "env": {"SEEDS": "5',
                          '"gpuCount": 1 "volumeGb": 20, "containerDiskGb": 20,\n   "cloudType": "SECURE", "estimatedMinutes": 90, "env": {"SEEDS": "5')
    body = api_client("read,write").post(f"/api/experiments/{planning}/plans", json={"markdown": bad}).get_json()
    assert "line" in body["plan"]["spec_error"] and "column" in body["plan"]["spec_error"]


def test_questions_only_text_is_not_a_plan(app, api_client, planning):
    """Is a planner output with fewer than 4 sections refused with 422 not_a_plan, storing nothing?"""
    response = api_client("read,write").post(f"/api/experiments/{planning}/plans", json={"markdown": QUESTIONS})
    assert response.status_code == 422 and response.get_json()["error"] == "not_a_plan"
    with app.app_context():
        assert _rows(PlanVersion) == 0


def test_plan_input_errors(api_client, planning):
    """Do missing, empty and oversized markdown get clear 4xx answers?"""
    client = api_client("read,write")
    assert client.post(f"/api/experiments/{planning}/plans", json={}).status_code == 400
    assert client.post(f"/api/experiments/{planning}/plans", json={"markdown": "  "}).status_code == 400
    huge = TWO_POD + ("x" * 210_000)
    assert client.post(f"/api/experiments/{planning}/plans", json={"markdown": huge}).status_code == 413


def test_new_version_supersedes_pending_request(app, app_ctx, planning):
    """Does v2 supersede v1's pending request (no pile-up)?"""
    experiment = experiments.get_experiment(planning)
    first = approvals.submit_plan(experiment, TWO_POD, OWNER, source="owner")
    second = approvals.submit_plan(experiment, TWO_POD.replace("ten seeds", "twelve seeds"), OWNER, source="owner")
    db.session.commit()
    db.session.refresh(first.approval)
    assert first.approval.status == "superseded" and second.approval.status == "pending"
    assert second.plan_version.version == 2


def _pending(app_ctx, number, markdown=TWO_POD):
    experiment = experiments.get_experiment(number)
    submission = approvals.submit_plan(experiment, markdown, OWNER, source="owner")
    db.session.commit()
    return experiment, submission.approval


def test_approve_stores_spec_answers_and_marker(app_ctx, planning):
    """Does approving store the approved spec on the experiment and post epm:textbox-answers?"""
    experiment, approval = _pending(app_ctx, planning)
    with pytest.raises(Exception) as unchecked:
        approvals.approve(approval, OWNER, answers={"budget-notes": "fine"})
    assert getattr(unchecked.value, "code", "") == "unchecked_items"
    db.session.rollback()
    effects = approvals.approve(approval, OWNER, answers={"budget-notes": "up to $10", "seed-list": ""},
                                confirm_unchecked=True)
    db.session.commit()
    # No API key in tests: approval stays at `approved` and nothing is enqueued.
    assert experiment.status == "approved" and effects == []
    assert experiment.pod_spec[0]["name"] == "seed-sweep-a"
    assert approval.status == "approved" and approval.answers == {"budget-notes": "up to $10"}
    marker = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.marker == "epm:textbox-answers"))
    assert marker.metadata_ == {"answers": {"budget-notes": "up to $10"}}


def test_answers_for_unknown_textbox_are_refused(app_ctx, planning):
    """Is an answer to a textbox the plan does not have refused, with nothing changed?"""
    experiment, approval = _pending(app_ctx, planning)
    with pytest.raises(Exception) as refused:
        approvals.approve(approval, OWNER, answers={"nope": "x"}, confirm_unchecked=True)
    assert "no textbox" in str(refused.value)
    db.session.rollback()
    for bad in ({"budget-notes": "x" * 10_001}, {"budget-notes": ["a list"]}):
        with pytest.raises(ValidationError, match="must be text of at most 10,000 characters"):
            approvals.approve(approvals.get_request(approval.id), OWNER, answers=bad, confirm_unchecked=True)
        db.session.rollback()
    assert experiments.get_experiment(planning).status == "plan_pending"


def test_double_submission_resolves_once(app, planning):
    """Two taps approving at once: one approval, one conflict, one state change."""
    import threading
    with app.app_context():
        _, approval = _pending(None, planning)
        approval_id = approval.id
    barrier, outcomes = threading.Barrier(2), []

    def tap():
        with app.app_context():
            mine = approvals.get_request(approval_id)
            barrier.wait()
            try:
                approvals.approve(mine, OWNER, confirm_unchecked=True)
                db.session.commit()
                outcomes.append("approved")
            except Exception as exc:  # noqa: BLE001
                db.session.rollback()
                outcomes.append(getattr(exc, "code", repr(exc)))
            finally:
                db.session.remove()

    threads = [threading.Thread(target=tap) for _ in range(2)]
    [t.start() for t in threads]
    [t.join(20) for t in threads]
    assert sorted(outcomes) in (["already_resolved", "approved"], ["approved", "stale_status"]), outcomes
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(WorkflowEvent).where(
            WorkflowEvent.to_status == "approved", WorkflowEvent.event_type == "state_changed")) == 1


def test_reject_needs_note_and_returns_to_planning(app_ctx, planning):
    """Does reject require a note and send the experiment back to planning with it?"""
    experiment, approval = _pending(app_ctx, planning)
    with pytest.raises(ValidationError, match="Say why you reject"):
        approvals.reject(approval, OWNER, note="")
    effects = approvals.reject(approval, OWNER, note="Use twelve seeds")
    db.session.commit()
    assert experiment.status == "planning" and approval.status == "rejected"
    assert [e.name for e in effects] == ["redispatch_planner_with_note"]


def test_defer_keeps_pending_and_lowers_in_queue(app_ctx, make_experiment):
    """Does defer keep the request pending but put it below undeferred ones?"""
    first = make_experiment("first", status="planning", pod_account="personal")
    second = make_experiment("second", status="planning", pod_account="personal")
    _, a1 = _pending(app_ctx, first)
    _, a2 = _pending(app_ctx, second)
    approvals.defer(a1, OWNER, note="after the deadline")
    db.session.commit()
    assert a1.status == "pending" and a1.defer_note == "after the deadline"
    assert [a.id for a, _ in approvals.pending_queue()] == [a2.id, a1.id]


def test_blocker_plan_is_acknowledged_and_blocks(app_ctx, make_experiment):
    """Does acknowledging a blocker plan resolve it and block the experiment, dispatching nothing?"""
    number = make_experiment("Survey as experiment", status="planning")
    experiment, approval = _pending(app_ctx, number, BLOCKER)
    effects = approvals.approve(approval, OWNER)
    db.session.commit()
    assert experiment.status == "blocked" and experiment.pod_spec is None
    assert "Compute must not launch" in db.session.scalar(
        sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "blocked"))
    assert "start_orchestrator" not in [e.name for e in effects]


def test_auto_approve_under_limit(app, app_ctx, make_experiment):
    """Is a plan auto-approved when the flag is on and the estimate is under the limit?"""
    number = make_experiment("Auto", status="planning", pod_account="personal")
    experiment = experiments.get_experiment(number)
    experiment.auto_approve_plan = True
    cheap = TWO_POD.replace('"gpuType": "RTX 4090"', '"gpuType": "A100"')
    submission = approvals.submit_plan(experiment, cheap, Actor("token", "t", "cli"), source="api")
    db.session.commit()
    assert submission.auto_approved and experiment.status == "approved"
    note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "approved"))
    assert note == "Auto-approved follow-up plan (experiment.auto_approve_plan=true)."


def test_never_auto_approved_when_the_account_policy_may_fall_back_to_this_host(app, app_ctx, make_experiment):
    """A cheap plan asking a RunPod account first but allowing `local` as its fallback: is it
    left for the owner (an auto-approved plan never runs on the local backend)?"""
    number = make_experiment("Falls back here", status="planning", pod_account="personal")
    experiment = experiments.get_experiment(number)
    experiment.auto_approve_plan = True
    falls_back = TWO_POD.replace('"gpuType": "RTX 4090"', '"gpuType": "A100", "substitution_policy": '
                                 '{"account": {"allowed": ["personal", "local"]}}')
    assert falls_back.count('"local"') == 1  # one pod of the sweep is enough
    submission = approvals.submit_plan(experiment, falls_back, Actor("token", "t", "cli"), source="api")
    db.session.commit()
    assert not submission.auto_approved and experiment.status == "plan_pending", submission.problems


def test_never_auto_approved_over_limit_unknown_price_or_blocker(app, app_ctx, make_experiment):
    """Are plans over the limit, with an unknown price, or blockers left for the owner?"""
    for title, markdown in (("unknown price", TWO_POD), ("blocker", BLOCKER),
                            ("dear", TWO_POD.replace('"estimatedMinutes": 90', '"estimatedMinutes": 9000')
                             .replace('"gpuType": "RTX 4090"', '"gpuType": "A100"'))):
        number = make_experiment(title, status="planning", pod_account="personal")
        experiment = experiments.get_experiment(number)
        experiment.auto_approve_plan = True
        submission = approvals.submit_plan(experiment, markdown, OWNER, source="owner")
        db.session.commit()
        assert not submission.auto_approved and experiment.status == "plan_pending", title


def test_resolve_api_is_owner_session_only(app, api_client, owner, client, planning):
    """Can no token resolve an approval, while the owner's session (with CSRF) can?"""
    with app.app_context():
        _, approval = _pending(None, planning)
        approval_id = str(approval.id)
    token = api_client("read,write,dispatch,promote")
    refused = token.post(f"/api/approvals/{approval_id}/resolve", json={"decision": "approve"})
    assert refused.status_code == 403
    headers = {"X-CSRFToken": owner.csrf()}
    bad = client.post(f"/api/approvals/{approval_id}/resolve", json={"decision": "maybe"}, headers=headers)
    assert bad.status_code == 400 and bad.get_json()["field"] == "decision"
    ok = client.post(f"/api/approvals/{approval_id}/resolve",
                     json={"decision": "approve", "confirm_unchecked": True,
                           "answers": {"seed-list": "0-9"}}, headers=headers)
    assert ok.status_code == 200 and ok.get_json()["experiment"]["status"] == "approved"
    again = client.post(f"/api/approvals/{approval_id}/resolve",
                        json={"decision": "approve", "confirm_unchecked": True}, headers=headers)
    assert again.status_code == 409 and again.get_json()["error"] == "already_resolved"


def test_questions_and_answers(app, api_client, make_experiment):
    """Do questions move to awaiting_clarifications and answers back to clarifying with markers?"""
    number = make_experiment("Vague idea", status="clarifying")
    client = api_client("read,write")
    for bad in ({"questions": []}, {"questions": [{"key": "Bad Key", "text": "x"}]},
                {"questions": [{"key": "a", "text": ""}]}, {"questions": "what?"}):
        assert client.post(f"/api/experiments/{number}/questions", json=bad).status_code == 400
    response = client.post(f"/api/experiments/{number}/questions", json={"questions": [
        {"key": "base-model", "text": "Which base model?"}, {"key": "budget", "text": "What budget?"}]})
    assert response.status_code == 201
    with app.app_context():
        from services.planning import questions
        experiment = experiments.get_experiment(number)
        assert experiment.status == "awaiting_clarifications"
        assert [q["key"] for q in questions.open_questions(experiment)] == ["base-model", "budget"]
        with pytest.raises(ValidationError, match="no open question"):
            questions.answer(experiment, {"unknown": "x"}, OWNER)
        for bad in ({"budget": "x" * 10_001}, {"budget": 42}):
            with pytest.raises(ValidationError, match="must be text of at most 10,000 characters"):
                questions.answer(experiment, bad, OWNER)
        db.session.rollback()
        experiment = experiments.get_experiment(number)
        questions.answer(experiment, {"base-model": "Qwen 7B", "budget": ""}, OWNER)
        db.session.commit()
        assert experiment.status == "clarifying"
        answers = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.marker == "epm:clarify-answers"))
        assert answers.metadata_ == {"answers": {"base-model": "Qwen 7B"}}
        note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.to_status == "clarifying")
                                 .order_by(WorkflowEvent.created_at.desc()).limit(1))
        assert note == "Owner re-dispatched the planner from awaiting_clarifications."


def test_local_pods_are_estimated_at_zero(app_ctx, make_experiment):
    """Pods on the local backend cost nothing: the estimate is $0, not "price unknown"."""
    number = make_experiment("Local", status="planning", pod_account="local")
    spec_plan = TWO_POD.replace('"account": {"prefer": "personal", "allowed": ["personal", "team"]}',
                                '"account": {"prefer": "local", "allowed": ["local"]}')
    submission = approvals.submit_plan(experiments.get_experiment(number), spec_plan, OWNER, source="owner")
    assert submission.estimate["total_usd"] == 0 and submission.estimate["unknown_prices"] == []
