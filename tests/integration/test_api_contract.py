"""The API's field-name contract: it answers in camelCase and takes back what it answered.

Every field a resource emits is spelled one way out (`podAccount`) and accepted either
way in (`podAccount` or `pod_account`), through the one mapping in
`blueprints/api/_common.py`; review fields inside a marker's `metadata` are validated like
top-level ones.
"""
from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from blueprints.api._common import api_name, snake_name
from models import Artifact, Experiment, Pod, WorkflowEvent, db
from services.workflow import experiments, markers
from tests.integration.test_run_pages import add_events, make_run

PLAN = (Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "two_pod_seed_sweep.md").read_text()

# Emitted fields of an experiment that a PATCH does not take, and why: identity, derived
# state, or fields with their own path (plans, status moves, the clean result).
EXPERIMENT_READ_ONLY = {"id", "number", "turn", "hasCleanResult", "parentExperimentId", "statusBeforeBlock",
                        "planMd", "planJson", "podSpec", "body", "createdAt", "updatedAt"}
# Old names still emitted beside their replacement; a client sends the new name only.
EXPERIMENT_DEPRECATED = {"runpodAccount"}


def _count(app, model) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model))


def _add_pod_and_artifact(app, number: int) -> None:
    with app.app_context():
        experiment = experiments.get_experiment(number)
        pod = Pod(id=uuid.uuid4(), experiment_id=experiment.id, account="local", name=f"sagan-{number}-a-0-1",
                  status="running", gpu_type_id="A100", gpu_count=1, cost_per_hr=1.5, uptime_seconds=60)
        db.session.add(pod)
        db.session.flush()
        content = b"loss 0.1\n"
        db.session.add(Artifact(pod_id=pod.id, experiment_id=experiment.id, name="results/loss.txt",
                                content_type="text/plain", size=len(content),
                                sha256=hashlib.sha256(content).hexdigest(), content=content))
        db.session.commit()


def _emitted_records(app, client, make_experiment) -> dict[str, list[dict]]:
    """One answered record of every resource the API emits, read through the API itself."""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    plan = client.post(f"/api/experiments/{number}/plans", json={"markdown": PLAN}).get_json()
    client.post(f"/api/experiments/{number}/workflow-events", json={"marker": "epm:progress", "note": "half way"})
    run_id = make_run(app, number, status="running")
    add_events(app, run_id, ("assistant_text", "Thinking", {"turn": 1}))
    _add_pod_and_artifact(app, number)
    shown = client.get(f"/api/experiments/{number}").get_json()
    return {
        "experiment": [shown["experiment"]],
        "workflow event": shown["events"],
        "approval request": shown["approvalRequests"] + [plan["approvalRequest"]],
        "plan version": [plan["planVersion"]],
        "run": client.get("/api/runs").get_json()["runs"],
        "run event": client.get(f"/api/runs/{run_id}").get_json()["events"],
        "pod": client.get(f"/api/experiments/{number}/pods").get_json()["pods"],
        "artifact": client.get(f"/api/experiments/{number}/artifacts").get_json()["artifacts"],
    }


def test_every_emitted_field_maps_to_one_input_name_and_back(app, api_client, make_experiment):
    """Is every field of every resource spelled so the one mapping takes it to its snake_case
    input name and back to exactly what was emitted?"""
    client = api_client("read,write")
    records = _emitted_records(app, client, make_experiment)
    for resource, rows in records.items():
        assert rows, resource
        for row in rows:
            for field in row:
                assert api_name(snake_name(field)) == field, (resource, field)
                assert snake_name(field) == snake_name(field).lower(), (resource, field)


