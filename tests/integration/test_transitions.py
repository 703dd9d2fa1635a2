"""`services.workflow.lifecycle.transition`: the one writer of experiment statuses (SPEC §2.3)."""
from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from models import WorkflowEvent, db
from services.core.actors import Actor
from services.core.errors import Conflict, Forbidden, ValidationError
from services.workflow import experiments, lifecycle

OWNER = Actor("owner", "owner-1", "the owner")
AGENT = Actor("agent", "run-1", "planner")
TOKEN = Actor("token", "token-1", "token laptop")


def _state_events(number: int) -> list[WorkflowEvent]:
    experiment = experiments.get_experiment(number)
    return list(db.session.scalars(
        sa.select(WorkflowEvent).where(WorkflowEvent.entity_id == experiment.id,
                                       WorkflowEvent.event_type == "state_changed")
        .order_by(WorkflowEvent.created_at)))


def test_allowed_move_records_a_state_changed_event(app_ctx, make_experiment):
    """Does an allowed move change the status and log from/to/actor/note/metadata?"""
    number = make_experiment("Warmup spike")
    experiment = experiments.get_experiment(number)
    effects = lifecycle.transition(experiment, "clarifying", OWNER, note="Let's scope it.",
                                   metadata={"source": "test"})
    db.session.commit()
    db.session.expire_all()
    assert experiments.get_experiment(number).status == "clarifying"
    [event] = _state_events(number)
    assert (event.from_status, event.to_status) == ("proposed", "clarifying")
    assert (event.actor_kind, event.actor_id) == ("owner", "owner-1")
    assert event.note == "Let's scope it."
    assert event.metadata_ == {"source": "test"}
    assert [e.name for e in effects] == ["start_planner_clarify"]


def test_forbidden_move_raises_conflict_listing_allowed_moves(app_ctx, make_experiment):
    """Is proposed → running refused with a message that lists the moves allowed from proposed?"""
    number = make_experiment()
    experiment = experiments.get_experiment(number)
    with pytest.raises(Conflict) as refused:
        lifecycle.transition(experiment, "running", OWNER)
    assert refused.value.code == "transition_not_allowed"
    message = refused.value.message
    assert "cannot move from proposed to running" in message
    for allowed in ("clarifying", "planning", "blocked", "cancelled", "archived", "done experiment", "done impl"):
        assert allowed in message.split("Allowed from proposed:")[1]
    assert "_" not in message  # statuses by their labels: a person reads this (a board toast)
    db.session.rollback()
    assert experiments.get_experiment(number).status == "proposed"
    assert _state_events(number) == []


def test_agent_cannot_make_owner_only_moves(app_ctx, make_experiment):
    """Is an agent (or an API token) refused the owner's approve move?"""
    number = make_experiment(status="plan_pending")
    experiment = experiments.get_experiment(number)
    for actor in (AGENT, TOKEN):
        with pytest.raises(Conflict) as refused:
            lifecycle.transition(experiment, "approved", actor)
        assert "as agent" in refused.value.message
    assert experiment.status == "plan_pending"


@pytest.mark.parametrize("to", ["blocked", "cancelled", "archived"])
def test_note_required_moves_refuse_without_a_note(app_ctx, make_experiment, to):
    """Do blocked/cancelled/archived refuse an empty or blank note and change nothing?"""
    number = make_experiment()
    experiment = experiments.get_experiment(number)
    for note in (None, "", "   "):
        with pytest.raises(ValidationError) as refused:
            lifecycle.transition(experiment, to, OWNER, note=note)
        assert "needs a note" in refused.value.message
    db.session.rollback()
    assert experiments.get_experiment(number).status == "proposed"
    assert _state_events(number) == []


def test_unknown_status_is_a_validation_error(app_ctx, make_experiment):
    """Does an unknown target status raise ValidationError naming it?"""
    number = make_experiment()
    experiment = experiments.get_experiment(number)
    with pytest.raises(ValidationError) as refused:
        lifecycle.transition(experiment, "warp_speed", OWNER)
    assert "Unknown status 'warp_speed'" in refused.value.message
    assert experiment.status == "proposed"


def test_stale_expected_status_is_a_conflict(app_ctx, make_experiment):
    """Does a caller who saw an older status get Conflict(stale_status) instead of overwriting?"""
    number = make_experiment(status="clarifying")
    experiment = experiments.get_experiment(number)
    with pytest.raises(Conflict) as refused:
        lifecycle.transition(experiment, "clarifying", OWNER, expected_status="proposed")
    assert refused.value.code == "stale_status"
    assert "is now clarifying" in refused.value.message


