"""The approved cost is the dispatched cost.

The attack: an 8×H100×10 h plan approved on `local` (estimated at $0, so no cap), then a
`write` token patches the experiment's account to `team`, and the launch went to the team
account. Now the approval request fixes the account (when it opens) and the cap (when it
is approved); dispatch refuses a changed account and uses the approved one; tokens never
set caps; an unknown-cost plan that may run on a paid account waits for the owner's cap.
"""
from __future__ import annotations

import sqlalchemy as sa

from models import AgentRun, ApprovalRequest, Experiment, db
from services.core.actors import Actor
from services.core.errors import Conflict
from services.dispatch import provisioner
from services.planning import approvals
from services.workflow import experiments, lifecycle
from tests.integration.test_dispatch import OWNER, plan_with, pod_spec, runpod  # noqa: F401

BIG = pod_spec(gpu="H100", gpuCount=8, estimatedMinutes=600)


def _submit(app, number, spec):
    with app.app_context():
        submission = approvals.submit_plan(experiments.get_experiment(number), plan_with(spec), OWNER,
                                           source="owner")
        db.session.commit()
        return submission.approval.id


def _approve(app, number, approval_id):
    with app.app_context():
        experiment = experiments.get_experiment(number)
        approvals.approve(db.session.get(ApprovalRequest, approval_id), OWNER, confirm_unchecked=True)
        lifecycle.transition(experiment, "implementing", Actor.system())
        db.session.commit()


def _dispatch_runs(app, number):
    with app.app_context():
        experiment = experiments.get_experiment(number)
        return db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(
            AgentRun.scope_id == experiment.id, AgentRun.agent == provisioner.PROVISIONER))


def test_an_account_patched_by_a_token_after_approval_is_refused_at_dispatch(
        app, runpod, make_experiment, api_client):  # noqa: F811
    """Approved on local, patched to team by a write token: is the launch refused (no run, no
    pod on the team account), with a message saying a new plan is needed?"""
    number = make_experiment("Big local plan", status="planning", pod_account="local")
    _approve(app, number, _submit(app, number, BIG))
    writer = api_client("read,write")
    assert writer.patch(f"/api/experiments/{number}", json={"pod_account": "team"}).status_code == 200
    with app.app_context():
        try:
            provisioner.launch(experiments.get_experiment(number), OWNER)
            raise AssertionError("launch accepted a changed account")
        except Conflict as refused:
            assert refused.code == "account_changed"
            assert "new plan" in refused.message
        db.session.rollback()
    assert _dispatch_runs(app, number) == 0
    assert runpod.requests_to("POST") == []


def test_a_saga_queued_before_the_account_changed_creates_nothing(app, runpod, make_experiment, api_client):  # noqa: F811
    """Launched on the approved `personal` account, then patched to `team` before the saga runs:
    does the saga refuse too (the run fails saying why) and create no pod on either account?"""
    number = make_experiment("Personal plan", status="planning", pod_account="personal")
    _approve(app, number, _submit(app, number, pod_spec()))
    with app.app_context():
        run, _ = provisioner.launch(experiments.get_experiment(number), OWNER)
        db.session.commit()
        run_id = run.id
    api_client("read,write").patch(f"/api/experiments/{number}", json={"pod_account": "team"})
    with app.app_context():
        provisioner.run_dispatch(run_id)
        run = db.session.get(AgentRun, run_id)
        assert run.status == "failed"
        assert "approved for personal" in (run.last_error or "")
    assert runpod.requests_to("POST") == []


def test_approving_after_the_account_changed_is_refused(app, make_experiment, api_client):
    """A token changes the account while the plan waits: is approval refused (the estimate is for
    the old account) and the request left pending?"""
    number = make_experiment("Pending local plan", status="planning", pod_account="local")
    approval_id = _submit(app, number, BIG)
    api_client("read,write").patch(f"/api/experiments/{number}", json={"pod_account": "team"})
    with app.app_context():
        try:
            approvals.approve(db.session.get(ApprovalRequest, approval_id), OWNER, confirm_unchecked=True)
            raise AssertionError("approved for an account nobody estimated")
        except Conflict as refused:
            assert refused.code == "account_changed"
        db.session.rollback()
        assert db.session.get(ApprovalRequest, approval_id).status == "pending"


