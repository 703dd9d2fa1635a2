"""Typed links (SPEC §11.2): both ends must exist, never a link to itself or a duplicate,
every record kind resolves (or says why not yet), read both ways on the belief and the
experiment pages, added and deleted from the panel with and without htmx."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import db
from models.research import Project, ProjectNarrative, RecordLink
from services.core import registry
from services.core.actors import Actor
from services.core.errors import Conflict, NotFound, ValidationError
from services.day import daily_log, todos, weekly_review
from services.planning import ideation
from services.research import beliefs, links, literature
from services.results import results
from services.workflow import experiments, runs
from tests.conftest import csrf_from

OWNER = Actor("owner", None, "Ada")


@pytest.fixture
def records(app, make_experiment):
    """One record of every kind that exists now: ids by kind, and the experiment's number."""
    number = make_experiment("Insecure code, 3 seeds")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        results.save_clean_result(experiment, "<p>It generalizes.</p>", OWNER, title="It generalizes (LOW confidence)")
        belief = beliefs.create_belief({"title": "Narrow finetuning generalizes"}, OWNER)
        project = Project(slug="emergent", title="Emergent misalignment")
        db.session.add(project)
        db.session.flush()
        narrative = ProjectNarrative(project_id=project.id, version=1, body_md="Story.", author_kind="owner")
        run = runs.create_run(kind="experiment", agent="analyzer", request="Analyse.", scope_id=experiment.id)
        paper = literature.add({"title": "Emergent misalignment from narrow finetuning", "year": 2025,
                                "authors": ["Betley, Jan", "Tan, Daniel"], "arxiv_id": "2502.17424",
                                "doi": "10.48550/arXiv.2502.17424"}).item
        todo = todos.create_todo({"title": "Try it at 1B"}, OWNER)
        db.session.add(narrative)
        entry = daily_log.write(daily_log.today() - timedelta(days=1), "owner")
        session = ideation.start_session("belief", belief.id, OWNER)
        db.session.commit()
        review, _ = weekly_review.draft(weekly_review.week_end_for(daily_log.today()), "owner")
        return {"ideation": session.id, "todo": todo.id, "daily_log": entry.id, "weekly_review": review.id, "log_day": entry.day.isoformat(),
                "experiment": experiment.id, "clean_result": experiment.id, "belief": belief.id,
                "project": project.id, "narrative": narrative.id, "run": run.id, "number": number,
                "belief_number": belief.number, "literature": paper.id}


def _link_count(app) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(RecordLink))


def test_every_record_kind_resolves_or_says_why_not(app, records):
    """Does every kind in RECORD_KINDS either load its record with a label and URL, or refuse clearly?"""
    with app.app_context():
        for kind in registry.RECORD_KINDS:
            if kind in links.RESOLVERS:
                ref = links.describe(kind, links.load(kind, records[kind]))
                assert ref.label and ref.url.startswith("/"), kind
                with pytest.raises(NotFound):
                    links.load(kind, uuid.uuid4())
            else:
                with pytest.raises(ValidationError, match="arrive with .*none can be linked yet"):
                    links.load(kind, uuid.uuid4())
        labels = {kind: links.describe(kind, links.load(kind, records[kind])).label for kind in links.RESOLVERS}
    assert labels["experiment"] == f"#{records['number']} It generalizes (LOW confidence)"
    assert labels["belief"] == f"B{records['belief_number']} Narrow finetuning generalizes"
    assert labels["todo"] == "T1 Try it at 1B"
    assert labels["ideation"] == "I1 Ideation on “Narrow finetuning generalizes”"
    assert labels["clean_result"] == f"Result of #{records['number']}: It generalizes (LOW confidence)"
    assert labels["project"] == "Emergent misalignment"
    assert labels["narrative"] == "Narrative v1 of Emergent misalignment"
    assert labels["run"].startswith(f"analyzer run on #{records['number']}")
    assert labels["literature"] == "Betley 2025: Emergent misalignment from narrow finetuning"
    assert labels["daily_log"] == f"Log {records['log_day']}"


