"""`flask --app app demo load`: a curated board made of real transitions, and bulk data."""
from __future__ import annotations

import sqlalchemy as sa

from models import Experiment, WorkflowEvent, db
from models.day import Todo
from models.research import RecordLink
from services.workflow import lifecycle


def _experiments(app) -> list[Experiment]:
    with app.app_context():
        rows = list(db.session.scalars(sa.select(Experiment).order_by(Experiment.number)))
        db.session.expunge_all()
        return rows


def _state_events(app, experiment_id) -> list[WorkflowEvent]:
    with app.app_context():
        rows = list(db.session.scalars(
            sa.select(WorkflowEvent).where(WorkflowEvent.entity_id == experiment_id,
                                           WorkflowEvent.event_type == "state_changed")
            .order_by(WorkflowEvent.created_at, WorkflowEvent.id)))
        db.session.expunge_all()
        return rows


def test_demo_load_creates_experiments_across_many_statuses(app, runner):
    """Does `demo load` create experiments in at least a dozen statuses, and say how many?"""
    result = runner.invoke(args=["demo", "load"])
    assert result.exit_code == 0, result.output
    made = _experiments(app)
    assert f"Loaded {len(made)} experiments." in result.output
    assert len({e.status for e in made}) >= 12
    assert {"proposed", "plan_pending", "running", "blocked", "shared", "archived"} <= {e.status for e in made}


def test_demo_timelines_are_real_transitions(app, runner):
    """Is each demo timeline a chain of allowed transitions from proposed to its status?"""
    runner.invoke(args=["demo", "load"])
    for experiment in _experiments(app):
        events = _state_events(app, experiment.id)
        if experiment.status == "proposed":
            assert events == []
            continue
        assert events[0].from_status == "proposed"
        assert events[-1].to_status == experiment.status
        before_block = None
        for previous, event in zip([None] + events[:-1], events):
            if previous is not None:
                assert event.from_status == previous.to_status
            probe = Experiment(status=event.from_status, status_before_block=before_block, number=0,
                               kind=experiment.kind)
            allowed = {m.to for m in lifecycle.allowed_moves(probe, event.actor_kind)}
            assert event.to_status in allowed, (experiment.title, event.from_status, event.to_status)
            before_block = event.from_status if event.to_status == "blocked" else None
        if experiment.status == "blocked":
            assert experiment.status_before_block == events[-1].from_status


def test_demo_load_twice_adds_nothing(app, runner):
    """Is loading the curated demo a second time a no-op?"""
    runner.invoke(args=["demo", "load"])
    count = len(_experiments(app))
    result = runner.invoke(args=["demo", "load"])
    assert "Loaded 0 experiments." in result.output
    assert len(_experiments(app)) == count


def test_demo_load_scale_creates_that_many(app, runner):
    """Does `demo load --scale 300` create 300 experiments with events, numbered 1..300?"""
    result = runner.invoke(args=["demo", "load", "--scale", "300"])
    assert result.exit_code == 0, result.output
    assert "Loaded 300 experiments." in result.output
    made = _experiments(app)
    assert [e.number for e in made] == list(range(1, 301))
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id))) >= 300


def test_demo_scale_rejects_a_negative_count(app, runner):
    """Is a negative --scale refused with a clear error and nothing created?"""
    result = runner.invoke(args=["demo", "load", "--scale", "-5"])
    assert result.exit_code != 0
    assert "-5" in result.output
    assert _experiments(app) == []


def test_demo_board_renders(app, runner, client, owner):
    """Does the board render the curated demo with every card?"""
    runner.invoke(args=["demo", "load"])
    response = client.get("/board")
    assert response.status_code == 200
    for experiment in _experiments(app):
        assert f'id="card-{experiment.number}"' in response.text


def test_numbers_continue_after_scale_data(app, runner, make_experiment):
    """After bulk data, does the next experiment get the next number?"""
    runner.invoke(args=["demo", "load", "--scale", "10"])
    assert make_experiment("After the bench") == 11


def test_demo_experiments_past_dispatch_have_pods_with_progress_that_nothing_acts_on(app, runner):
    """The running card has a pod with its epochs (it said "No pods dispatched"), finished
    ones a stopped pod at 100 %, the crashed one its exit; a watcher pass and the run sweeps
    leave these records as they are (no vanish, no block, no recovery)."""
    from models import AgentRun, Pod
    from services.dispatch import watcher
    from services.pipeline import sweeps
    from services.workflow import parking
    runner.invoke(args=["demo", "load"])
    with app.app_context():
        by_status = {e.status: e for e in db.session.scalars(sa.select(Experiment))}
        pods = {p.experiment_id: p for p in db.session.scalars(sa.select(Pod))}
        live = pods[by_status["running"].id]
        assert (live.status, live.progress_pct, live.progress_message) == ("running", 60.0, live.progress_message)
        assert live.progress_message.startswith("epoch 6/10 · loss ")
        assert pods[by_status["completed"].id].status == "stopped" and pods[by_status["completed"].id].exit_code == 0
        assert pods[by_status["completed"].id].progress_pct == 100.0
        assert pods[by_status["blocked"].id].exit_code == 1
        assert by_status["reviewing"].id not in pods  # a survey: no pods
        before = {(p.id, p.status) for p in db.session.scalars(sa.select(Pod))}
        statuses = {e.id: e.status for e in db.session.scalars(sa.select(Experiment))}
        watcher.watch()
        sweeps.reconcile_runs()
        parking.wake_ready_runs()
        db.session.expire_all()
        assert {(p.id, p.status) for p in db.session.scalars(sa.select(Pod))} == before
        assert {e.id: e.status for e in db.session.scalars(sa.select(Experiment))} == statuses
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.status == "queued")) == 0


def test_the_demo_running_card_shows_its_pods_progress(app, runner, client, owner):
    runner.invoke(args=["demo", "load"])
    with app.app_context():
        number = db.session.scalar(sa.select(Experiment.number).where(Experiment.status == "running"))
    board = client.get("/board").text
    card = board[board.index(f'id="card-{number}"'):]
    card = card[:card.index("</article>")]
    assert 'class="pod-progress"' in card and "60%" in card
    page = client.get(f"/experiments/{number}").text
    assert "No pods dispatched" not in page and f"sagan-{number}-demo-0" in page


def test_the_demo_has_todos_in_several_states_one_an_experiment(app, runner):
    """Does the demo hold todos in the inbox and beyond, one that became a demo experiment (linked
    as its origin), and does a second load add none?"""
    runner.invoke(args=["demo", "load"])
    with app.app_context():
        found = list(db.session.scalars(sa.select(Todo)))
        assert {"inbox", "scoped", "open", "blocked", "done", "planning"} <= {t.status for t in found}
        became = [t for t in found if t.experiment_id]
        assert len(became) == 1
        link = db.session.scalars(sa.select(RecordLink).where(RecordLink.target_kind == "todo",
                                                              RecordLink.kind == "derives_from")).one()
        assert (link.source_kind, link.source_id) == ("experiment", became[0].experiment_id)
        total = len(found)
    runner.invoke(args=["demo", "load"])
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Todo)) == total