def test_an_experiment_read_back_in_camel_case_patches_to_the_same_record(owner, client, make_experiment):
    """Does PATCH take every writable field exactly as GET spelled it, and leave the record as read?"""
    created = client.post("/api/experiments", headers={"X-CSRFToken": owner.csrf()}, json={
        "title": "Round trip", "podAccount": "team", "computeSize": "small", "assigneeKind": "human",
        "costCapUsd": 12.5, "gitBranch": "exp/round-trip", "gitCommit": "abc1234", "tags": ["contract"],
        "priority": "high", "kind": "infra", "hypothesis": "Both spellings mean one field."})
    assert created.status_code == 201, created.get_json()
    read = created.get_json()["experiment"]
    assert (read["podAccount"], read["computeSize"], read["assigneeKind"], read["costCapUsd"],
            read["gitBranch"], read["gitCommit"]) == ("team", "small", "human", 12.5, "exp/round-trip", "abc1234")

    writable = {k: v for k, v in read.items()
                if k not in EXPERIMENT_READ_ONLY | EXPERIMENT_DEPRECATED and k != "status"}
    assert set(map(snake_name, writable)) <= experiments.PATCHABLE
    changed = {**writable, "title": "Round trip, edited", "podAccount": "personal", "autoApprovePlan": True}
    response = client.patch(f"/api/experiments/{read['number']}", headers={"X-CSRFToken": owner.csrf()},
                            json=changed)
    assert response.status_code == 200, response.get_json()
    again = client.get(f"/api/experiments/{read['number']}").get_json()["experiment"]
    assert {k: again[k] for k in changed} == changed

    # A status read back is a move through transition(), with the status the client saw.
    moved = client.patch(f"/api/experiments/{read['number']}", headers={"X-CSRFToken": owner.csrf()},
                         json={"status": "clarifying", "expectedStatus": again["status"]})
    assert moved.status_code == 200 and moved.get_json()["experiment"]["status"] == "clarifying"


@pytest.mark.parametrize("field", sorted(EXPERIMENT_READ_ONLY - {"podSpec"}))
def test_a_read_only_field_sent_back_is_refused_by_the_name_sent(api_client, make_experiment, field):
    """Is a read-only field sent back a 400 naming it as the client spelled it, with nothing changed?"""
    number = make_experiment("Read only")
    client = api_client("read,write")
    read = client.get(f"/api/experiments/{number}").get_json()["experiment"]
    response = client.patch(f"/api/experiments/{number}", json={"title": "Changed", field: read[field]})
    assert response.status_code == 400
    body = response.get_json()
    assert body["error"] == "invalid_input" and body["field"] == field
    assert body["message"] == f"Unknown or read-only field(s): {field}."
    assert client.get(f"/api/experiments/{number}").get_json()["experiment"]["title"] == "Read only"


def test_the_pod_spec_read_back_is_refused_with_its_own_reason(owner, client, make_experiment):
    """Is `podSpec` sent back by the owner told that the spec comes from an approved plan?"""
    number = make_experiment()
    response = client.patch(f"/api/experiments/{number}", headers={"X-CSRFToken": owner.csrf()},
                            json={"podSpec": {"gpuType": "H100"}})
    assert response.status_code == 400 and response.get_json()["field"] == "pod_spec"
    assert "approved plan" in response.get_json()["message"]


def test_create_takes_the_camel_case_it_answers_with(app, api_client):
    """Does `POST /api/experiments {"podAccount": "team"}` create (it used to be "Unknown field(s)")?"""
    client = api_client("read,write")
    response = client.post("/api/experiments", json={"title": "Camel", "podAccount": "team"})
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["experiment"]["podAccount"] == "team"
    snake = client.post("/api/experiments", json={"title": "Snake", "pod_account": "team"})
    assert snake.status_code == 201 and snake.get_json()["experiment"]["podAccount"] == "team"


def test_an_owner_only_field_in_camel_case_is_still_owner_only(app, api_client, make_experiment):
    """Can a token slip an owner-only field past the check by spelling it camelCase? (No: 403.)"""
    number = make_experiment()
    client = api_client("read,write,dispatch,promote")
    for field, value in (("autoApprovePlan", True), ("costCapUsd", 999), ("podSpec", {"gpuType": "H100"})):
        response = client.patch(f"/api/experiments/{number}", json={field: value})
        assert response.status_code == 403, field
        assert response.get_json()["error"] == "owner_session_required"
    created = client.post("/api/experiments", json={"title": "Capped", "costCapUsd": 999})
    assert created.status_code == 403 and created.get_json()["error"] == "owner_session_required"
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.auto_approve_plan is False and experiment.cost_cap_usd is None


def test_an_unknown_camel_case_field_is_named_as_sent(app, api_client):
    """Is a typo such as `runpodAcount` refused by the name the client sent, creating nothing?"""
    client = api_client("read,write")
    response = client.post("/api/experiments", json={"title": "Typo", "runpodAcount": "team"})
    assert response.status_code == 400
    assert response.get_json()["message"] == "Unknown field(s): runpodAcount."
    assert _count(app, Experiment) == 0


