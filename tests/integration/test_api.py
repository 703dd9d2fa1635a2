"""The JSON API of the workflow engine: experiments, workflow events, markers, registries."""
from __future__ import annotations

import json

import sqlalchemy as sa

from models import Experiment, WorkflowEvent, db
from services.core import registry
from services.workflow import experiments


def _count_events(app, number, **where):
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        query = sa.select(sa.func.count()).select_from(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id)
        for key, value in where.items():
            query = query.where(getattr(WorkflowEvent, key) == value)
        return db.session.scalar(query)


def _status(app, number):
    with app.app_context():
        return db.session.scalar(sa.select(Experiment.status).where(Experiment.number == number))


def test_registries_are_served(api_client):
    """Do /api/statuses and /api/markers serve the one registry?"""
    client = api_client("read")
    statuses = client.get("/api/statuses").get_json()["statuses"]
    assert [s["name"] for s in statuses] == registry.STATUS_NAMES
    markers = client.get("/api/markers").get_json()
    assert markers["markers"] == registry.MARKERS
    assert "needs_targeted_fix" in markers["verdicts"]


def test_create_and_view_by_number_and_uuid(api_client):
    """Can a script create an experiment and read it back by number, uuid and by-number path?"""
    client = api_client("read,write")
    response = client.post("/api/experiments", json={"title": "Seed variance", "tags": ["probes"]})
    assert response.status_code == 201
    created = response.get_json()["experiment"]
    assert created["status"] == "proposed" and created["turn"] == "Sagan turn: clarify scope"
    for path in (f"/api/experiments/{created['number']}", f"/api/experiments/{created['id']}",
                 f"/api/experiments/by-number/{created['number']}"):
        body = client.get(path).get_json()
        assert body["experiment"]["title"] == "Seed variance"
        assert body["events"][0]["note"] == "Experiment created."
        assert body["approvalRequests"] == []


def test_create_refuses_bad_input_and_changes_nothing(app, api_client):
    """Do bad bodies get 400 with a message and create nothing?"""
    client = api_client("read,write")
    cases = [
        (dict(data="{not json", content_type="application/json"), "invalid_json"),
        (dict(json=["a list"]), "invalid_json"),
        (dict(json={}), "invalid_input"),
        (dict(json={"title": "x" * 301}), "invalid_input"),
        (dict(json={"title": "ok", "status": "running"}), "invalid_input"),
        (dict(json={"title": "ok", "kind": "rocket"}), "invalid_input"),
    ]
    for kwargs, code in cases:
        response = client.post("/api/experiments", **kwargs)
        assert response.status_code == 400, kwargs
        assert response.get_json()["error"] == code
        assert response.get_json()["message"]
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Experiment.id))) == 0


def test_scopes_and_credentials(api_client, client, make_experiment):
    """Does each route demand its scope, and refuse no/unknown tokens with 401?"""
    number = make_experiment()
    reader = api_client("read")
    assert reader.post("/api/experiments", json={"title": "x"}).status_code == 403
    assert reader.patch(f"/api/experiments/{number}", json={"title": "y"}).get_json()["error"] == "missing_scope"
    assert client.get("/api/experiments").status_code == 401
    client.environ_base["HTTP_AUTHORIZATION"] = "Bearer sk_nope"
    assert client.get("/api/experiments").get_json()["error"] == "invalid_token"


def test_list_filters_and_limits(api_client, make_experiment):
    """Does the list honour status and limit, refusing bad values with 400?"""
    for i in range(3):
        make_experiment(f"E{i}")
    make_experiment("Clarifying one", status="clarifying")
    client = api_client("read")
    assert len(client.get("/api/experiments?limit=2").get_json()["experiments"]) == 2
    only = client.get("/api/experiments?status=clarifying").get_json()["experiments"]
    assert [e["title"] for e in only] == ["Clarifying one"]
    for bad in ("limit=0", "limit=201", "limit=abc", "status=nope"):
        assert client.get(f"/api/experiments?{bad}").status_code == 400


def test_patch_status_goes_through_transition(app, api_client, make_experiment):
    """Does PATCH status move the experiment with the token as actor (acting as agent)?"""
    number = make_experiment(status="code_reviewing")
    client = api_client("read,write")
    response = client.patch(f"/api/experiments/{number}", json={"status": "implementing", "note": "Round 2 fixes"})
    assert response.status_code == 200
    body = response.get_json()
    assert body == {"experiment": {"id": body["experiment"]["id"], "number": number,
                                   "title": "A test experiment", "status": "implementing",
                                   "turn": "Sagan turn: run and verify"}, "ok": True}
    events = client.get(f"/api/experiments/{number}/events?event_type=state_changed&limit=1").get_json()["events"]
    assert events[0]["actorKind"] == "token" and events[0]["note"] == "Round 2 fixes"


