"""The ideation JSON API (SPEC §12.4, §9.2): list, read, start from a source (by id or by the
label people cite), save answers (all or nothing), add a card, promote one once; scopes; and
every bad body refused with a sentence and nothing changed."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import Experiment, db
from models.ideation import IdeaCard, IdeationSession
from models.research import Belief, RecordLink
from services.core.actors import Actor
from services.results import results
from tests.integration.queries import counting_queries

RESULT_TITLE = "Curriculum ordering changes final loss by <1% (MODERATE confidence)"
RESULT_HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()


def _count(app, model, *where) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model).where(*where))


@pytest.fixture
def clean_result(app, make_experiment):
    number = make_experiment("Does the easy-to-hard curriculum speed up the 125M model?", status="awaiting_promotion")
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        results.save_clean_result(experiment, RESULT_HTML, Actor("agent", None, "analyzer"), title=RESULT_TITLE)
        db.session.commit()
    return number


@pytest.fixture
def writer(api_client):
    return api_client("read,write")


@pytest.fixture
def started(writer, clean_result) -> dict:
    answer = writer.post("/api/ideas", json={"sourceKind": "clean_result", "sourceId": f"R{clean_result}"})
    assert answer.status_code == 201, answer.json
    return answer.json["session"]


def test_start_from_a_clean_result_by_its_label_and_read_it(app, writer, clean_result, started):
    assert started["cite"] == "I1" and started["sourceKind"] == "clean_result"
    assert started["title"] == RESULT_TITLE and started["source"]["url"] == f"/experiments/{clean_result}#clean-result"
    questions = started["questions"]
    assert [q["position"] for q in questions] == list(range(1, 8)) and all(q["answer"] == "" for q in questions)
    assert questions[0]["question"] == f'What assumption behind "{RESULT_TITLE}" would fail first?'
    for ref in ("I1", "1", started["id"]):
        read = writer.get(f"/api/ideas/{ref}")
        assert read.status_code == 200 and read.json["session"]["id"] == started["id"], ref
    listed = writer.get("/api/ideas").json["sessions"]
    assert [(s["cite"], s["openCards"], s["promotedCards"]) for s in listed] == [("I1", 0, 0)]


def test_start_by_uuid_and_from_a_belief(app, writer):
    with app.app_context():
        belief = Belief(number=4, title="Curricula barely matter", current_belief="Order changes loss <1%.",
                        status="active")
        db.session.add(belief)
        db.session.commit()
        belief_id = str(belief.id)
    for source_id in (belief_id, "B4"):
        answer = writer.post("/api/ideas", json={"source_kind": "belief", "source_id": source_id})
        assert answer.status_code == 201 and answer.json["session"]["sourceId"] == belief_id


def test_answers_save_and_a_bad_one_saves_none(app, writer, started):
    saved = writer.post("/api/ideas/I1/answers", json={"answers": {"1": "The seed count.", "4": "Two more seeds."}})
    assert saved.status_code == 200 and saved.json["changed"] is True
    assert [q["answer"] for q in saved.json["session"]["questions"]][:4] == ["The seed count.", "", "",
                                                                           "Two more seeds."]
    again = writer.post("/api/ideas/I1/answers", json={"answers": {"1": "The seed count."}})
    assert again.status_code == 200 and again.json["changed"] is False
    for body, message in (({"answers": {"9": "x"}}, "There is no question 9"),
                          ({"answers": {"2": "fine", "3": 7}}, "must be text"),
                          ({"answers": {"2": "x" * 10_001}}, "the limit is 10,000"),
                          ({"answers": ["a"]}, "question number → text"),
                          ({}, '"answers"'),
                          ({"answers": {"2": "x"}, "extra": 1}, "Unknown field")):
        refused = writer.post("/api/ideas/I1/answers", json=body)
        assert refused.status_code == 400 and message in refused.json["message"], (body, refused.json)
    assert writer.post("/api/ideas/I1/answers", data="not json", content_type="application/json").status_code == 400
    with app.app_context():
        assert db.session.scalar(sa.select(IdeationSession.answers)) == {"1": "The seed count.",
                                                                         "4": "Two more seeds."}


def test_add_a_card_and_promote_it_to_an_experiment_once(app, writer, clean_result, started):
    added = writer.post("/api/ideas/I1/cards", json={"title": "Run 2 more seeds", "bodyMd": "Seeds 3 and 4."})
    assert added.status_code == 201
    card = added.json["card"]
    assert (card["origin"], card["status"], card["title"]) == ("owner", "open", "Run 2 more seeds")
    first = writer.post(f"/api/ideas/I1/cards/{card['id']}/promote", json={"target": "experiment"})
    assert first.status_code == 201 and first.json["created"] is True
    promoted = first.json["card"]
    assert promoted["status"] == "promoted" and promoted["promotedKind"] == "experiment"
    number = int(promoted["promotedUrl"].rsplit("/", 1)[1])
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        assert experiment.status == "proposed" and experiment.title == "Run 2 more seeds"
        assert db.session.scalar(sa.select(sa.func.count()).select_from(RecordLink)
                                 .where(RecordLink.source_id == experiment.id)) == 1
    second = writer.post(f"/api/ideas/I1/cards/{card['id']}/promote", json={"target": "experiment"})
    assert second.status_code == 200 and second.json["created"] is False
    assert "promoted already" in second.json["message"]
    assert _count(app, Experiment) == 2
    read = writer.get("/api/ideas/I1").json["session"]
    assert (read["openCards"], read["promotedCards"]) == (0, 1)


def test_promote_to_a_literature_task(app, writer, started):
    card = writer.post("/api/ideas/I1/cards", json={"title": "Find curriculum papers"}).json["card"]
    answer = writer.post(f"/api/ideas/I1/cards/{card['id']}/promote", json={"target": "literature_task"})
    assert answer.status_code == 201 and answer.json["card"]["promotedUrl"].startswith("/todos/")


@pytest.mark.parametrize("path, body, status, message", [
    ("/api/ideas", {"sourceKind": "paper", "sourceId": str(uuid.uuid4())}, 400, "starts from a clean result"),
    ("/api/ideas", {"sourceKind": "clean_result"}, 400, "Name the source record"),
    ("/api/ideas", {"sourceId": "R1"}, 400, "Name the source's kind"),
    ("/api/ideas", {"sourceKind": "belief", "sourceId": str(uuid.uuid4())}, 404, "No belief"),
    ("/api/ideas", {"sourceKind": "belief", "sourceId": "B99"}, 404, "No belief"),
    ("/api/ideas", {"sourceKind": "belief", "sourceId": ["B1"]}, 400, "are text"),
    ("/api/ideas", {"sourceKind": "belief", "sourceId": "B1", "why": 1}, 400, "Unknown field"),
    ("/api/ideas/I1/cards", {"title": "   "}, 400, "Give the idea a title"),
    ("/api/ideas/I1/cards", {"title": "x" * 301}, 400, "the limit is 300"),
    ("/api/ideas/I1/cards", {"title": "Fine", "bodyMd": 3}, 400, "must be text"),
    ("/api/ideas/I9/cards", {"title": "Fine"}, 404, "No ideation session I9"),
    ("/api/ideas/I1/cards/CARD/promote", {"target": "paper"}, 400, "Promote a card to"),
    ("/api/ideas/I1/cards/CARD/promote", {"target": "belief_update", "targetRef": "x" * 81}, 400, "a few characters"),
    ("/api/ideas/I1/cards/CARD/promote", {"target": "result_question", "targetRef": "R99"}, 404, "No experiment #99"),
    ("/api/ideas/I1/cards/nope/promote", {"target": "experiment"}, 404, "No such idea card"),
])
def test_bad_input_is_refused_and_changes_nothing(app, writer, started, path, body, status, message):
    card = writer.post("/api/ideas/I1/cards", json={"title": "The one card"}).json["card"]
    sessions, cards, experiments = _count(app, IdeationSession), _count(app, IdeaCard), _count(app, Experiment)
    answer = writer.post(path.replace("CARD", card["id"]), json=body)
    assert answer.status_code == status and message in answer.json["message"], answer.json
    assert (_count(app, IdeationSession), _count(app, IdeaCard), _count(app, Experiment)) == \
        (sessions, cards, experiments)
    assert _count(app, IdeaCard, IdeaCard.status == "open") == 1


def test_a_read_token_reads_but_cannot_write(app, api_client, started):
    reader = api_client("read")
    assert reader.get("/api/ideas/I1").status_code == 200
    for path, body in (("/api/ideas", {"sourceKind": "clean_result", "sourceId": "R1"}),
                       ("/api/ideas/I1/answers", {"answers": {"1": "x"}}),
                       ("/api/ideas/I1/cards", {"title": "x"})):
        assert reader.post(path, json=body).status_code == 403, path
    assert _count(app, IdeaCard) == 0 and _count(app, IdeationSession) == 1


def test_reading_a_session_is_a_constant_number_of_queries(app, writer, started):
    writer.post("/api/ideas/I1/cards", json={"title": "One"})
    with counting_queries() as few:
        assert writer.get("/api/ideas/I1").status_code == 200
    for index in range(5):
        writer.post("/api/ideas/I1/cards", json={"title": f"More {index}"})
    with counting_queries() as many:
        assert writer.get("/api/ideas/I1").status_code == 200
    assert len(few) == len(many)
