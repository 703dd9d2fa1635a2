"""The beliefs and links API (SPEC §11.2, docs/api.md): camelCase answers, scopes as for
experiments, accept/reject for the owner's session only, clear 4xx for bad input."""
from __future__ import annotations

import flask_migrate
import pytest
from hypothesis import given
from hypothesis import strategies as st

from models import db
from services.core.actors import Actor
from services.research import beliefs
from services.workflow import experiments
from services.core.auth import create_owner, create_token
from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, csrf_from
from tests.integration.test_hardening_sqlite import _login, _writer
from tests.integration.test_migrations import MIGRATIONS, _scratch_app
from tests.integration.test_security_sweep import FUZZ, _check, _counts, bodies

OWNER = Actor("owner", None, "Ada")


def _propose(app, number="B1", based_on=None):
    with app.app_context():
        proposal = beliefs.propose_update(beliefs.get_belief(number), None, None, status="supported",
                                          confidence="HIGH", text="Proposed.", evidence="#1", reasoning="Because.",
                                          based_on_version=based_on)
        db.session.commit()
        return str(proposal.id)


@pytest.fixture
def owner_json(client, owner):
    """The owner's session client, with the CSRF header every state change needs."""
    client.environ_base["HTTP_X_CSRFTOKEN"] = owner.csrf()
    return client


def test_create_read_patch_and_list(api_client, make_experiment):
    """Does a write token create B1, read it camelCase, patch it into version 2 and list it?"""
    scripted = api_client("read,write")
    number = make_experiment("Evidence")
    created = scripted.post("/api/beliefs", json={"title": "It generalizes", "currentBelief": "Yes.",
                                                  "confidence": "LOW"})
    assert created.status_code == 201
    body = created.get_json()["belief"]
    assert (body["cite"], body["version"], body["currentBelief"], body["status"]) == ("B1", 1, "Yes.", "draft")
    patched = scripted.patch("/api/beliefs/B1", json={"status": "supported", "reasoning": "Seeds agree.",
                                                     "experiment": f"#{number}", "expectedVersion": 1})
    assert patched.status_code == 200 and patched.get_json()["belief"]["version"] == 2
    unchanged = scripted.patch("/api/beliefs/B1", json={"status": "supported"})
    assert unchanged.get_json()["changed"] is False
    read = scripted.get("/api/beliefs/1").get_json()
    assert [v["version"] for v in read["versions"]] == [2, 1]
    assert read["versions"][0]["experimentNumber"] == number and read["versions"][0]["reasoning"] == "Seeds agree."
    assert [b["cite"] for b in scripted.get("/api/beliefs?status=supported").get_json()["beliefs"]] == ["B1"]
    assert scripted.get("/api/beliefs?status=draft").get_json()["beliefs"] == []


@pytest.mark.parametrize("method, path, body, status, field", [
    ("post", "/api/beliefs", {}, 400, "title"),
    ("post", "/api/beliefs", {"title": "x", "status": "sure"}, 400, "status"),
    ("post", "/api/beliefs", {"title": "x", "confidence": 3}, 400, "confidence"),
    ("post", "/api/beliefs", {"title": "x", "project": "nope"}, 400, "project"),
    ("post", "/api/beliefs", {"title": "x", "colour": "red"}, 400, "colour"),
    ("post", "/api/beliefs", {"title": "x", "evidence": 12}, 400, "evidence"),
    ("patch", "/api/beliefs/B1", {"expectedVersion": "one"}, 400, "expected_version"),
    ("patch", "/api/beliefs/B1", {"title": "x", "expectedVersion": 7}, 409, None),
    ("patch", "/api/beliefs/B9", {"title": "x"}, 404, None),
])
def test_bad_belief_input_is_refused(app, api_client, method, path, body, status, field):
    """Is each bad create or patch a clear 4xx naming the field, with nothing changed?"""
    scripted = api_client("read,write")
    assert scripted.post("/api/beliefs", json={"title": "Existing"}).status_code == 201
    response = getattr(scripted, method)(path, json=body)
    assert response.status_code == status, response.get_json()
    if field:
        assert response.get_json()["field"] == field
    assert scripted.get("/api/beliefs/B1").get_json()["belief"]["version"] == 1


def test_a_read_token_cannot_write(api_client):
    """Does a read-only token get 403 on create?"""
    assert api_client("read").post("/api/beliefs", json={"title": "x"}).status_code == 403