def test_typed_references_name_records(app, records):
    """Do "#N", "R N", "BN", a slug, a run's uuid and kind:id each name the right record?"""
    number, belief_number = records["number"], records["belief_number"]
    with app.app_context():
        assert links.parse_reference(f"#{number}").kind == "experiment"
        assert links.parse_reference(f"R{number}").kind == "clean_result"
        assert links.parse_reference(f"#{number} result").kind == "clean_result"
        assert links.parse_reference(f"b{belief_number}").id == records["belief"]
        assert links.parse_reference("emergent").id == records["project"]
        assert links.parse_reference(str(records["run"])).kind == "run"
        assert links.parse_reference(f"narrative:{records['narrative']}").id == records["narrative"]
        assert links.parse_reference("arXiv:2502.17424v2").id == records["literature"]
        assert links.parse_reference("doi:10.48550/arXiv.2502.17424").id == records["literature"]
        assert links.parse_reference(f"literature:{records['literature']}").kind == "literature"
        for bad, message in (("#999", "No experiment #999"), ("B99", "No belief B99"), ("nothing-here", "Nothing is named"),
                             ("weekly_review:" + str(uuid.uuid4()), "No weekly review"),
                             ("todo:" + str(uuid.uuid4()), "No todo"), ("", "Name the record")):
            with pytest.raises((NotFound, ValidationError), match=message):
                links.parse_reference(bad)


def test_a_link_needs_both_ends_and_refuses_itself_and_duplicates(app, records):
    """Is a missing end, a link to itself, a duplicate or an unknown kind refused with nothing written?"""
    with app.app_context():
        experiment = links.describe("experiment", links.load("experiment", records["experiment"]))
        belief = links.describe("belief", links.load("belief", records["belief"]))
        ghost = links.RecordRef("belief", uuid.uuid4(), "B99", "/beliefs/99")
        with pytest.raises(NotFound):
            links.create_link(experiment, "tests", ghost, OWNER)
        with pytest.raises(ValidationError, match="cannot be linked to itself"):
            links.create_link(experiment, "parent", experiment, OWNER)
        with pytest.raises(ValidationError, match="Unknown link kind"):
            links.create_link(experiment, "likes", belief, OWNER)
        with pytest.raises(ValidationError, match="note is too long"):
            links.create_link(experiment, "tests", belief, OWNER, "x" * 2001)
        links.create_link(experiment, "tests", belief, OWNER, "the main test")
        with pytest.raises(Conflict, match="already tests"):
            links.create_link(experiment, "tests", belief, OWNER)
        links.create_link(experiment, "baseline", belief, OWNER)  # another kind between the same two is fine
        db.session.commit()
    assert _link_count(app) == 2


def test_links_read_both_ways_on_the_belief_and_experiment_pages(app, client, owner, records):
    """Is "#N tests B1" listed on the experiment (outgoing) and on the belief (incoming), with its note?"""
    number, belief_number = records["number"], records["belief_number"]
    with app.app_context():
        links.create_link(links.parse_reference(f"#{number}"), "tests", links.parse_reference(f"B{belief_number}"),
                          OWNER, "three seeds")
        db.session.commit()
    experiment_page = client.get(f"/experiments/{number}").text
    assert f'href="/beliefs/{belief_number}">B{belief_number} Narrow finetuning generalizes</a>' in experiment_page
    assert "three seeds" in experiment_page
    belief_page = client.get(f"/beliefs/{belief_number}").text
    assert f'href="/experiments/{number}">#{number} It generalizes (LOW confidence)</a>' in belief_page
    assert "</span> this" in belief_page and "three seeds" in belief_page


def test_the_panel_form_adds_a_link_with_htmx(app, htmx_client, records):
    """Does an htmx post from the belief's panel add the link and answer the refreshed panel alone?"""
    response = htmx_client.post("/links", data={
        "csrf_token": htmx_client.csrf, "record_kind": "belief", "record_id": str(records["belief"]),
        "kind": "produces_evidence_for", "target": f"R{records['number']}", "note": "the figure"})
    assert response.status_code == 200
    assert 'id="links"' in response.text and "<html" not in response.text
    assert f"Result of #{records['number']}" in response.text and "produces evidence for" in response.text
    assert _link_count(app) == 1


