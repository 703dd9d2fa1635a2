"""Board moves with meaning (SPEC §2.4): the exact notes, the intents, the refusals."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from models import WorkflowEvent, db
from services.core.actors import Actor
from services.planning import board_moves
from services.workflow import experiments, lifecycle

OWNER = Actor("owner", "o", "Owner")


def _last_note(experiment):
    return db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.entity_id == experiment.id)
                             .order_by(WorkflowEvent.created_at.desc()).limit(1))


def _last_move_note(experiment):
    return db.session.scalar(sa.select(WorkflowEvent.note).where(
        WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed")
        .order_by(WorkflowEvent.created_at.desc()).limit(1))


def _at(make_experiment, status):
    number = make_experiment(status=status)
    return experiments.get_experiment(number)


@pytest.mark.parametrize("start,target,status,note", [
    ("proposed", "clarifying", "clarifying", "Moved on Pipeline board to clarifying."),
    ("proposed", "planning", "planning", "Moved from idea to planning on the Pipeline board."),
    ("awaiting_clarifications", "clarifying", "clarifying",
     "Owner re-dispatched the planner from awaiting_clarifications."),
    ("plan_pending", "approved", "approved", "Approved from Pipeline board after moving to approved."),
    ("plan_pending", "queued", "approved", "Approved from Pipeline board after moving to queued."),
    ("plan_pending", "running", "approved", "Approved from Pipeline board after moving to running."),
    ("awaiting_promotion", "shared", "shared", "Promoted from Pipeline board as shared."),
])
def test_move_notes(app, app_ctx, make_experiment, start, target, status, note):
    """Does each board move of the SPEC §2.4 table land with its exact note?"""
    experiment = _at(make_experiment, start)
    board_moves.move(experiment, target, OWNER)
    db.session.commit()
    assert experiment.status == status
    assert _last_move_note(experiment) == note


def test_approval_from_board_without_key_stays_approved_and_says_why(app_ctx, make_experiment):
    """Without an API key, approving on the board keeps `approved` and notes why nothing started."""
    experiment = _at(make_experiment, "plan_pending")
    effects = board_moves.move(experiment, "queued", OWNER)
    db.session.commit()
    assert experiment.status == "approved" and effects == []
    assert "No ANTHROPIC_API_KEY is configured" in _last_note(experiment)


def test_approval_from_board_starts_orchestrator_in_same_transaction(app, app_ctx, make_experiment):
    """With a key, the board approval lands at `implementing` with the orchestrator queued."""
    from models import AgentRun
    app.config["ANTHROPIC_API_KEY"] = "sk-ant-test-key-for-orchestrator"
    try:
        experiment = _at(make_experiment, "plan_pending")
        effects = board_moves.move(experiment, "running", OWNER)
        db.session.commit()
        run = db.session.scalar(sa.select(AgentRun))
        assert experiment.status == "implementing"
        assert run.kind == "apply" and run.status == "queued"
        assert _last_note(experiment) == f"Orchestrator {run.short_id} queued to implement and dispatch."
        assert [e.name for e in effects] == ["enqueue_run"]
        moves = [row.to_status for row in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.event_type == "state_changed").order_by(WorkflowEvent.created_at))]
        assert moves[-2:] == ["approved", "implementing"]
    finally:
        app.config["ANTHROPIC_API_KEY"] = ""


def test_reusing_an_approved_plan_records_intent_without_moving(app_ctx, make_experiment):
    """Does moving an approved experiment to running re-use the plan (note + intent, no status change)?"""
    experiment = _at(make_experiment, "approved")
    effects = board_moves.move(experiment, "running", OWNER)
    db.session.commit()
    assert experiment.status == "approved"
    assert _last_note(experiment) == "Re-used existing plan after moving to running."
    assert [e.name for e in effects] == ["start_orchestrator"]


@pytest.mark.parametrize("target", ["blocked", "archived", "cancelled"])
def test_stopping_moves_need_the_owners_note(app_ctx, make_experiment, target):
    """Do blocked/archived/cancelled refuse without a note and keep the owner's note with it?"""
    experiment = _at(make_experiment, "implementing")
    from services.core.errors import ValidationError
    with pytest.raises(ValidationError):
        board_moves.move(experiment, target, OWNER)
    board_moves.move(experiment, target, OWNER, note="GPU budget is gone")
    assert _last_note(experiment) == f"Moved on Pipeline board to {target}. GPU budget is gone"


def test_menu_offers_board_aliases_only_where_they_mean_something(app_ctx, make_experiment):
    """Does the card menu offer queued/running for a pending plan, and not for an idea?"""
    pending = _at(make_experiment, "plan_pending")
    assert {"approved", "queued", "running"} <= {m.to for m in board_moves.options(pending)}
    idea = _at(make_experiment, "proposed")
    assert not {"queued", "running"} & {m.to for m in board_moves.options(idea)}


def test_refused_move_explains_on_the_card(htmx_client, make_experiment):
    """Does a refused board move answer the board with the reason on that card?"""
    number = make_experiment()
    response = htmx_client.post(f"/board/move/{number}", data={"to": "reviewing", "expected": "proposed"},
                                headers={"X-CSRFToken": htmx_client.csrf})
    assert response.status_code == 200
    assert "cannot move from proposed to reviewing" in response.text
    assert "HX-Trigger" not in response.headers


def test_side_effect_hooks_fire_after_a_board_move(htmx_client, make_experiment, monkeypatch):
    """Does the board run the move's hook once the move is committed?"""
    calls = []
    monkeypatch.setitem(lifecycle.SIDE_EFFECT_HOOKS, "start_planner_clarify", [lambda *a: calls.append(a)])
    number = make_experiment()
    response = htmx_client.post(f"/board/move/{number}", data={"to": "clarifying", "expected": "proposed"},
                                headers={"X-CSRFToken": htmx_client.csrf})
    assert response.headers["HX-Trigger"] == "pipeline-changed"
    assert len(calls) == 1


def test_a_board_promotion_meets_the_lint_check(app_ctx, make_experiment):
    """Promoting on the board (a plain status move) is refused like the Promote button when the
    result's lint fails — nothing changes, and the message says where to confirm; a result that
    passes is promoted with its epm:promoted marker."""
    from pathlib import Path

    from services.results import results
    experiment = _at(make_experiment, "awaiting_promotion")
    experiment.body = "<p>Just a sentence, no TL;DR, no figure.</p>"
    db.session.commit()
    with pytest.raises(results.LintFailed) as refused:
        board_moves.move(experiment, "shared", OWNER)
    db.session.rollback()
    assert "Promote from the experiment page to confirm" in refused.value.message
    assert experiments.get_experiment(experiment.number).status == "awaiting_promotion"

    good = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
    experiment.body, experiment.title = good, "Curriculum ordering changes final loss by <1% (MODERATE confidence)"
    assert results.lint(experiment.title, good).passed
    effects = board_moves.move(experiment, "shared", OWNER)
    db.session.commit()
    lifecycle.run_side_effects(effects)
    assert experiment.status == "shared"
    assert db.session.scalar(sa.select(WorkflowEvent.marker).where(WorkflowEvent.marker == "epm:promoted"))
