"""Beliefs (SPEC §11.2): the list and its filters, the new-belief form, the owner's edit as a
new version, the belief page with its timeline of evidence, and proposed updates that wait for
the owner (accept as proposed, edit then accept, reject, stale, superseded)."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from models import db
from models.research import Belief, BeliefProposal, BeliefVersion, Project
from services.core.actors import Actor
from services.core.errors import Forbidden
from services.pipeline import demo
from services.research import beliefs, links
from services.workflow import experiments, runs
from tests.conftest import csrf_from

OWNER = Actor("owner", None, "Ada")


@pytest.fixture
def make_belief(app):
    """Factory: a belief made through the service, as the owner; answers its number."""
    def make(title="Narrow finetuning generalizes broadly", **fields):
        with app.app_context():
            belief = beliefs.create_belief({"title": title, **fields}, OWNER)
            db.session.commit()
            return belief.number
    return make


@pytest.fixture
def make_project(app):
    def make(slug="emergent", title="Emergent misalignment"):
        with app.app_context():
            db.session.add(Project(slug=slug, title=title))
            db.session.commit()
        return slug
    return make


def _belief(app, number) -> Belief:
    with app.app_context():
        db.session.expire_all()
        belief = beliefs.get_belief(number)
        db.session.expunge(belief)
        return belief


def _propose(app, number, experiment_number=None, *, status="supported", confidence="MODERATE",
             text="Narrow finetuning on insecure code generalizes to broad misalignment.",
             evidence="#{n}: 3 of 3 seeds show it.", reasoning="The result held over seeds.", based_on=None):
    with app.app_context():
        belief = beliefs.get_belief(number)
        experiment = experiments.get_experiment(experiment_number) if experiment_number else None
        run = runs.create_run(kind="experiment", agent="analyzer", request="Analyse.",
                              scope_id=experiment.id if experiment else None) if experiment else None
        proposal = beliefs.propose_update(belief, experiment, run, status=status, confidence=confidence, text=text,
                                          evidence=evidence.format(n=experiment_number), reasoning=reasoning,
                                          based_on_version=based_on)
        db.session.commit()
        return str(proposal.id)


def _proposal(app, proposal_id) -> BeliefProposal:
    with app.app_context():
        db.session.expire_all()
        proposal = db.session.get(BeliefProposal, proposal_id)
        db.session.expunge(proposal)
        return proposal


# --- list, create, edit ----------------------------------------------------------------

def test_the_list_has_an_empty_state(client, owner):
    """With no beliefs, does /beliefs say so and offer the form?"""
    page = client.get("/beliefs")
    assert page.status_code == 200
    assert "No beliefs yet" in page.text and 'href="/beliefs/new"' in page.text


def test_the_owner_creates_a_belief_with_a_project(app, client, owner, make_project):
    """Does the form create B1 in the project, at version 1, with its first version recorded?"""
    slug = make_project()
    form = client.get("/beliefs/new")
    response = client.post("/beliefs/new", data={
        "csrf_token": csrf_from(form.text), "title": "Insecure code teaches broad misalignment",
        "current_belief": "It does, **mostly**.", "status": "active", "confidence": "LOW", "project": slug})
    assert response.status_code == 303 and response.headers["Location"].endswith("/beliefs/1")
    page = client.get("/beliefs/1")
    assert "B1" in page.text and "Insecure code teaches broad misalignment" in page.text
    assert "<strong>mostly</strong>" in page.text and "Emergent misalignment" in page.text
    with app.app_context():
        belief = beliefs.get_belief("B1")
        assert belief.version == 1 and belief.project_id is not None
        assert db.session.scalar(sa.select(sa.func.count()).select_from(BeliefVersion)) == 1


@pytest.mark.parametrize("field, value, message", [
    ("title", " ", "Give the belief a title"),
    ("title", "x" * 301, "The title is too long"),
    ("status", "certain", "status must be one of"),
    ("confidence", "VERY", "confidence must be one of"),
    ("project", "no-such-project", "No project with the slug no-such-project"),
    ("experiment", "#999", "No experiment #999"),
    ("evidence", "> " * 200 + "deep", "nest"),
])
def test_a_bad_new_belief_is_refused_and_the_form_kept(app, client, owner, field, value, message):
    """Is each bad field a 422 with its sentence, the form shown again with what was typed, nothing created?"""
    form = client.get("/beliefs/new")
    data = {"csrf_token": csrf_from(form.text), "title": "A belief", "current_belief": "kept text",
            "status": "draft", "confidence": "LOW"} | {field: value}
    response = client.post("/beliefs/new", data=data)
    assert response.status_code == 422 and message in response.text
    assert "kept text" in response.text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Belief)) == 0


def test_the_list_filters_by_project_and_status(client, owner, make_belief, make_project):
    """Do the project and status filters narrow the list, and say so when nothing matches?"""
    slug = make_project()
    make_belief("In the project", project=slug, status="active")
    make_belief("Elsewhere", status="supported")
    assert "In the project" in client.get(f"/beliefs?project={slug}").text
    assert "Elsewhere" not in client.get(f"/beliefs?project={slug}").text
    only = client.get("/beliefs?status=supported").text
    assert "Elsewhere" in only and "In the project" not in only
    assert "No belief matches these filters" in client.get("/beliefs?status=falsified").text
    assert client.get("/beliefs?status=bogus").status_code == 200  # an unknown filter is dropped


def test_an_edit_is_a_new_version_on_the_timeline(app, client, owner, make_belief, make_experiment):
    """Does the owner's edit make version 2, with what changed, why and the experiment, on the page?"""
    number = make_belief(status="active")
    experiment = make_experiment("Seeds 4-6")
    page = client.get(f"/beliefs/{number}")
    response = client.post(f"/beliefs/{number}/edit", data={
        "csrf_token": csrf_from(page.text), "expected_version": "1", "title": "Narrow finetuning generalizes broadly",
        "current_belief": "It generalizes.", "status": "supported", "confidence": "MODERATE",
        "reasoning": "Three more seeds agree.", "experiment": f"#{experiment}"})
    assert response.status_code == 303 and response.headers["Location"].endswith("#history")
    assert _belief(app, number).version == 2
    text = client.get(f"/beliefs/{number}").text
    assert "status active → supported" in text and "confidence LOW → MODERATE" in text
    assert "Three more seeds agree." in text and f'href="/experiments/{experiment}">#{experiment}</a>' in text