def test_one_field_in_both_spellings_must_agree(app, api_client, make_experiment):
    """Are both spellings of one field with different values a clear 400 that changes nothing,
    while the same value twice is accepted?"""
    client = api_client("read,write")
    response = client.post("/api/experiments", json={"title": "Twice", "podAccount": "team",
                                                     "pod_account": "personal"})
    assert response.status_code == 400
    body = response.get_json()
    assert body["error"] == "conflicting_fields" and body["field"] == "pod_account"
    assert body["message"] == ("podAccount and pod_account are two spellings of one field with "
                               "different values; send it once.")
    assert _count(app, Experiment) == 0
    # 1 and true are equal in Python, not in JSON.
    typed = client.post("/api/experiments", json={"title": "Typed", "gitBranch": "1", "git_branch": 1})
    assert typed.status_code == 400 and typed.get_json()["error"] == "conflicting_fields"
    same = client.post("/api/experiments", json={"title": "Twice", "podAccount": "team", "pod_account": "team"})
    assert same.status_code == 201 and same.get_json()["experiment"]["podAccount"] == "team"

    number = make_experiment(status="code_reviewing")
    before = _count(app, WorkflowEvent)
    for payload in ({"eventType": "marker", "event_type": "state_changed", "marker": "epm:progress"},
                    {"marker": "epm:code-review", "reviewPair": "code_review", "review_pair": "analysis"},
                    {"marker": "epm:progress", "actor_kind": "owner", "actorKind": "agent"}):
        refused = client.post(f"/api/experiments/{number}/workflow-events", json=payload)
        assert refused.status_code == 400, payload
        assert refused.get_json()["error"] == "conflicting_fields"
    assert _count(app, WorkflowEvent) == before
    promoter = api_client("read,write,promote", name="promoter")
    promote = promoter.post(f"/api/experiments/{number}/promote", json={"confirmLint": True, "confirm_lint": False})
    assert promote.status_code == 400 and promote.get_json()["error"] == "conflicting_fields"


def test_the_old_account_name_is_taken_with_a_deprecation_notice(app, api_client, make_experiment):
    """Is `runpodAccount` (or `runpod_account`) still taken on create and patch, answered with
    `Deprecation: true` and a warning naming `podAccount`, while the new name gets neither —
    and is the old name still in the answer, equal to the new one?"""
    client = api_client("read,write")
    created = client.post("/api/experiments", json={"title": "Old client", "runpodAccount": "personal"})
    assert created.status_code == 201, created.get_json()
    body = created.get_json()
    assert created.headers["Deprecation"] == "true"
    assert body["warnings"] == ["runpodAccount is deprecated; use podAccount"]
    assert body["experiment"]["podAccount"] == "personal" == body["experiment"]["runpodAccount"]
    number = body["experiment"]["number"]

    patched = client.patch(f"/api/experiments/{number}", json={"runpod_account": "team"})
    assert patched.status_code == 200 and patched.headers["Deprecation"] == "true"
    assert patched.get_json()["warnings"] == ["runpod_account is deprecated; use podAccount"]
    read = client.get(f"/api/experiments/{number}")
    assert "Deprecation" not in read.headers and "warnings" not in read.get_json()
    assert read.get_json()["experiment"]["podAccount"] == "team"

    modern = client.patch(f"/api/experiments/{number}", json={"podAccount": "local"})
    assert modern.status_code == 200 and "Deprecation" not in modern.headers
    assert "warnings" not in modern.get_json()
    same = client.patch(f"/api/experiments/{number}", json={"podAccount": "team", "runpodAccount": "team"})
    assert same.status_code == 200 and same.headers["Deprecation"] == "true"


