"""The todos API (SPEC §12.2, docs/api.md): list with filters, create, read with links, patch,
and make a todo an experiment (201 the first time, 200 with the same experiment after)."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from models import Experiment, db
from models.day import Todo
from models.research import Project, RecordLink


def _count(app, model) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model))


@pytest.fixture
def project(app):
    with app.app_context():
        db.session.add(Project(slug="emergent", title="Emergent misalignment"))
        db.session.commit()
    return "emergent"


def test_a_todo_is_created_read_and_listed_in_camel_case(app, api_client, project):
    """Does POST make T1 (201, camelCase, inbox by default), GET read it by "T1", and the list filter it?"""
    client = api_client("read,write")
    created = client.post("/api/todos", json={"title": "Replicate it", "bodyMd": "Three seeds.",
                                              "intent": "replication", "project": project})
    assert created.status_code == 201
    todo = created.get_json()["todo"]
    assert (todo["cite"], todo["status"], todo["intent"], todo["priority"], todo["assigneeKind"], todo["bodyMd"]) == \
        ("T1", "inbox", "replication", "normal", "human", "Three seeds.")
    assert todo["projectId"] and todo["experimentId"] is None
    read = client.get("/api/todos/T1").get_json()
    assert read["todo"]["id"] == todo["id"] and read["links"] == {"outgoing": [], "incoming": []}
    assert client.get(f"/api/todos/{todo['id']}").status_code == 200
    client.post("/api/todos", json={"title": "Elsewhere", "status": "open"})
    assert [t["cite"] for t in client.get(f"/api/todos?project={project}").get_json()["todos"]] == ["T1"]
    assert [t["cite"] for t in client.get("/api/todos?status=open").get_json()["todos"]] == ["T2"]
    assert [t["cite"] for t in client.get("/api/todos?intent=replication").get_json()["todos"]] == ["T1"]


def test_a_patch_changes_only_what_was_sent(app, api_client):
    """Does PATCH change the fields sent, answer which changed, and leave the rest?"""
    client = api_client("read,write")
    client.post("/api/todos", json={"title": "Scope me", "priority": "low"})
    response = client.patch("/api/todos/T1", json={"status": "scoped", "assigneeKind": "agent"})
    assert response.status_code == 200
    body = response.get_json()
    assert body["changed"] == ["assignee_kind", "status"] and body["todo"]["priority"] == "low"
    assert client.patch("/api/todos/T1", json={"status": "scoped"}).get_json()["changed"] == []


def test_making_an_experiment_twice_answers_the_same_one(app, api_client, project):
    """Is the first POST …/experiment a 201 with a new experiment, the second a 200 with the same
    one, with one experiment and one derives_from link in all?"""
    client = api_client("read,write")
    client.post("/api/todos", json={"title": "Does it hold at 1B?", "bodyMd": "It should.", "priority": "high",
                                    "project": project})
    first = client.post("/api/todos/T1/experiment")
    assert first.status_code == 201
    body = first.get_json()
    assert body["created"] is True and body["experiment"]["status"] == "proposed"
    assert body["todo"]["status"] == "planning" and body["todo"]["experimentNumber"] == body["experiment"]["number"]
    again = client.post("/api/todos/T1/experiment")
    assert again.status_code == 200 and again.get_json()["created"] is False
    assert again.get_json()["experiment"]["id"] == body["experiment"]["id"]
    assert _count(app, Experiment) == 1 and _count(app, RecordLink) == 1
    experiment = client.get(f"/api/experiments/{body['experiment']['number']}").get_json()["experiment"]
    assert (experiment["hypothesis"], experiment["priority"]) == ("It should.", "high")
    assert experiment["projectId"] == body["todo"]["projectId"]
    links = client.get("/api/todos/T1").get_json()["links"]["incoming"]
    assert [(link["kind"], link["sourceKind"]) for link in links] == [("derives_from", "experiment")]


@pytest.mark.parametrize("body, message", [
    ({}, "Give the todo a title"),
    ({"title": ""}, "Give the todo a title"),
    ({"title": 12}, "Give the todo a title"),
    ({"title": "x", "status": "someday"}, "status must be one of"),
    ({"title": "x", "intent": "whim"}, "intent must be one of"),
    ({"title": "x", "priority": "asap"}, "priority must be one of"),
    ({"title": "x", "assigneeKind": "robot"}, "assignee_kind must be one of"),
    ({"title": "x", "project": "nowhere"}, "No project with the slug nowhere"),
    ({"title": "x", "project": 3}, "project must be a project's slug"),
    ({"title": "x", "bodyMd": ["a"]}, "body_md must be text"),
    ({"title": "x", "bodyMd": "x" * 50_001}, "The body is too long"),
    ({"title": "x", "colour": "red"}, "Unknown field"),
])
def test_bad_todos_are_refused(app, api_client, body, message):
    """Is each bad body a 400 with its sentence, and nothing created?"""
    response = api_client("read,write").post("/api/todos", json=body)
    assert response.status_code == 400 and message in response.get_json()["message"], response.get_json()
    assert _count(app, Todo) == 0


def test_a_5_mb_body_is_refused_at_the_door(app, api_client):
    """Is a 5 MB JSON body refused (413) before anything is made?"""
    response = api_client("read,write").post("/api/todos", json={"title": "x", "bodyMd": "x" * (5 * 1024 * 1024)})
    assert response.status_code == 413 and response.is_json
    assert _count(app, Todo) == 0


def test_bad_requests_are_clear(app, api_client):
    """Unknown todo (404), bad filters (400), a bad patch (400, unchanged), a read token writing (403)?"""
    client = api_client("read,write")
    client.post("/api/todos", json={"title": "Stays"})
    assert client.get("/api/todos/T99").status_code == 404
    assert client.post("/api/todos/T99/experiment").status_code == 404
    for query in ("status=someday", "intent=whim", "project=nowhere", "limit=0"):
        assert client.get(f"/api/todos?{query}").status_code == 400, query
    assert client.patch("/api/todos/T1", json={"title": " "}).status_code == 400
    assert client.get("/api/todos/T1").get_json()["todo"]["title"] == "Stays"
    reader = api_client("read")
    assert reader.post("/api/todos", json={"title": "No"}).status_code == 403
    assert reader.post("/api/todos/T1/experiment").status_code == 403
    assert _count(app, Experiment) == 0


def test_a_closed_todo_is_a_409(app, api_client):
    """Is making an experiment from a cancelled todo a 409 that names the way out?"""
    client = api_client("read,write")
    client.post("/api/todos", json={"title": "Dropped", "status": "cancelled"})
    response = client.post("/api/todos/T1/experiment")
    assert response.status_code == 409 and "reopen it" in response.get_json()["message"]
    assert _count(app, Experiment) == 0
