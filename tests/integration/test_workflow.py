"""The transition table of SPEC §2.3 as lived: happy path, blocks, reopen, override, lessons."""
from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa

from models import ApprovalRequest, Experiment, PlanVersion, WorkflowEvent, db
from services.core import registry
from services.core.actors import Actor
from services.core.errors import Conflict, Forbidden, ValidationError
from services.workflow import experiments, lifecycle

OWNER = Actor("owner", "owner-1", "Owner")
AGENT = Actor("agent", "run-1", "planner")
TOKEN = Actor("token", "tok-1", "token cli")
SYSTEM = Actor.system()

HAPPY_PATH = [
    ("clarifying", OWNER), ("awaiting_clarifications", AGENT), ("clarifying", OWNER),
    ("planning", AGENT), ("plan_pending", SYSTEM), ("approved", OWNER), ("implementing", SYSTEM),
    ("code_reviewing", AGENT), ("implementing", AGENT), ("code_reviewing", AGENT), ("testing", AGENT),
    ("queued", SYSTEM), ("running", SYSTEM), ("uploading", SYSTEM), ("verifying", AGENT),
    ("interpreting", AGENT), ("clean_result_drafting", AGENT), ("awaiting_promotion", AGENT),
    ("shared", OWNER),
]


def _new(title="Workflow test") -> Experiment:
    experiment = experiments.create_experiment({"title": title}, OWNER)
    db.session.commit()
    return experiment


def _approval_of(experiment: Experiment) -> dict:
    """Approving carries its approval request (the transition guard): a plan version
    and its request, as services.planning.approvals would have stored them."""
    version = PlanVersion(id=uuid.uuid4(), experiment_id=experiment.id, version=1, markdown="## Goal",
                          plan_json={}, problems=[], source="agent")
    db.session.add(version)
    db.session.flush()  # no relationship orders the two inserts
    request = ApprovalRequest(id=uuid.uuid4(), experiment_id=experiment.id, plan_version_id=version.id,
                              kind="experiment_plan", title="Approve", status="approved", checklist={}, answers={})
    db.session.add(request)
    db.session.flush()
    return {"approval_request_id": str(request.id)}


def _move(experiment: Experiment, to: str, actor: Actor, note: str | None = None) -> None:
    metadata = _approval_of(experiment) if to == "approved" and experiment.status == "plan_pending" else None
    lifecycle.transition(experiment, to, actor, note=note, metadata=metadata)


def test_happy_path_end_to_end(app_ctx):
    """Does the whole happy path of SPEC §2.2 go through, one state_changed event per move?"""
    experiment = _new()
    for to, actor in HAPPY_PATH:
        _move(experiment, to, actor, note=f"to {to}")
        db.session.commit()
        assert experiment.status == to
    rows = db.session.execute(sa.select(WorkflowEvent.from_status, WorkflowEvent.to_status)
                              .where(WorkflowEvent.entity_id == experiment.id,
                                     WorkflowEvent.event_type == "state_changed")
                              .order_by(WorkflowEvent.created_at)).all()
    assert [to for _, to in rows] == [to for to, _ in HAPPY_PATH]
    assert rows[0] == ("proposed", "clarifying")


def test_survey_path_skips_pods(app_ctx):
    """Can a survey go approved → implementing → clean_result_drafting … without pods?"""
    experiment = _new()
    for to, actor in [("planning", OWNER), ("plan_pending", SYSTEM), ("approved", OWNER),
                      ("implementing", SYSTEM), ("blocked", AGENT)]:
        note = "waiting for data" if to == "blocked" else None
        _move(experiment, to, actor, note=note)
    assert experiment.status == "blocked" and experiment.status_before_block == "implementing"


@pytest.mark.parametrize("status", sorted(registry.NON_TERMINAL_STATUSES - {"blocked"}))
def test_blocked_from_any_non_terminal_and_back(app_ctx, status):
    """Can anyone block from every non-terminal status, and the owner return to where it was?"""
    experiment = _new()
    db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id).values(status=status))
    db.session.refresh(experiment)
    with pytest.raises(ValidationError):
        lifecycle.transition(experiment, "blocked", AGENT)  # a reason is required
    lifecycle.transition(experiment, "blocked", AGENT, note="Pod exited 1")
    assert experiment.status_before_block == status
    assert any(m.to == status for m in lifecycle.allowed_moves(experiment, "owner"))
    with pytest.raises(Conflict):
        lifecycle.transition(experiment, status, AGENT)  # only the owner unblocks
    lifecycle.transition(experiment, status, OWNER)
    assert experiment.status == status and experiment.status_before_block is None


def test_terminal_statuses_only_reopen_with_note(app_ctx):
    """Is a finished experiment frozen except for the owner's reopen with a note?"""
    experiment = _new()
    lifecycle.transition(experiment, "archived", OWNER, note="not worth it")
    for actor in (AGENT, SYSTEM, TOKEN):
        assert lifecycle.allowed_moves(experiment, actor.transition_role) == []
    assert [m.to for m in lifecycle.allowed_moves(experiment, "owner")] == ["proposed", "planning", "plan_pending"]
    with pytest.raises(ValidationError):
        lifecycle.transition(experiment, "planning", OWNER)
    lifecycle.transition(experiment, "planning", OWNER, note="new data arrived")
    assert experiment.status == "planning"


