"""Follow-ups (SPEC §8.6): children created from a result by the owner or by Claude,
labelled, linked both ways; only the owner may auto-approve their plans."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from models import Experiment, db
from services import experiments, follow_ups, runs
from services.actors import Actor
from services.agents import tools
from services.errors import Forbidden
from tests.conftest import csrf_from


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
                                                                      "title": " ", "hypothesis": "kept"})
    assert response.status_code == 200 and "Title is required." in response.text and ">kept</textarea>" in response.text
    assert _children(app, parent) == []


def test_the_proposers_tool_labels_children_proposed_by_claude(app, client, owner, make_experiment):
    """Does propose_follow_ups create up to three children labelled "proposed by Claude"?"""
    parent = make_experiment("Parent (HIGH confidence)", status="awaiting_promotion")
    with app.app_context():
        experiment = experiments.get_experiment(parent)
        run = runs.create_run(kind="experiment", agent="follow-up-proposer", request="Propose.",
                              scope_id=experiment.id)
        ctx = tools.ToolContext(run, experiment)
        result = tools.call(ctx, "propose_follow_ups", {"experiments": [
            {"title": "Try 350M", "hypothesis": "The gap grows."}, {"title": "Try longer warmup"}]})
        too_many = tools.call(ctx, "propose_follow_ups", {"experiments": [{"title": f"x{i}"} for i in range(4)]})
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