def test_the_old_and_new_account_names_must_agree(app, api_client, make_experiment):
    """Are `podAccount` and `runpodAccount` with different values a 422 saying to send
    `podAccount` only, in either order, on create and on patch, changing nothing?"""
    client = api_client("read,write")
    for body in ({"title": "Both", "podAccount": "team", "runpodAccount": "personal"},
                 {"title": "Both", "runpod_account": "personal", "pod_account": "team"}):
        refused = client.post("/api/experiments", json=body)
        assert refused.status_code == 422, refused.get_json()
        answer = refused.get_json()
        assert answer["error"] == "conflicting_fields" and answer["field"] == "pod_account"
        assert "send podAccount only" in answer["message"] and "deprecated" in answer["message"]
        assert refused.headers["Deprecation"] == "true"
    assert _count(app, Experiment) == 0
    number = make_experiment("Kept account", pod_account="local")
    refused = client.patch(f"/api/experiments/{number}", json={"runpodAccount": "team", "podAccount": "personal"})
    assert refused.status_code == 422
    assert client.get(f"/api/experiments/{number}").get_json()["experiment"]["podAccount"] == "local"
    unknown = client.patch(f"/api/experiments/{number}", json={"runpodAccount": "acme"})
    assert unknown.status_code == 400 and unknown.get_json()["field"] == "pod_account"


def test_a_workflow_event_read_back_posts_the_same_marker(app, api_client, make_experiment):
    """Can a client post back a marker event as it read it (camelCase) and get the same marker?"""
    number = make_experiment(status="code_reviewing")
    client = api_client("read,write")
    first = client.post(f"/api/experiments/{number}/workflow-events", json={
        "eventType": "marker", "marker": "epm:code-review", "reviewPair": "code_review", "round": 1,
        "reviewer": "code-reviewer", "verdict": "needs_targeted_fix", "requiredFix": "pool p-values",
        "actorKind": "agent", "note": "first pass"})
    assert first.status_code == 201, first.get_json()
    read = client.get(f"/api/experiments/{number}/events?marker=epm:code-review").get_json()["events"][0]
    assert read["metadata"]["review"] == {"review_pair": "code_review", "round": 1, "reviewer": "code-reviewer",
                                          "verdict": "needs_targeted_fix", "required_fix": "pool p-values"}
    assert read["metadata"]["claimed_actor"] == "agent" and read["actorKind"] == "token"

    sent_back = {k: read[k] for k in ("eventType", "marker", "note", "metadata", "actorKind")}
    again = client.post(f"/api/experiments/{number}/workflow-events", json=sent_back)
    assert again.status_code == 201, again.get_json()
    newest = client.get(f"/api/experiments/{number}/events?marker=epm:code-review").get_json()["events"][0]
    assert newest["id"] == again.get_json()["id"] != read["id"]
    # actorKind in a body is only a label (the credential is the actor): the label sent back
    # is the kind that was read, and the marker is otherwise the one read.
    assert newest["actorKind"] == "token" and newest["metadata"]["claimed_actor"] == "token"
    expected = {**sent_back, "metadata": {**sent_back["metadata"], "claimed_actor": "token"}}
    assert {k: newest[k] for k in sent_back} == expected


def test_a_status_change_takes_camel_case_to_and_from(app, api_client, make_experiment):
    """Does a state change posted as `eventType`/`toStatus`/`fromStatus` move (and a stale one refuse)?"""
    number = make_experiment(status="code_reviewing")
    client = api_client("read,write")
    stale = client.post(f"/api/experiments/{number}/workflow-events",
                        json={"eventType": "state_changed", "toStatus": "testing", "fromStatus": "implementing"})
    assert stale.status_code == 409 and stale.get_json()["error"] == "stale_status"
    moved = client.post(f"/api/experiments/{number}/workflow-events",
                        json={"eventType": "state_changed", "toStatus": "testing", "fromStatus": "code_reviewing"})
    assert moved.status_code == 200 and moved.get_json() == {"id": None, "ok": True, "status": "testing"}


def _review_table(app, number):
    with app.app_context():
        return [(loop.pair, loop.rounds) for loop in markers.review_loops_for(experiments.get_experiment(number))]


def test_review_fields_inside_metadata_are_stored_as_the_review(app, api_client, make_experiment):
    """Does a review an older client sends inside `metadata` land in the review table, as the
    stored `review` object a client read back does?"""
    number = make_experiment(status="code_reviewing")
    client = api_client("read,write")
    response = client.post(f"/api/experiments/{number}/workflow-events", json={
        "marker": "epm:code-review", "metadata": {"review_pair": "code_review", "round": "2",
                                                  "reviewer": "code-reviewer", "verdict": "pass", "seed": 7}})
    assert response.status_code == 201, response.get_json()
    event = client.get(f"/api/experiments/{number}/events?marker=epm:code-review").get_json()["events"][0]
    assert event["metadata"] == {"seed": 7, "review": {"review_pair": "code_review", "round": 2,
                                                       "reviewer": "code-reviewer", "verdict": "pass"}}
    nested = client.post(f"/api/experiments/{number}/workflow-events", json={
        "marker": "epm:code-review-codex", "metadata": {"review": {
            "review_pair": "code_review", "round": 2, "reviewer": "code-plan-reviewer", "verdict": "pass"}}})
    assert nested.status_code == 201, nested.get_json()
    [(pair, rounds)] = _review_table(app, number)
    assert pair == "code_review"
    assert {reviewer: cell["verdict"] for reviewer, cell in rounds[2].items()} == {
        "code-reviewer": "pass", "code-plan-reviewer": "pass"}