def test_blocked_saves_status_before_block_and_owner_returns_to_it(app_ctx, make_experiment):
    """Does blocking save the previous status, and may the owner return to it (clearing it)?"""
    number = make_experiment(status="clarifying")
    experiment = experiments.get_experiment(number)
    lifecycle.transition(experiment, "blocked", AGENT, note="Needs a dataset licence.")
    db.session.commit()
    db.session.expire_all()
    experiment = experiments.get_experiment(number)
    assert experiment.status == "blocked"
    assert experiment.status_before_block == "clarifying"
    assert "clarifying" in {m.to for m in lifecycle.allowed_moves(experiment, "owner")}

    lifecycle.transition(experiment, "clarifying", OWNER)
    db.session.commit()
    db.session.expire_all()
    experiment = experiments.get_experiment(number)
    assert experiment.status == "clarifying"
    assert experiment.status_before_block is None
    assert [(e.from_status, e.to_status) for e in _state_events(number)][-2:] == [
        ("clarifying", "blocked"), ("blocked", "clarifying")]


def test_override_needs_owner_and_note_and_is_recorded(app_ctx, make_experiment):
    """Does an owner override with a note work and record override: true; agents are refused?"""
    number = make_experiment()
    experiment = experiments.get_experiment(number)
    with pytest.raises(Forbidden):
        lifecycle.transition(experiment, "running", AGENT, note="x", override=True)
    with pytest.raises(ValidationError):
        lifecycle.transition(experiment, "running", OWNER, override=True)
    lifecycle.transition(experiment, "running", OWNER, note="Pods were started by hand.", override=True)
    db.session.commit()
    [event] = _state_events(number)
    assert event.to_status == "running"
    assert event.metadata_ == {"override": True}


def test_reopen_a_terminal_experiment_with_a_note(app_ctx, make_experiment):
    """May the owner reopen an archived experiment to proposed, with a note?"""
    number = make_experiment(status="archived")
    experiment = experiments.get_experiment(number)
    with pytest.raises(ValidationError):
        lifecycle.transition(experiment, "proposed", OWNER)
    lifecycle.transition(experiment, "proposed", OWNER, note="New data arrived.")
    db.session.commit()
    assert experiments.get_experiment(number).status == "proposed"


def test_compare_and_set_lets_exactly_one_of_two_racers_win(app, make_experiment):
    """Of two threads moving one experiment from proposed at once, does exactly one win (one event)?"""
    number = make_experiment("Contended")
    loaded = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def racer(to: str) -> None:
        with app.app_context():
            experiment = experiments.get_experiment(number)
            assert experiment.status == "proposed"
            loaded.wait(timeout=10)  # both have seen `proposed` before either writes
            try:
                lifecycle.transition(experiment, to, OWNER, expected_status="proposed")
                db.session.commit()
                outcomes[to] = "won"
            except Conflict as exc:
                db.session.rollback()
                outcomes[to] = exc
            finally:
                db.session.remove()

    threads = [threading.Thread(target=racer, args=(to,)) for to in ("clarifying", "planning")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    winners = [to for to, outcome in outcomes.items() if outcome == "won"]
    losers = [outcome for outcome in outcomes.values() if isinstance(outcome, Conflict)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert losers[0].code == "stale_status"
    with app.app_context():
        assert experiments.get_experiment(number).status == winners[0]
        events = _state_events(number)
        assert [(e.from_status, e.to_status) for e in events] == [("proposed", winners[0])]


def test_transition_note_is_redacted(app_ctx, make_experiment):
    """Is a secret pasted into a transition note stored redacted?"""
    number = make_experiment()
    secret = "sk_" + "S" * 32
    lifecycle.transition(experiments.get_experiment(number), "blocked", OWNER,
                         note=f"Script failed with token {secret}")
    db.session.commit()
    [event] = _state_events(number)
    assert secret not in event.note
    assert event.note.startswith("Script failed with token ")


def test_overlong_note_is_refused_and_nothing_moves(app_ctx, make_experiment):
    """Is a note over 2,000 characters refused before anything is committed?"""
    number = make_experiment()
    with pytest.raises(ValidationError) as refused:
        lifecycle.transition(experiments.get_experiment(number), "blocked", OWNER, note="n" * 2001)
    assert "the limit is 2000" in refused.value.message
    db.session.rollback()
    assert experiments.get_experiment(number).status == "proposed"
    assert _state_events(number) == []