def test_the_owner_accepts_and_rejects_through_the_api(app, owner_json, api_client):
    """Does the owner's session accept (with edits) and reject; is a token refused 403 on both?"""
    api_client("read,write").post("/api/beliefs", json={"title": "Existing"})
    first = _propose(app)
    token = api_client("read,write")
    assert token.post(f"/api/beliefs/B1/proposals/{first}/accept", json={}).status_code == 403
    listed = owner_json.get("/api/beliefs/B1/proposals").get_json()["proposals"]
    assert [(p["id"], p["status"], p["stale"]) for p in listed] == [(first, "pending", False)]
    accepted = owner_json.post(f"/api/beliefs/B1/proposals/{first}/accept", json={"confidence": "MODERATE"})
    assert accepted.status_code == 200
    body = accepted.get_json()
    assert (body["belief"]["version"], body["belief"]["status"], body["belief"]["confidence"]) == \
        (2, "supported", "MODERATE")
    assert "editing and accepting Claude's proposal" in body["version"]["authorLabel"]
    second = _propose(app)
    rejected = owner_json.post(f"/api/beliefs/B1/proposals/{second}/reject", json={"note": "Not yet."})
    assert rejected.status_code == 200 and rejected.get_json()["proposal"]["resolutionNote"] == "Not yet."
    again = owner_json.post(f"/api/beliefs/B1/proposals/{second}/accept")
    assert again.status_code == 409 and again.get_json()["error"] == "proposal_resolved"
    assert owner_json.post(f"/api/beliefs/B1/proposals/{second}/reject", json={"note": 5}).status_code == 409
    third = _propose(app)
    bad = owner_json.post(f"/api/beliefs/B1/proposals/{third}/reject", json={"reason": "x"})
    assert bad.status_code == 400 and bad.get_json()["field"] == "reason"


def test_a_stale_proposal_needs_the_current_version(app, owner_json, api_client):
    """Is accepting a proposal made against an older version 409 until expectedVersion names the current one?"""
    api_client("read,write").post("/api/beliefs", json={"title": "Existing"})
    proposal = _propose(app)
    with app.app_context():
        beliefs.edit_belief(beliefs.get_belief("B1"), {"next_test": "Scale up."}, OWNER)
        db.session.commit()
    refused = owner_json.post(f"/api/beliefs/B1/proposals/{proposal}/accept", json={})
    assert refused.status_code == 409 and refused.get_json()["error"] == "belief_changed"
    assert "review the new text" in refused.get_json()["message"]
    old = owner_json.post(f"/api/beliefs/B1/proposals/{proposal}/accept", json={"expectedVersion": 1})
    assert old.status_code == 409
    reviewed = owner_json.post(f"/api/beliefs/B1/proposals/{proposal}/accept", json={"expectedVersion": 2})
    assert reviewed.status_code == 200 and reviewed.get_json()["belief"]["version"] == 3


def test_links_create_list_and_delete(app, api_client, make_experiment):
    """Does a write token link #N tests B1, list it both ways, refuse a duplicate, and delete it?"""
    scripted = api_client("read,write")
    number = make_experiment("Evidence")
    scripted.post("/api/beliefs", json={"title": "Existing"})
    created = scripted.post("/api/links", json={"source": f"#{number}", "kind": "tests", "target": "B1",
                                               "note": "main test"})
    assert created.status_code == 201
    link = created.get_json()["link"]
    assert (link["sourceKind"], link["targetKind"], link["kind"], link["actorKind"]) == \
        ("experiment", "belief", "tests", "token")
    assert scripted.post("/api/links", json={"source": f"#{number}", "kind": "tests", "target": "B1"}) \
        .get_json()["error"] == "duplicate_link"
    with app.app_context():
        experiment_id = str(experiments.get_experiment(number).id)
        belief_id = str(beliefs.get_belief("B1").id)
    out = scripted.get(f"/api/links?kind=experiment&id={experiment_id}").get_json()
    assert [row["otherLabel"] for row in out["outgoing"]] == ["B1 Existing"] and out["incoming"] == []
    back = scripted.get(f"/api/links?kind=belief&id={belief_id}").get_json()
    assert [row["id"] for row in back["incoming"]] == [link["id"]]
    assert scripted.get("/api/beliefs/B1").get_json()["links"]["incoming"][0]["id"] == link["id"]
    assert scripted.delete(f"/api/links/{link['id']}").status_code == 200
    assert scripted.delete(f"/api/links/{link['id']}").status_code == 404
    by_ids = scripted.post("/api/links", json={"sourceKind": "belief", "sourceId": belief_id, "kind": "derives_from",
                                               "targetKind": "experiment", "targetId": experiment_id})
    assert by_ids.status_code == 201