def test_approval_fixes_the_account_and_the_cap(app, make_experiment):
    """Does the request remember the account it was submitted under, and approval the cap
    (1.5× a known estimate)?"""
    number = make_experiment("Priced plan", status="planning", pod_account="team")
    approval_id = _submit(app, number, pod_spec(gpu="A100"))  # $1.49/h reference price, 1 h
    _approve(app, number, approval_id)
    with app.app_context():
        approval = db.session.get(ApprovalRequest, approval_id)
        experiment = experiments.get_experiment(number)
        assert approval.pod_account == "team"
        assert approval.cost_cap_usd == experiment.cost_cap_usd
        assert 2.2 < approval.cost_cap_usd < 2.3


def test_a_token_cannot_create_an_experiment_with_a_cost_cap(app, api_client, client, owner):
    """Does POST /api/experiments refuse `cost_cap_usd` from a token (403, nothing created),
    like PATCH does, while the owner's session may set it?"""
    writer = api_client("read,write")
    response = writer.post("/api/experiments", json={"title": "Huge cap", "cost_cap_usd": 1_000_000})
    assert response.status_code == 403
    assert response.get_json()["error"] == "owner_session_required"
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Experiment.id))) == 0
    response = client.post("/api/experiments", json={"title": "Owner cap", "cost_cap_usd": 25},
                           headers={"X-CSRFToken": owner.csrf()})
    assert response.status_code == 201
    assert response.get_json()["experiment"]["costCapUsd"] == 25


def test_an_unknown_cost_plan_on_a_paid_account_waits_for_the_owners_cap(app, runpod, make_experiment):  # noqa: F811
    """H200 has no price: does approval set no cap, the launch gate the experiment with a
    stated reason (owner's turn) and create nothing, and dispatch go ahead once the owner
    has set a cap?"""
    number = make_experiment("Unpriced GPU", status="planning", pod_account="team")
    approval_id = _submit(app, number, pod_spec(gpu="H200"))
    _approve(app, number, approval_id)
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.cost_cap_usd is None
        run, _ = provisioner.launch(experiment, OWNER)
        db.session.commit()
        assert run is None
        experiment = experiments.get_experiment(number)
        assert experiment.status == "gate_pending" and experiment.turn.startswith("Owner turn")
        from services.core import events
        last = events.timeline(experiment, limit=5).events
        assert any("Set a cost cap" in (e.note or "") for e in last)
    assert runpod.requests_to("POST") == []
    with app.app_context():
        experiment = experiments.get_experiment(number)
        experiment.cost_cap_usd = 40.0  # the owner's explicit cap (the edit form)
        lifecycle.transition(experiment, "approved", OWNER, note="Cap set.")
        lifecycle.transition(experiment, "implementing", Actor.system())
        run, _ = provisioner.launch(experiment, OWNER)
        db.session.commit()
        assert run is not None


def test_a_local_plan_that_may_fall_back_to_a_paid_account_is_priced(app, make_experiment):
    """A local plan whose substitution policy allows `team`: is it estimated at the real
    price (not $0) and given the default cap?"""
    number = make_experiment("Local with fallback", status="planning", pod_account="local")
    spec = pod_spec(gpu="A100", substitution_policy={"account": {"prefer": "local", "allowed": ["local", "team"]}})
    approval_id = _submit(app, number, spec)
    with app.app_context():
        approval = db.session.get(ApprovalRequest, approval_id)
        assert approval.estimated_cost_usd and approval.estimated_cost_usd > 1
    _approve(app, number, approval_id)
    with app.app_context():
        assert experiments.get_experiment(number).cost_cap_usd > 2


def test_the_approval_page_shows_the_account_and_the_cap(app, client, owner, make_experiment):
    """Does the approval page say which account approving fixes and that an unknown cost sets no cap?"""
    number = make_experiment("Show the terms", status="planning", pod_account="team")
    approval_id = _submit(app, number, pod_spec(gpu="H200"))
    page = client.get(f"/approvals/{approval_id}").text
    assert "Account and cap" in page and "team" in page
    assert "the cost is unknown, so dispatch waits until you set one" in page