@pytest.mark.parametrize("target, kind, message", [
    ("#999", "tests", "No experiment #999"),
    ("B{belief}", "tests", "cannot be linked to itself"),
    ("", "tests", "Name the record"),
    ("#{number}", "likes", "Unknown link kind"),
    ("literature:" + str(uuid.UUID(int=1)), "cites", "No literature item"),
    ("arXiv:1111.11111", "cites", "Nothing is named"),
    ("weekly_review:" + str(uuid.UUID(int=1)), "cites", "No weekly review"),
    ("T99", "cites", "No todo T99"),
])
def test_a_bad_link_is_refused_in_the_panel(app, htmx_client, records, target, kind, message):
    """Is each bad link shown in the panel (htmx: 200, the form kept) with nothing written?"""
    target = target.format(belief=records["belief_number"], number=records["number"])
    response = htmx_client.post("/links", data={
        "csrf_token": htmx_client.csrf, "record_kind": "belief", "record_id": str(records["belief"]),
        "kind": kind, "target": target, "note": "kept note"})
    assert response.status_code == 200 and message in response.text and 'value="kept note"' in response.text
    assert _link_count(app) == 0


def test_a_duplicate_link_without_javascript_is_a_409_page(app, client, owner, records):
    """Without htmx, is a duplicate a 409 page showing the panel and the sentence?"""
    page = client.get(f"/beliefs/{records['belief_number']}")
    data = {"csrf_token": csrf_from(page.text), "record_kind": "experiment", "record_id": str(records["experiment"]),
            "kind": "tests", "target": f"B{records['belief_number']}"}
    first = client.post("/links", data=data)
    assert first.status_code == 303 and first.headers["Location"].endswith(f"/experiments/{records['number']}#links")
    again = client.post("/links", data=data)
    assert again.status_code == 409 and "already tests" in again.text and 'id="links"' in again.text
    assert _link_count(app) == 1


def test_a_link_to_a_missing_record_is_refused(app, client, owner, records):
    """Is a post naming a record that does not exist a 404 with nothing written?"""
    page = client.get("/beliefs")
    response = client.post("/links", data={"csrf_token": csrf_from(page.text), "record_kind": "belief",
                                           "record_id": str(uuid.uuid4()), "kind": "tests", "target": "#1"})
    assert response.status_code == 404 and _link_count(app) == 0


def test_deleting_a_link_asks_first_and_removes_it(app, htmx_client, records):
    """Does the delete form carry a confirmation, remove the link, and answer a repeat calmly?"""
    with app.app_context():
        link = links.create_link(links.parse_reference(f"#{records['number']}"), "tests",
                                 links.parse_reference(f"B{records['belief_number']}"), OWNER)
        db.session.commit()
        link_id = link.id
    page = htmx_client.get(f"/beliefs/{records['belief_number']}", headers={"HX-Request": "false"}).text
    assert f'action="/links/{link_id}/delete"' in page and 'data-confirm="Delete the link' in page
    data = {"csrf_token": htmx_client.csrf, "record_kind": "belief", "record_id": str(records["belief"])}
    response = htmx_client.post(f"/links/{link_id}/delete", data=data)
    assert response.status_code == 200 and "No links yet" in response.text
    assert _link_count(app) == 0
    assert htmx_client.post(f"/links/{link_id}/delete", data=data).status_code == 200


def test_the_panel_has_its_own_page(client, owner, records):
    """Does /links?kind=belief&id=… show the belief's panel, and a bad kind answer 400?"""
    page = client.get(f"/links?kind=belief&id={records['belief']}")
    assert page.status_code == 200 and 'id="links"' in page.text
    assert client.get(f"/links?kind=potato&id={records['belief']}").status_code == 400


def test_the_experiment_page_shows_its_results_links_and_its_poll_sees_new_links(app, client, owner, records):
    """Does the experiment page list its clean result's links too, and does a new link move the page's version?"""
    number = records["number"]
    with app.app_context():
        before = experiments.page_version(number).version
        links.create_link(links.parse_reference(f"R{number}"), "supports",
                          links.parse_reference(f"B{records['belief_number']}"), OWNER)
        db.session.commit()
        after = experiments.page_version(number).version
        assert after != before
        # The live poll reads the same fingerprint on its lean connection.
        assert experiments.live_poll(number, None).version.version == after
    page = client.get(f"/experiments/{number}").text
    assert 'Its clean result</span>' in page and "supports" in page
    assert f'href="/beliefs/{records["belief_number"]}"' in page
