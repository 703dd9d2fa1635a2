"""Follow-ups (SPEC §8.6): children created from a result by the owner or by Claude,
labelled, linked both ways; only the owner may auto-approve their plans."""
from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import AgentRun, Experiment, WorkflowEvent, db
from services.agents import toolbox, toolkit
from services.core import clock
from services.core.actors import Actor
from services.core.errors import Forbidden
from services.planning import follow_ups
from services.workflow import experiments, lifecycle, runs
from tests.conftest import csrf_from
from tests.fakes.anthropic_server import reply, text, tool_use


def _children(app, number):
    with app.app_context():
        db.session.expire_all()
        return follow_ups.children(experiments.get_experiment(number))


def test_owner_creates_a_follow_up_linked_both_ways(app, client, owner, make_experiment):
    """Does the owner's form create a proposed child, shown on the parent, with the parent on the child?"""
    parent = make_experiment("Curriculum ordering (MODERATE confidence)", status="awaiting_promotion",
                             tags=["curriculum"])
    page = client.get(f"/experiments/{parent}")
    response = client.post(f"/experiments/{parent}/follow-ups", data={
        "csrf_token": csrf_from(page.text), "title": "Does it help at 350M?", "hypothesis": "Bigger gap early.",
        "auto_approve": "1"})
    assert response.status_code == 303 and response.headers["Location"].endswith("#follow-ups")
    [child] = _children(app, parent)
    assert child.status == "proposed" and child.auto_approve_plan and not child.proposed_by_agent
    assert child.tags == ["curriculum", "follow-up"]
    parent_page = client.get(f"/experiments/{parent}").text
    assert f"#{child.number} Does it help at 350M?" in parent_page
    child_page = client.get(f"/experiments/{child.number}").text
    assert f"Follow-up of <a href=\"/experiments/{parent}\">#{parent}" in child_page
    assert "proposed by Claude" not in child_page


def test_a_follow_up_without_a_title_is_refused(app, client, owner, make_experiment):
    """Is a missing title a clear message, with nothing created?"""
    parent = make_experiment("Parent")
    page = client.get(f"/experiments/{parent}")
    response = client.post(f"/experiments/{parent}/follow-ups", data={"csrf_token": csrf_from(page.text),
                                                                      "title": " ", "hypothesis": "kept"},
                           follow_redirects=True)
    assert response.status_code == 200 and "Title is required." in response.text and ">kept</textarea>" in response.text
    assert _children(app, parent) == []


def test_the_proposers_tool_labels_children_proposed_by_claude(app, client, owner, make_experiment):
    """Does propose_follow_ups create up to three children labelled "proposed by Claude"?"""
    parent = make_experiment("Parent (HIGH confidence)", status="awaiting_promotion")
    with app.app_context():
        experiment = experiments.get_experiment(parent)
        run = runs.create_run(kind="experiment", agent="follow-up-proposer", request="Propose.",
                              scope_id=experiment.id)
        ctx = toolkit.ToolContext(run, experiment)
        result = toolbox.call(ctx, "propose_follow_ups", {"experiments": [
            {"title": "Try 350M", "hypothesis": "The gap grows."}, {"title": "Try longer warmup"}]})
        too_many = toolbox.call(ctx, "propose_follow_ups", {"experiments": [{"title": f"x{i}"} for i in range(4)]})
        db.session.commit()
    assert "proposed by Claude" in result.content and not result.is_error
    assert too_many.is_error and "one to 3" in too_many.content
    children = _children(app, parent)
    assert [c.title for c in children] == ["Try 350M", "Try longer warmup"]
    assert all(c.proposed_by_agent and not c.auto_approve_plan for c in children)
    assert client.get(f"/experiments/{parent}").text.count('by-claude">proposed by Claude<') == 2
    assert "proposed by Claude" in client.get(f"/experiments/{children[0].number}").text


def test_only_the_owner_may_auto_approve_a_follow_up(app, make_experiment):
    """Is auto_approve refused for an agent's follow-up?"""
    parent = make_experiment("Parent")
    with app.app_context():
        with pytest.raises(Forbidden):
            follow_ups.create_follow_up(experiments.get_experiment(parent), {"title": "x"},
                                        Actor("agent", None, "proposer"), auto_approve=True)
        db.session.rollback()
        assert db.session.scalar(sa.select(sa.func.count(Experiment.id))) == 1


# --- asking Claude for follow-ups: followups_running and back -------------------------------------

def _ask_for_follow_ups(client, number: int, expected: str = "awaiting_promotion"):
    page = client.get(f"/experiments/{number}")
    return client.post(f"/board/move/{number}", data={"to": "followups_running", "expected": expected,
                                                      "csrf_token": csrf_from(page.text)})


def _status_and_notes(app, number: int) -> tuple[str, list[str]]:
    with app.app_context():
        db.session.expire_all()
        experiment = experiments.get_experiment(number)
        notes = list(db.session.scalars(sa.select(WorkflowEvent.note).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed")
            .order_by(WorkflowEvent.created_at)))
        return experiment.status, notes


def _return_when_done(app) -> int:
    with app.app_context():
        return follow_ups.return_when_done()