def test_owner_override_needs_note_and_is_recorded(app_ctx):
    """Does an override skip the table only for the owner, with a note, recorded as override?"""
    experiment = _new()
    with pytest.raises(Forbidden):
        lifecycle.transition(experiment, "running", AGENT, note="x", override=True)
    with pytest.raises(ValidationError):
        lifecycle.transition(experiment, "running", OWNER, override=True)
    lifecycle.transition(experiment, "running", OWNER, note="pods were started by hand", override=True)
    db.session.commit()
    event = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.to_status == "running"))
    assert event.metadata_ == {"override": True} and event.note == "pods were started by hand"


def test_watcher_may_only_move_queued_to_running(app_ctx):
    """Lesson: the pod watcher (system) cannot overwrite the orchestrator's statuses."""
    experiment = _new()
    db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id).values(status="interpreting"))
    db.session.refresh(experiment)
    with pytest.raises(Conflict) as refused:
        lifecycle.transition(experiment, "running", SYSTEM)
    assert "Allowed from interpreting" in refused.value.message


def test_system_cannot_end_an_experiment(app_ctx):
    """Lesson: a pod stop moves an experiment to blocked, never to cancelled."""
    experiment = _new()
    db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id).values(status="running"))
    db.session.refresh(experiment)
    for end in ("cancelled", "archived", "failed", "done_experiment"):
        with pytest.raises(Conflict):
            lifecycle.transition(experiment, end, SYSTEM, note="pod stopped")
    lifecycle.transition(experiment, "blocked", SYSTEM, note="RunPod pod stopped; volume preserved.")
    assert experiment.status == "blocked"


def test_tokens_act_as_agents_not_owner(app_ctx):
    """Are API tokens refused the owner's moves (approve, promote, reopen)?"""
    experiment = _new()
    db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id).values(status="plan_pending"))
    db.session.refresh(experiment)
    with pytest.raises(Conflict):
        lifecycle.transition(experiment, "approved", TOKEN)


def test_side_effects_run_only_after_commit(app_ctx, monkeypatch):
    """Are side effects returned, not run, by transition() — and run by run_side_effects()?"""
    calls = []
    monkeypatch.setitem(lifecycle.SIDE_EFFECT_HOOKS, "start_planner_clarify", [lambda *args: calls.append(args)])
    experiment = _new()
    effects = lifecycle.transition(experiment, "clarifying", OWNER)
    assert calls == [] and [e.name for e in effects] == ["start_planner_clarify"]
    db.session.commit()
    lifecycle.run_side_effects(effects)
    assert calls and calls[0][0] == experiment.id


def test_four_concurrent_writers_one_winner(app):
    """Two owner tabs, an agent and the watcher move the same experiment at once: one wins."""
    with app.app_context():
        experiment = _new()
        db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id)
                           .values(status="code_reviewing"))
        db.session.commit()
        number = experiment.number
    attempts = [("blocked", OWNER, "tab one"), ("archived", OWNER, "tab two"),
                ("testing", AGENT, None), ("implementing", AGENT, None)]
    barrier = threading.Barrier(len(attempts))
    outcomes = []

    def attempt(to, actor, note):
        with app.app_context():
            mine = experiments.get_experiment(number)
            barrier.wait()
            try:
                lifecycle.transition(mine, to, actor, note=note, expected_status="code_reviewing")
                db.session.commit()
                outcomes.append(("won", to))
            except Conflict as exc:
                db.session.rollback()
                outcomes.append(("lost", exc.code))
            finally:
                db.session.remove()

    threads = [threading.Thread(target=attempt, args=a) for a in attempts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    winners = [o for o in outcomes if o[0] == "won"]
    assert len(winners) == 1, outcomes
    assert sorted(o[1] for o in outcomes if o[0] == "lost") == ["stale_status"] * 3
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == winners[0][1]
        moves = db.session.scalar(sa.select(sa.func.count()).select_from(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed"))
        assert moves == 1


def test_override_from_the_page(app, htmx_client, make_experiment):
    """Does the page's override set any status with a note, recorded as an override — and refuse without one?"""
    number = make_experiment("Wrong status")
    refused = htmx_client.post(f"/experiments/{number}/override", data={"to": "running", "expected": "proposed"},
                               headers={"X-CSRFToken": htmx_client.csrf})
    assert "An override needs a note" in refused.text
    done = htmx_client.post(f"/experiments/{number}/override",
                            data={"to": "running", "note": "pods started by hand", "expected": "proposed"},
                            headers={"X-CSRFToken": htmx_client.csrf})
    assert done.status_code == 200 and done.headers["HX-Trigger"] == "pipeline-changed"
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "running"
        event = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.to_status == "running"))
        assert event.metadata_ == {"override": True} and event.note == "pods started by hand"