def test_patch_refused_move_lists_allowed_and_changes_nothing(app, api_client, make_experiment):
    """Is a move outside the table a 409 listing the allowed moves, with nothing changed?"""
    number = make_experiment()
    client = api_client("read,write")
    before = _count_events(app, number)
    response = client.patch(f"/api/experiments/{number}", json={"status": "shared"})
    assert response.status_code == 409
    body = response.get_json()
    assert body["error"] == "transition_not_allowed"
    assert "Allowed from proposed: clarifying, planning, blocked" in body["message"]
    assert _status(app, number) == "proposed" and _count_events(app, number) == before


def test_patch_stale_expected_status_is_409(app, api_client, make_experiment):
    """Does a writer that saw an old status get a stale_status conflict?"""
    number = make_experiment(status="code_reviewing")
    client = api_client("read,write")
    response = client.patch(f"/api/experiments/{number}",
                            json={"status": "testing", "expected_status": "implementing"})
    assert response.status_code == 409 and response.get_json()["error"] == "stale_status"
    assert _status(app, number) == "code_reviewing"


def test_owner_only_fields_are_403_for_tokens(app, api_client, make_experiment):
    """Can no token turn on auto-approve, raise caps or change the spec?"""
    number = make_experiment()
    client = api_client("read,write,dispatch,promote")
    for field, value in (("auto_approve_plan", True), ("cost_cap_usd", 999), ("pod_spec", {"gpuType": "H100"})):
        response = client.patch(f"/api/experiments/{number}", json={field: value})
        assert response.status_code == 403, field
        assert response.get_json()["error"] == "owner_session_required"
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        assert experiment.auto_approve_plan is False and experiment.cost_cap_usd is None


def test_owner_session_can_patch_owner_fields_with_csrf(owner, client, make_experiment):
    """Does the owner's session patch auto_approve_plan, and need the CSRF header?"""
    number = make_experiment()
    assert client.patch(f"/api/experiments/{number}", json={"auto_approve_plan": True}).status_code == 400
    response = client.patch(f"/api/experiments/{number}", json={"auto_approve_plan": True},
                            headers={"X-CSRFToken": owner.csrf()})
    assert response.status_code == 200
    with client.application.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.auto_approve_plan is True
        assert db.session.scalar(sa.select(WorkflowEvent.note).where(
            WorkflowEvent.entity_id == experiment.id).order_by(WorkflowEvent.created_at.desc()).limit(1)) \
            == "Auto-approve of plans turned on."


def test_a_bad_patch_changes_nothing_it_was_given(owner, client, make_experiment):
    """A patch with a good title and a bad auto_approve_plan is a 400 and the title stays."""
    number = make_experiment("Before")
    response = client.patch(f"/api/experiments/{number}", json={"title": "After", "auto_approve_plan": "yes"},
                            headers={"X-CSRFToken": owner.csrf()})
    assert response.status_code == 400 and response.get_json()["field"] == "auto_approve_plan"
    with client.application.app_context():
        assert experiments.get_experiment(number).title == "Before"


def test_marker_known_unknown_and_review_metadata(app, api_client, make_experiment):
    """Markers: known → 201 {id, ok}; unknown → 422 with the known list; bad review fields → 400."""
    number = make_experiment(status="code_reviewing")
    client = api_client("read,write")
    ok = client.post(f"/api/experiments/{number}/workflow-events", json={
        "marker": "epm:code-review", "review_pair": "code_review", "round": 1,
        "reviewer": "code-reviewer", "verdict": "needs_targeted_fix", "required_fix": "pool p-values"})
    assert ok.status_code == 201 and ok.get_json()["ok"] is True
    unknown = client.post(f"/api/experiments/{number}/workflow-events", json={"marker": "epm:x"})
    assert unknown.status_code == 422
    assert unknown.get_json()["error"] == "unknown_marker_type"
    assert unknown.get_json()["message"] == 'Marker "epm:x" is not a known marker.'
    assert unknown.get_json()["known"] == registry.MARKERS
    for bad in ({"round": 4}, {"round": "one"}, {"verdict": "meh"}, {"review_pair": "vibes"},
                {"verdict": "pass"}):  # a verdict without a review_pair
        payload = {"marker": "epm:code-review", "review_pair": "code_review", **bad}
        if bad == {"verdict": "pass"}:
            payload.pop("review_pair")
        response = client.post(f"/api/experiments/{number}/workflow-events", json=payload)
        assert response.status_code == 400, bad
    assert _count_events(app, number, event_type="marker") == 1