def test_asking_for_follow_ups_runs_the_proposer_then_comes_back(app, client, owner, make_experiment,
                                                                 fake_anthropic, worker):
    """awaiting_promotion → followups_running queues the proposer; the result waits while it works;
    once it has proposed, the scheduler moves the result back, naming what was proposed."""
    parent = make_experiment("Curriculum ordering (MODERATE confidence)", status="awaiting_promotion")
    fake_anthropic.script(
        reply(tool_use("propose_follow_ups", {"experiments": [
            {"title": "Does the ordering effect hold at 350M?", "hypothesis": "The gap grows with scale."}]})),
        reply(tool_use("post_marker", {"marker": "epm:follow-ups", "note": "One follow-up: scale."})),
        reply(text("Proposed one follow-up.")))
    response = _ask_for_follow_ups(client, parent)
    assert response.status_code in (200, 303), response.text
    with app.app_context():
        [run] = db.session.scalars(sa.select(AgentRun).where(AgentRun.agent == "follow-up-proposer"))
        assert run.status == "queued" and run.kind == "qa"
    assert _return_when_done(app) == 0  # the proposer has not run yet: the result waits
    assert _status_and_notes(app, parent)[0] == "followups_running"

    worker()
    assert _return_when_done(app) == 1
    status, notes = _status_and_notes(app, parent)
    [child] = _children(app, parent)
    assert status == "awaiting_promotion"
    assert notes[-1] == f"Follow-up proposer {run.short_id} completed; proposed #{child.number}."
    assert child.proposed_by_agent and child.title == "Does the ordering effect hold at 350M?"
    assert _return_when_done(app) == 0  # nothing left to do: no second move


def test_a_failed_proposer_still_returns_the_result(app, client, owner, make_experiment, fake_anthropic):
    """If the proposer ends without proposing (here: cancelled), does the result come back, saying so?"""
    parent = make_experiment("Result", status="reviewing")
    _ask_for_follow_ups(client, parent, expected="reviewing")
    with app.app_context():
        run = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "follow-up-proposer"))
        runs.set_status(run, "cancelled", reason="cancelled_by_owner", error="stop")
        db.session.commit()
    assert _return_when_done(app) == 1
    status, notes = _status_and_notes(app, parent)
    assert status == "reviewing"  # back where it was, not to awaiting_promotion
    assert "cancelled (cancelled_by_owner); nothing was proposed; add follow-ups by hand" in notes[-1]
    assert _children(app, parent) == []


def test_without_an_api_key_the_result_comes_straight_back(app, client, owner, make_experiment, monkeypatch):
    """No key: no run is created, and the experiment goes back at once with the reason."""
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "")
    parent = make_experiment("Result", status="awaiting_promotion")
    _ask_for_follow_ups(client, parent)
    status, notes = _status_and_notes(app, parent)
    assert status == "awaiting_promotion"
    assert notes[-1].startswith("No ANTHROPIC_API_KEY is configured, so Claude cannot propose follow-ups")
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 0


def test_a_stranded_entry_goes_back_after_the_grace(app, make_experiment):
    """An experiment in followups_running with no proposer (the hook never ran) waits out the grace,
    then goes back instead of sitting there for ever."""
    parent = make_experiment("Result", status="awaiting_promotion")
    with app.app_context():
        experiment = experiments.get_experiment(parent)
        lifecycle.transition(experiment, "followups_running", Actor("owner"))  # effects deliberately not run
        db.session.commit()
    assert _return_when_done(app) == 0
    clock.advance(follow_ups.START_GRACE + timedelta(seconds=1))
    assert _return_when_done(app) == 1
    status, notes = _status_and_notes(app, parent)
    assert status == "awaiting_promotion" and notes[-1].startswith("No follow-up proposer started")


def test_only_results_can_ask_for_follow_ups(app, client, owner, make_experiment):
    """From `running`, is followups_running refused with nothing changed and no run queued?"""
    number = make_experiment("Still running", status="running")
    response = _ask_for_follow_ups(client, number, expected="running")
    assert response.status_code == 303  # post/redirect/get: the refusal is on the board it leads to
    assert "cannot move from running to followups running" in client.get(response.headers["Location"]).text
    assert _status_and_notes(app, number)[0] == "running"
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 0


def test_the_follow_ups_panel_asks_claude_and_says_it_is_working(app, client, owner, make_experiment, fake_anthropic):
    """Does the panel offer "Ask Claude for follow-ups" on a result, and say Claude is working after?"""
    parent = make_experiment("Result", status="awaiting_promotion")
    page = client.get(f"/experiments/{parent}").text
    assert "Ask Claude for follow-ups" in page
    response = client.post(f"/experiments/{parent}/status", data={
        "to": "followups_running", "expected": "awaiting_promotion", "csrf_token": csrf_from(page)})
    assert response.status_code == 303
    after = client.get(f"/experiments/{parent}").text
    assert "Claude is proposing follow-ups" in after and "Ask Claude for follow-ups" not in after
    assert "Ask Claude for follow-ups" not in client.get(f"/experiments/{make_experiment('Idea')}").text


def test_after_a_block_the_result_returns_to_where_it_asked_from(app, client, owner, make_experiment,
                                                                  fake_anthropic):
    """reviewing → followups_running → blocked (the proposer's failure) → unblocked: does the result
    go back to `reviewing`, the status it asked from, not to the default?"""
    parent = make_experiment("Result", status="reviewing")
    _ask_for_follow_ups(client, parent, expected="reviewing")
    with app.app_context():
        experiment = experiments.get_experiment(parent)
        run = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "follow-up-proposer"))
        runs.set_status(run, "failed", reason="provider_error", error="down")
        lifecycle.transition(experiment, "blocked", Actor.system(), note="Proposer failed twice.")
        lifecycle.transition(experiment, "followups_running", Actor("owner"), note="Try again later.")
        db.session.commit()
    clock.advance(follow_ups.START_GRACE + timedelta(seconds=1))
    assert _return_when_done(app) == 1
    assert _status_and_notes(app, parent)[0] == "reviewing"