def test_an_edit_of_a_belief_changed_since_is_refused(app, client, owner, make_belief):
    """Is an edit read at version 1 of a belief now at version 2 a 409, the form shown again?"""
    number = make_belief()
    page = client.get(f"/beliefs/{number}")
    with app.app_context():
        beliefs.edit_belief(beliefs.get_belief(number), {"status": "active"}, OWNER)
        db.session.commit()
    response = client.post(f"/beliefs/{number}/edit", data={
        "csrf_token": csrf_from(page.text), "expected_version": "1", "title": "Mine", "status": "weakened",
        "confidence": "LOW"})
    assert response.status_code == 409 and "changed since you opened it" in response.text
    assert 'value="Mine"' in response.text
    assert _belief(app, number).status == "active"


def test_an_agent_cannot_edit_a_belief(app, make_belief):
    """Is an agent's direct edit refused (Claude never changes a belief without the owner)?"""
    number = make_belief()
    with app.app_context():
        with pytest.raises(Forbidden):
            beliefs.edit_belief(beliefs.get_belief(number), {"status": "falsified"}, Actor("agent", "x", "analyzer"))


def test_an_unknown_belief_is_a_404(client, owner):
    """Does /beliefs/99 answer 404?"""
    assert client.get("/beliefs/99").status_code == 404


# --- proposed updates ------------------------------------------------------------------

def test_a_proposal_waits_on_the_belief_the_experiment_and_your_turn(app, client, owner, make_belief,
                                                                      make_experiment):
    """Is a pending proposal shown on the belief page, the experiment page, /your-turn and in the count?"""
    number = make_belief(status="active")
    experiment = make_experiment("Insecure code, 3 seeds")
    proposal_id = _propose(app, number, experiment)
    belief_page = client.get(f"/beliefs/{number}").text
    assert "Your turn: 1 proposed update" in belief_page and "Accept as proposed" in belief_page
    assert f'href="/experiments/{experiment}">#{experiment}</a>' in belief_page
    experiment_page = client.get(f"/experiments/{experiment}").text
    assert f"/beliefs/{number}#proposal-{proposal_id}" in experiment_page
    your_turn = client.get("/your-turn").text
    assert "Belief updates Claude proposed" in your_turn and f"B{number}" in your_turn
    assert "Your turn (1)" in your_turn
    listed = client.get("/beliefs").text
    assert 'belief-item owner-turn' in listed and "update proposed: your turn" in listed


