"""The agents' belief tools through the toolbox (SPEC §11.2): search and read beliefs, propose
an update that waits for the owner, link the run's experiment; bad input comes back to the
model as a tool error, never an exception, and writes nothing."""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from models import db
from models.research import Belief, BeliefProposal, Project, RecordLink
from services.agents import toolbox, toolkit
from services.claude import loader
from services.core.actors import Actor
from services.research import beliefs, links
from services.results import results
from services.workflow import experiments, runs

OWNER = Actor("owner", None, "Ada")


@pytest.fixture
def setting(app, make_experiment):
    """An experiment with a clean result that tests B1 (in a project), and B2 elsewhere."""
    number = make_experiment("Insecure code, 3 seeds")
    with app.app_context():
        project = Project(slug="emergent", title="Emergent misalignment")
        db.session.add(project)
        db.session.flush()
        tested = beliefs.create_belief({"title": "Narrow finetuning generalizes broadly", "project": "emergent",
                                        "status": "active", "evidence": "Betley et al."}, OWNER)
        beliefs.create_belief({"title": "Reward hacking transfers"}, OWNER)
        experiment = experiments.get_experiment(number)
        results.save_clean_result(experiment, "<p>Yes.</p>", OWNER, title="It generalizes (LOW confidence)")
        links.create_link(links.parse_reference(f"#{number}"), "tests", links.parse_reference(f"B{tested.number}"),
                          OWNER)
        db.session.commit()
    return number


def _call(app, number, name, data, agent="analyzer"):
    with app.app_context():
        experiment = experiments.get_experiment(number)
        # A sub-agent's run ("qa" kind here): an experiment has one live dispatch run at a time.
        run = runs.create_run(kind="qa", agent=agent, request="Analyse.", scope_id=experiment.id)
        result = toolbox.call(toolkit.ToolContext(run, experiment), name, data)
        db.session.commit()
        return result


def _count(app, model) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model))


def test_the_right_agents_have_the_belief_tools():
    """Does the analyzer have all four belief tools and the planner search, read and add_link?"""
    assert {"search_beliefs", "read_belief", "propose_belief_update", "add_link"} <= set(loader.get("analyzer").tools)
    planner = set(loader.get("experiment-planner").tools)
    assert {"search_beliefs", "read_belief", "add_link"} <= planner and "propose_belief_update" not in planner


def test_search_finds_beliefs_by_words_status_project_and_link(app, setting):
    """Does search_beliefs find by words, status, project slug, and the beliefs linked to the experiment?"""
    by_words = json.loads(_call(app, setting, "search_beliefs", {"text": "finetuning"}).content)
    assert [b["cite"] for b in by_words["beliefs"]] == ["B1"]
    by_status = json.loads(_call(app, setting, "search_beliefs", {"status": "draft"}).content)
    assert [b["cite"] for b in by_status["beliefs"]] == ["B2"]
    by_project = json.loads(_call(app, setting, "search_beliefs", {"project": "emergent"}).content)
    assert [b["cite"] for b in by_project["beliefs"]] == ["B1"]
    linked = json.loads(_call(app, setting, "search_beliefs", {"linked": True}).content)
    assert linked["beliefs"][0]["link"] == f"#{setting} tests B1"
    assert "No belief matches" in _call(app, setting, "search_beliefs", {"text": "zebra"}).content


def test_read_belief_shows_the_version_history_and_links(app, setting):
    """Does read_belief give the text, the version to propose against, the history and the links?"""
    record = json.loads(_call(app, setting, "read_belief", {"belief": "B1"}).content)
    assert record["cite"] == "B1" and record["version"] == 1 and record["evidence"] == "Betley et al."
    assert record["history"][0]["changes"] == ["created"]
    assert record["links"] == [f"#{setting} It generalizes (LOW confidence) tests B1"]