def test_a_test_verdict_metadata_without_a_review_pair_is_its_own_data(app, api_client, make_experiment):
    """Do `round`/`verdict` in metadata without a review_pair (epm:test-verdict's pass/fail) stay as sent?"""
    number = make_experiment(status="testing")
    client = api_client("read,write")
    metadata = {"round": 1, "verdict": "fail", "commit": "abc1234"}
    response = client.post(f"/api/experiments/{number}/workflow-events",
                           json={"marker": "epm:test-verdict", "metadata": metadata})
    assert response.status_code == 201
    event = client.get(f"/api/experiments/{number}/events?marker=epm:test-verdict").get_json()["events"][0]
    assert event["metadata"] == metadata
    assert _review_table(app, number) == []


@pytest.mark.parametrize("payload, field", [
    ({"metadata": {"review_pair": "code_review", "round": 4}}, "round"),
    ({"metadata": {"review_pair": "code_review", "verdict": "meh"}}, "verdict"),
    ({"metadata": {"review_pair": "vibes", "round": 1}}, "review_pair"),
    ({"metadata": {"review_pair": "code_review", "reviewer": "x" * 121}}, "reviewer"),
    ({"metadata": {"review": {"review_pair": "code_review", "round": 4}}}, "round"),
    ({"metadata": {"review": {"round": 1, "verdict": "pass"}}}, "review_pair"),
    ({"metadata": {"review": "code_review, round 1"}}, "metadata.review"),
    ({"metadata": {"review": {"review_pair": "code_review", "score": 9}}}, "metadata.review"),
    ({"review_pair": "code_review", "round": 1, "metadata": {"review_pair": "code_review", "round": 2}}, "round"),
    ({"reviewPair": "code_review", "metadata": {"review": {"review_pair": "analysis"}}}, "review_pair"),
])
def test_a_bad_review_inside_metadata_is_refused(app, api_client, make_experiment, payload, field):
    """Is a bad review inside `metadata` (a round 4, an unknown verdict, two different rounds)
    a 400 naming the field, with no marker stored?"""
    number = make_experiment(status="code_reviewing")
    client = api_client("read,write")
    response = client.post(f"/api/experiments/{number}/workflow-events", json={"marker": "epm:code-review", **payload})
    assert response.status_code == 400, response.get_json()
    body = response.get_json()
    assert body["error"] == "invalid_input" and body["field"] == field and body["message"]
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(WorkflowEvent).where(
            WorkflowEvent.event_type == "marker")) == 0
    assert _review_table(app, number) == []


def test_an_approval_is_resolved_with_camel_case_fields(app, api_client, owner, client, make_experiment):
    """Does the owner's resolve take `confirmUnchecked` as `confirm_unchecked`, and answer the
    `answers` it stored, as sent?"""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    plan = api_client("read,write").post(f"/api/experiments/{number}/plans", json={"markdown": PLAN}).get_json()
    approval_id = plan["approvalRequest"]["id"]
    headers = {"X-CSRFToken": owner.csrf()}
    answers = {"seed-list": "0-9"}
    unconfirmed = client.post(f"/api/approvals/{approval_id}/resolve", headers=headers,
                              json={"decision": "approve", "answers": answers})
    assert unconfirmed.status_code == 400 and unconfirmed.get_json()["error"] == "unchecked_items"
    resolved = client.post(f"/api/approvals/{approval_id}/resolve", headers=headers,
                           json={"decision": "approve", "answers": answers, "confirmUnchecked": True})
    assert resolved.status_code == 200, resolved.get_json()
    body = resolved.get_json()
    assert body["experiment"]["status"] == "approved" and body["approvalRequest"]["answers"] == answers