def test_marker_next_status_applies_in_same_transaction(app, api_client, make_experiment):
    """Does next_status move the experiment with the marker — and a refused move keep neither?"""
    number = make_experiment(status="code_reviewing")
    client = api_client("read,write")
    response = client.post(f"/api/experiments/{number}/workflow-events", json={
        "marker": "epm:code-review", "review_pair": "code_review", "round": 2,
        "reviewer": "code-reviewer", "verdict": "pass", "next_status": "testing"})
    assert response.status_code == 201
    assert _status(app, number) == "testing"
    markers_before = _count_events(app, number, event_type="marker")
    refused = client.post(f"/api/experiments/{number}/workflow-events", json={
        "marker": "epm:test-verdict", "next_status": "shared"})
    assert refused.status_code == 409
    assert _status(app, number) == "testing"
    assert _count_events(app, number, event_type="marker") == markers_before


def test_actor_comes_from_credential_not_body(app, api_client, make_experiment):
    """Can a token claim to be the owner? (No: actor_kind is a stored label only.)"""
    number = make_experiment(status="implementing")
    client = api_client("read,write")
    client.post(f"/api/experiments/{number}/workflow-events", json={
        "marker": "epm:experiment-implementation", "actor_kind": "owner", "actorKind": "owner"})
    event = client.get(f"/api/experiments/{number}/events?marker=epm:experiment-implementation").get_json()["events"][0]
    assert event["actorKind"] == "token"
    assert event["metadata"]["claimed_actor"] == "owner"


def test_status_change_via_workflow_events_and_no_direct_state_rows(app, api_client, make_experiment):
    """Is a posted state change a real transition (checked), never a raw state_changed row?"""
    number = make_experiment(status="code_reviewing")
    client = api_client("read,write")
    response = client.post(f"/api/experiments/{number}/workflow-events",
                           json={"event_type": "state_changed", "to_status": "testing", "note": "tests next"})
    assert response.status_code == 200 and _status(app, number) == "testing"
    refused = client.post(f"/api/experiments/{number}/workflow-events",
                          json={"event_type": "state_changed", "to_status": "shared"})
    assert refused.status_code == 409
    bad = client.post(f"/api/experiments/{number}/workflow-events", json={"event_type": "comment"})
    assert bad.status_code == 400


def test_events_are_filterable_and_cursor_paged(app, api_client, make_experiment):
    """Can agents find their own markers past the first page (the old system capped at 50)?"""
    number = make_experiment(status="implementing")
    client = api_client("read,write")
    for i in range(60):
        client.post(f"/api/experiments/{number}/workflow-events",
                    json={"marker": "epm:progress", "note": f"step {i}"})
    client.post(f"/api/experiments/{number}/workflow-events", json={"marker": "epm:results", "note": "the one"})
    found = client.get(f"/api/experiments/{number}/events?marker=epm:results").get_json()["events"]
    assert [e["note"] for e in found] == ["the one"]
    seen, cursor = [], None
    while True:
        page = client.get(f"/api/experiments/{number}/events", query_string={
            "marker": "epm:progress", "limit": 25, **({"before": cursor} if cursor else {})}).get_json()
        seen += [e["note"] for e in page["events"]]
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert len(seen) == 60 and len(set(seen)) == 60 and seen[0] == "step 59"
    assert client.get(f"/api/experiments/{number}/events?since=2000-01-01T00:00:00Z&limit=1").status_code == 200
    assert client.get(f"/api/experiments/{number}/events?since=yesterday").status_code == 400
    assert client.get(f"/api/experiments/{number}/events?marker=epm:nope").status_code == 422
    assert client.get(f"/api/experiments/{number}/events?before=garbage").status_code == 400


def test_notes_and_metadata_are_redacted_before_storing(app, api_client, make_experiment):
    """Do secrets in a marker's note and metadata never reach the database?"""
    number = make_experiment(status="implementing")
    client = api_client("read,write")
    secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"
    client.post(f"/api/experiments/{number}/workflow-events", json={
        "marker": "epm:preflight", "note": f"env dump: ANTHROPIC_API_KEY={secret}",
        "metadata": {"headers": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz123"}})
    with app.app_context():
        rows = db.session.execute(sa.text("SELECT note, metadata::text FROM workflow_events")).all()
    dump = json.dumps([list(r) for r in rows])
    assert secret not in dump and "abcdefghijklmnopqrstuvwxyz123" not in dump
    assert "[REDACTED]" in dump


def test_unknown_experiment_is_404_json(api_client):
    """Is a missing experiment a 404 with the JSON error shape?"""
    response = api_client("read").get("/api/experiments/99999")
    assert response.status_code == 404
    assert set(response.get_json()) == {"error", "message"}