def test_a_proposal_waits_for_the_owner(app, setting):
    """Does propose_belief_update record a pending proposal from this run and leave the belief unchanged?"""
    result = _call(app, setting, "propose_belief_update", {
        "belief": "B1", "status": "supported", "confidence": "MODERATE", "text": "It generalizes.",
        "evidence": f"#{setting}: 3 of 3 seeds.", "reasoning": "Held over seeds.", "based_on_version": 1})
    assert not result.is_error and "waits for the owner" in result.content
    with app.app_context():
        proposal = db.session.scalar(sa.select(BeliefProposal))
        belief = beliefs.get_belief("B1")
        assert proposal.status == "pending" and proposal.agent_run_id is not None
        assert proposal.experiment_id == experiments.get_experiment(setting).id
        assert (belief.status, belief.version) == ("active", 1)


@pytest.mark.parametrize("name, data, message", [
    ("search_beliefs", {"status": "certain"}, "status must be one of"),
    ("search_beliefs", {"project": "no-such"}, "No project with the slug no-such"),
    ("search_beliefs", {"colour": "red"}, "Unknown input: colour"),
    ("read_belief", {}, "Missing required input: belief"),
    ("read_belief", {"belief": "B99"}, "No belief B99"),
    ("read_belief", {"belief": 3}, "belief must be string"),
    ("propose_belief_update", {"belief": "B1", "status": "supported", "confidence": "SURE", "text": "t",
                               "reasoning": "r", "based_on_version": 1}, "confidence must be one of"),
    ("propose_belief_update", {"belief": "B1", "status": "supported", "confidence": "LOW", "text": " ",
                               "reasoning": "r", "based_on_version": 1}, "Give the proposed text"),
    ("propose_belief_update", {"belief": "B1", "status": "supported", "confidence": "LOW", "text": "t",
                               "reasoning": "r", "based_on_version": 5}, "based_on_version must be a version of B1"),
    ("propose_belief_update", {"belief": "B1", "status": "supported", "confidence": "LOW", "text": "t",
                               "reasoning": "r"}, "Missing required input: based_on_version"),
    ("add_link", {"kind": "tests", "target": "B99"}, "No belief B99"),
    ("add_link", {"kind": "likes", "target": "B1"}, "kind must be one of"),
    ("add_link", {"kind": "tests", "target": "B1"}, "already tests"),
    ("add_link", {"kind": "parent", "target": "#{number}"}, "cannot be linked to itself"),
    ("add_link", {"kind": "cites", "target": "literature:00000000-0000-4000-8000-000000000001"},
     "No literature item"),
    ("add_link", {"kind": "cites", "target": "weekly_review:00000000-0000-4000-8000-000000000001"},
     "No weekly review"),
    ("add_link", {"kind": "cites", "target": "T99"}, "No todo T99"),
])
def test_bad_input_is_a_tool_error_that_writes_nothing(app, setting, name, data, message):
    """Is each bad call an error result naming the problem, with no proposal or link written?"""
    data = {k: v.format(number=setting) if isinstance(v, str) else v for k, v in data.items()}
    links_before = _count(app, RecordLink)
    result = _call(app, setting, name, data)
    assert result.is_error and message in result.content, result.content
    assert _count(app, BeliefProposal) == 0 and _count(app, RecordLink) == links_before
    assert _count(app, Belief) == 2


def test_add_link_links_the_experiment_or_its_result(app, setting):
    """Does add_link link from the run's experiment, or from its clean result, marked as made by an agent?"""
    result = _call(app, setting, "add_link", {"kind": "supports", "target": "B1", "from_result": True,
                                              "note": "3 of 3 seeds"})
    assert not result.is_error and result.content.startswith(f"Linked: Result of #{setting}")
    with app.app_context():
        link = db.session.scalar(sa.select(RecordLink).where(RecordLink.kind == "supports"))
        assert (link.source_kind, link.actor_kind, link.note) == ("clean_result", "agent", "3 of 3 seeds")