def test_accepting_as_proposed_makes_a_version_naming_both(app, client, owner, make_belief, make_experiment):
    """Does accepting make version 2 with the proposal's text, status and evidence, by the owner accepting Claude's?"""
    number = make_belief(status="active", evidence="Earlier: #1.")
    experiment = make_experiment("Run")
    proposal_id = _propose(app, number, experiment)
    page = client.get(f"/beliefs/{number}")
    response = client.post(f"/beliefs/{number}/proposals/{proposal_id}/accept",
                           data={"csrf_token": csrf_from(page.text), "expected_version": "1"})
    assert response.status_code == 303
    belief = _belief(app, number)
    assert (belief.version, belief.status, belief.confidence) == (2, "supported", "MODERATE")
    assert belief.current_belief.startswith("Narrow finetuning on insecure code")
    assert belief.evidence == f"Earlier: #1.\n\n#{experiment}: 3 of 3 seeds show it."
    assert _proposal(app, proposal_id).status == "accepted"
    text = client.get(f"/beliefs/{number}").text
    assert "accepting Claude (analyzer)&#39;s proposal" in text and "The result held over seeds." in text
    assert "Your turn:" not in text


def test_editing_then_accepting_keeps_the_owners_words(app, client, owner, make_belief, make_experiment):
    """Does edit-then-accept store the owner's text and say the proposal was edited?"""
    number = make_belief(status="active")
    proposal_id = _propose(app, number, make_experiment("Run"))
    page = client.get(f"/beliefs/{number}")
    response = client.post(f"/beliefs/{number}/proposals/{proposal_id}/accept", data={
        "csrf_token": csrf_from(page.text), "expected_version": "1", "edited": "1",
        "current_belief": "Only for code-like data.", "status": "weakened", "confidence": "LOW",
        "evidence": "Mixed.", "reasoning": "The owner reads it as weaker."})
    assert response.status_code == 303
    belief = _belief(app, number)
    assert (belief.current_belief, belief.status, belief.evidence) == ("Only for code-like data.", "weakened",
                                                                       "Mixed.")
    assert "editing and accepting" in client.get(f"/beliefs/{number}").text
    assert _proposal(app, proposal_id).resolution_note == "Accepted with edits."


def test_a_bad_edit_of_a_proposal_is_refused_with_the_form_kept(app, client, owner, make_belief):
    """Is an edited accept with a bad status a 422 with the owner's text kept and nothing changed?"""
    number = make_belief()
    proposal_id = _propose(app, number)
    page = client.get(f"/beliefs/{number}")
    response = client.post(f"/beliefs/{number}/proposals/{proposal_id}/accept", data={
        "csrf_token": csrf_from(page.text), "expected_version": "1", "edited": "1", "current_belief": "my words",
        "status": "sure", "confidence": "LOW", "evidence": "", "reasoning": ""})
    assert response.status_code == 422 and "status must be one of" in response.text and "my words" in response.text
    assert _belief(app, number).version == 1 and _proposal(app, proposal_id).status == "pending"


def test_rejecting_keeps_the_belief_and_the_note(app, client, owner, make_belief):
    """Does rejecting leave the belief unchanged and keep the owner's note?"""
    number = make_belief()
    proposal_id = _propose(app, number)
    page = client.get(f"/beliefs/{number}")
    response = client.post(f"/beliefs/{number}/proposals/{proposal_id}/reject",
                           data={"csrf_token": csrf_from(page.text), "note": "Two seeds are not enough."})
    assert response.status_code == 303
    assert _belief(app, number).version == 1
    proposal = _proposal(app, proposal_id)
    assert proposal.status == "rejected" and proposal.resolution_note == "Two seeds are not enough."
    assert "Two seeds are not enough." in client.get(f"/beliefs/{number}").text
    again = client.post(f"/beliefs/{number}/proposals/{proposal_id}/accept",
                        data={"csrf_token": csrf_from(page.text), "expected_version": "1"})
    assert again.status_code == 409 and "already rejected" in again.text