@pytest.mark.parametrize("body, status, message", [
    ({"source": "#1", "kind": "tests", "target": "B9"}, 404, "No belief B9"),
    ({"source": "#1", "kind": "tests", "target": "#1"}, 400, "itself"),
    ({"source": "#1", "kind": "likes", "target": "B1"}, 400, "Unknown link kind"),
    ({"source": "#1", "kind": "tests"}, 400, "Name the record"),
    ({"source": "#1", "kind": "tests", "target": "B1", "note": "x" * 2001}, 400, "too long"),
    ({"source": "#1", "kind": "tests", "target": "B1", "weight": 3}, 400, "Unknown field"),
    ({"sourceKind": "weekly_review", "sourceId": "00000000-0000-4000-8000-000000000001", "kind": "tests",
      "target": "B1"}, 404, "No weekly review"),
    ({"sourceKind": "todo", "sourceId": "00000000-0000-4000-8000-000000000001", "kind": "tests", "target": "B1"},
     404, "No todo"),
    ({"sourceKind": "belief", "kind": "tests", "target": "B1"}, 400, "together"),
])
def test_bad_links_are_refused(app, api_client, make_experiment, body, status, message):
    """Is each bad link a clear 4xx, with nothing written?"""
    scripted = api_client("read,write")
    make_experiment("Evidence")
    scripted.post("/api/beliefs", json={"title": "Existing"})
    response = scripted.post("/api/links", json=body)
    assert response.status_code == status and message in response.get_json()["message"], response.get_json()
    assert scripted.get("/api/beliefs/B1").get_json()["links"] == {"outgoing": [], "incoming": []}
    assert scripted.get("/api/links?kind=potato&id=x").status_code == 400


@pytest.fixture
def sqlite_app(tmp_path):
    """Sagan on a fresh, migrated SQLite file with an owner and a write token (as test_hardening_sqlite)."""
    app = _scratch_app(f"sqlite:///{tmp_path / 'sagan.db'}")
    with app.app_context():
        flask_migrate.upgrade(directory=MIGRATIONS)
        create_owner(OWNER_EMAIL, OWNER_PASSWORD)
        _, app.write_secret = create_token("lite writer", "read,write")
        db.session.commit()
    yield app
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


def test_beliefs_and_links_work_on_the_embedded_sqlite_database(sqlite_app):
    """On SQLite (make run's default), do numbers, versions, a proposal's accept and a link all work?"""
    lite = sqlite_app
    writer = _writer(lite)
    assert writer.post("/api/beliefs", json={"title": "First"}).get_json()["belief"]["cite"] == "B1"
    assert writer.post("/api/beliefs", json={"title": "Second"}).get_json()["belief"]["cite"] == "B2"
    assert writer.patch("/api/beliefs/B1", json={"status": "active"}).get_json()["belief"]["version"] == 2
    with lite.app_context():
        proposal = beliefs.propose_update(beliefs.get_belief("B1"), None, None, status="supported",
                                          confidence="LOW", text="t", reasoning="r")
        db.session.commit()
        proposal_id = str(proposal.id)
    session = lite.test_client()
    _login(session)
    session.environ_base["HTTP_X_CSRFTOKEN"] = csrf_from(session.get("/api-tokens").text)
    accepted = session.post(f"/api/beliefs/B1/proposals/{proposal_id}/accept", json={})
    assert accepted.status_code == 200 and accepted.get_json()["belief"]["version"] == 3
    assert writer.post("/api/links", json={"source": "B2", "kind": "derives_from", "target": "B1"}).status_code == 201
    assert "B2 Second" in session.get("/beliefs/1").text


BELIEF_FIELDS = ["title", "currentBelief", "evidence", "counterevidence", "nextTest", "status", "confidence",
                 "project", "reasoning", "experiment", "expectedVersion", "surprise"]
LINK_FIELDS = ["source", "target", "kind", "note", "sourceKind", "sourceId", "targetKind", "targetId"]


@pytest.mark.slow
def test_fuzzed_belief_and_link_bodies_never_500_and_refusals_change_nothing(app, api_client, owner_json,
                                                                             make_experiment):
    """Create, patch, accept, reject and link with arbitrary bodies: a success or a clear JSON 4xx
    that changed nothing, never a 500."""
    scripted = api_client("read,write")
    make_experiment("Evidence")
    scripted.post("/api/beliefs", json={"title": "Existing"})

    @FUZZ
    @given(body=bodies(BELIEF_FIELDS), method=st.sampled_from(["post", "patch"]))
    def beliefs_api(body, method):
        before = _counts(app)
        path = "/api/beliefs" if method == "post" else "/api/beliefs/B1"
        response = getattr(scripted, method)(path, data=body, content_type="application/json")
        _check(app, response, before)

    @FUZZ
    @given(body=bodies(LINK_FIELDS))
    def links_api(body):
        before = _counts(app)
        _check(app, scripted.post("/api/links", data=body, content_type="application/json"), before)

    @FUZZ
    @given(body=bodies(["currentBelief", "status", "confidence", "evidence", "reasoning", "expectedVersion",
                        "note"]), action=st.sampled_from(["accept", "reject"]))
    def proposals_api(body, action):
        proposal = _propose(app)
        before = _counts(app)
        response = owner_json.post(f"/api/beliefs/B1/proposals/{proposal}/{action}", data=body,
                                   content_type="application/json")
        _check(app, response, before)

    beliefs_api()
    links_api()
    proposals_api()