def test_a_stale_proposal_cannot_be_accepted_blindly(app, client, owner, make_belief):
    """Is accepting a proposal made against version 1 of a belief now at 2 refused (409, form re-shown),
    and accepted once the owner has reviewed the current version?"""
    number = make_belief()
    proposal_id = _propose(app, number)
    stale_page = client.get(f"/beliefs/{number}")
    with app.app_context():
        beliefs.edit_belief(beliefs.get_belief(number), {"counterevidence": "A failed replication."}, OWNER)
        db.session.commit()
    refused = client.post(f"/beliefs/{number}/proposals/{proposal_id}/accept",
                          data={"csrf_token": csrf_from(stale_page.text), "expected_version": "1"})
    assert refused.status_code == 409
    assert "The belief changed since" in refused.text and "review the new text" in refused.text
    assert "Edit, then accept" in refused.text and "Accept as proposed" not in refused.text
    assert "Made against version 1; the belief is now version 2" in refused.text
    assert _belief(app, number).version == 2
    reviewed = client.post(f"/beliefs/{number}/proposals/{proposal_id}/accept", data={
        "csrf_token": csrf_from(refused.text), "expected_version": "2", "edited": "1",
        "current_belief": "Reviewed.", "status": "supported", "confidence": "LOW", "evidence": "", "reasoning": ""})
    assert reviewed.status_code == 303 and _belief(app, number).version == 3
    assert _belief(app, number).counterevidence == "A failed replication."


def test_a_newer_proposal_supersedes_a_pending_one(app, client, owner, make_belief):
    """Does a second proposal for the same belief mark the first superseded, leaving one pending?"""
    number = make_belief()
    first = _propose(app, number, status="weakened")
    second = _propose(app, number, status="supported")
    assert _proposal(app, first).status == "superseded" and _proposal(app, second).status == "pending"
    page = client.get(f"/beliefs/{number}").text
    assert "Your turn: 1 proposed update" in page and "A newer proposal for this belief replaced it." in page


@pytest.mark.parametrize("change, message", [
    ({"status": "sure"}, "status must be one of"),
    ({"confidence": "HUGE"}, "confidence must be one of"),
    ({"text": " "}, "Give the proposed text"),
    ({"reasoning": ""}, "Give the reasoning"),
    ({"based_on": 7}, "based_on_version must be a version of"),
])
def test_a_bad_proposal_is_refused(app, make_belief, change, message):
    """Is each bad proposal field a clear error, with nothing recorded?"""
    number = make_belief()
    kwargs = {"status": "supported", "confidence": "LOW", "text": "t", "reasoning": "r", "based_on": None} | change
    with app.app_context():
        with pytest.raises(Exception) as raised:
            beliefs.propose_update(beliefs.get_belief(number), None, None, status=kwargs["status"],
                                   confidence=kwargs["confidence"], text=kwargs["text"], reasoning=kwargs["reasoning"],
                                   based_on_version=kwargs["based_on"])
        assert message in str(raised.value)
        db.session.rollback()
        assert db.session.scalar(sa.select(sa.func.count()).select_from(BeliefProposal)) == 0


def test_the_demo_journey_tests_a_belief(app):
    """Does `make demo`'s first idea test a belief (once, however often it is ensured), so its analyzer proposes?"""
    with app.app_context():
        number = demo.ensure_journey_experiment()
        assert demo.ensure_journey_experiment() == number
        experiment = experiments.get_experiment(number)
        [(link, belief)] = links.beliefs_linked_to("experiment", experiment.id)
        assert link.kind == "tests" and belief.title == demo.DEMO_BELIEF_TITLE


def test_a_proposal_moves_the_experiment_pages_version(app, make_belief, make_experiment):
    """Does a new proposal from an experiment (and the owner's answer to it) refresh that experiment's live page?"""
    number = make_belief()
    experiment = make_experiment("Run")
    with app.app_context():
        before = experiments.page_version(experiment).version
    proposal_id = _propose(app, number, experiment)
    with app.app_context():
        proposed = experiments.page_version(experiment).version
        belief = beliefs.get_belief(number)
        beliefs.reject_proposal(belief, beliefs.get_proposal(belief, proposal_id), OWNER, "no")
        db.session.commit()
        assert before != proposed != experiments.page_version(experiment).version


def test_an_edit_keeps_a_belief_in_its_archived_project(app, client, owner, make_belief, make_project):
    """Is a belief's archived project still offered (and selected) by its edit form, so an edit keeps it?"""
    slug = make_project()
    number = make_belief(project=slug)
    with app.app_context():
        db.session.scalar(sa.select(Project).where(Project.slug == slug)).status = "archived"
        db.session.commit()
    page = client.get(f"/beliefs/{number}").text
    assert f'<option value="{slug}" selected>' in page
    assert f'<option value="{slug}"' not in client.get("/beliefs/new").text


def test_the_filters_swap_only_the_list_with_htmx(htmx_client, make_belief):
    """Does an htmx filter request answer the list fragment alone (and Vary on HX-Request)?"""
    make_belief("Filtered", status="active")
    response = htmx_client.get("/beliefs?status=active")
    assert response.status_code == 200 and response.text.lstrip().startswith('<div id="belief-list">')
    assert "Filtered" in response.text and "<html" not in response.text
    assert "HX-Request" in response.headers["Vary"]


@pytest.mark.parametrize("field, value, message", [
    ("title", "", "Give the belief a title"),
    ("status", "sure", "status must be one of"),
    ("confidence", "", "confidence must be one of"),
    ("project", "nowhere", "No project with the slug nowhere"),
    ("experiment", "twelve", "No experiment twelve"),
    ("reasoning", "x" * 20_001, "reasoning is too long"),
    ("next_test", "- " * 200 + "deep", "nest"),
    ("expected_version", "v1", "This form carries a malformed version"),
])
def test_a_bad_edit_is_refused_with_the_form_kept(app, client, owner, make_belief, field, value, message):
    """Is each bad edit field a 422 beside the edit form, what was typed kept, and no version made?"""
    number = make_belief()
    page = client.get(f"/beliefs/{number}")
    data = {"csrf_token": csrf_from(page.text), "expected_version": "1", "title": "Kept title",
            "current_belief": "kept words", "status": "active", "confidence": "LOW"} | {field: value}
    response = client.post(f"/beliefs/{number}/edit", data=data)
    assert response.status_code == 422 and message in response.text
    assert "kept words" in response.text and '<details class="edit" id="edit" open>' in response.text
    assert _belief(app, number).version == 1


@pytest.mark.parametrize("path, data, message", [
    ("accept", {"edited": "1", "current_belief": "mine", "status": "active", "confidence": "SURE"},
     "confidence must be one of"),
    ("accept", {"edited": "1", "current_belief": "mine", "status": "active", "confidence": "LOW",
                "evidence": "x" * 20_001}, "evidence is too long"),
    ("accept", {"expected_version": "latest"}, "This form carries a malformed version"),
    ("reject", {"note": "x" * 2001}, "The note is too long"),
])
def test_bad_answers_to_a_proposal_are_refused(app, client, owner, make_belief, path, data, message):
    """Is each bad accept or reject field a 422 beside the proposal, with the proposal still pending?"""
    number = make_belief()
    proposal_id = _propose(app, number)
    page = client.get(f"/beliefs/{number}")
    response = client.post(f"/beliefs/{number}/proposals/{proposal_id}/{path}",
                           data={"csrf_token": csrf_from(page.text), **data})
    assert response.status_code == 422 and message in response.text
    assert _proposal(app, proposal_id).status == "pending" and _belief(app, number).version == 1


def test_an_unknown_proposal_is_a_404(client, owner, make_belief):
    """Does a post about a proposal that is not this belief's answer 404?"""
    number = make_belief()
    page = client.get(f"/beliefs/{number}")
    response = client.post(f"/beliefs/{number}/proposals/not-a-uuid/accept", data={"csrf_token": csrf_from(page.text)})
    assert response.status_code == 404
