"""Pods receive only allowlisted server secrets.

The attack: a `write` token submits a plan whose spec names `SECRET_KEY`, the owner
approves it, the pod writes the key into an artifact, a `read` token downloads it and
the key signs an owner session. Now the owner lists allowed names in Settings (names,
never values; Sagan's own secrets never), a plan asking for anything else is refused at
submission with the field path, and the approval page shows every requested secret.
"""
from __future__ import annotations

import html

import pytest
import sqlalchemy as sa

from models import ApprovalRequest, Setting, WorkflowEvent, db
from services.core.actors import Actor
from services.dispatch import pod_secrets
from services.planning import approvals
from services.workflow import experiments, lifecycle
from tests.conftest import csrf_from
from tests.integration.test_dispatch import OWNER, dispatch, plan_with, pod_spec, runpod  # noqa: F401


def _allow(app, names):
    with app.app_context():
        db.session.merge(Setting(key=pod_secrets.SETTING, value=names))
        db.session.commit()


def _approvals(app):
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count(ApprovalRequest.id)))


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ANTHROPIC_API_KEY",
                                  "RUNPOD_API_KEY_TEAM", "RUNPOD_API_KEY_PERSONAL", "SAGAN_OWNER_PASSWORD",
                                  "TEST_DATABASE_URL"])
def test_a_token_plan_asking_for_a_sagan_secret_is_refused_with_the_field_path(
        app, api_client, make_experiment, name):
    """Is a write token's plan naming one of Sagan's own secrets refused (422) at submission,
    with `[0].secrets[0]` in the problem, and no approval request opened?"""
    number = make_experiment("Steal the key", status="planning")
    writer = api_client("read,write")
    response = writer.post(f"/api/experiments/{number}/plans",
                           json={"markdown": plan_with(pod_spec(secrets=[name]))})
    assert response.status_code == 422
    body = response.get_json()
    assert body["approvalRequest"] is None
    assert any(p.startswith("[0].secrets[0]: " + name) and "Sagan's own secrets" in p for p in body["problems"])
    assert _approvals(app) == 0


def test_a_secret_not_on_the_allowlist_is_refused_and_one_on_it_accepted(app, api_client, make_experiment):
    """Is a name the owner did not allow refused with its path, and an allowed name accepted?"""
    _allow(app, ["HF_TOKEN"])
    number = make_experiment("Needs a hub token", status="planning")
    writer = api_client("read,write")
    refused = writer.post(f"/api/experiments/{number}/plans",
                          json={"markdown": plan_with([pod_spec("a", secrets=["HF_TOKEN"]),
                                                       pod_spec("b", secrets=["HF_TOKEN", "WANDB_API_KEY"])])})
    assert refused.status_code == 422
    assert any(p.startswith("[1].secrets[1]: WANDB_API_KEY is not on the pod-secret allowlist")
               for p in refused.get_json()["problems"])
    accepted = writer.post(f"/api/experiments/{number}/plans",
                           json={"markdown": plan_with(pod_spec(secrets=["HF_TOKEN"]))})
    assert accepted.status_code == 201, accepted.get_json()


def test_the_approval_page_lists_every_requested_secret_in_plain_sight(app, client, owner, make_experiment):
    """Does the approval page name each requested secret outside the collapsed raw JSON?"""
    _allow(app, ["HF_TOKEN", "WANDB_API_KEY"])
    number = make_experiment("Two secrets", status="planning")
    with app.app_context():
        submission = approvals.submit_plan(
            experiments.get_experiment(number),
            plan_with([pod_spec("a", secrets=["HF_TOKEN"]), pod_spec("b", secrets=["WANDB_API_KEY", "HF_TOKEN"])]),
            OWNER, source="owner")
        db.session.commit()
        request_id = submission.approval.id
    page = client.get(f"/approvals/{request_id}").text
    shown = page.split('id="secrets"', 1)[1].split("</section>", 1)[0]
    assert "<code>HF_TOKEN</code>" in shown and "<code>WANDB_API_KEY</code>" in shown
    assert "<details" not in shown


def test_approval_is_refused_when_the_allowlist_shrank_after_submission(app, client, owner, make_experiment):
    """If the owner removed a name after the plan was submitted, is approving refused and
    the page saying which secret is not allowed?"""
    _allow(app, ["HF_TOKEN"])
    number = make_experiment("Shrinking list", status="planning")
    with app.app_context():
        submission = approvals.submit_plan(experiments.get_experiment(number),
                                           plan_with(pod_spec(secrets=["HF_TOKEN"])), OWNER, source="owner")
        db.session.commit()
        request_id = submission.approval.id
    _allow(app, [])
    page = client.get(f"/approvals/{request_id}").text
    assert "not on the pod-secret allowlist" in page
    response = client.post(f"/api/approvals/{request_id}/resolve", json={"decision": "approve"},
                           headers={"X-CSRFToken": owner.csrf()})
    assert response.status_code == 422
    assert response.get_json()["error"] == "secrets_not_allowed"
    with app.app_context():
        assert db.session.get(ApprovalRequest, request_id).status == "pending"


@pytest.mark.parametrize("raw, message", [
    ("SECRET_KEY", "one of Sagan's own secrets"),
    ("HF_TOKEN, DATABASE_URL", "one of Sagan's own secrets"),
    ("RUNPOD_API_KEY_TEAM", "one of Sagan's own secrets"),
    ("ANTHROPIC_API_KEY", "one of Sagan's own secrets"),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx", "names only"),
    ("hf-token", "not an environment variable name"),
])
def test_the_settings_form_refuses_bad_allowlists_and_changes_nothing(app, client, owner, raw, message):
    """Is each bad allowlist (a Sagan secret, a value, a malformed name) refused with a
    message, the stored list unchanged?"""
    _allow(app, ["WANDB_API_KEY"])
    page = client.get("/settings")
    response = client.post("/settings/pod-secrets", data={"pod_secret_allowlist": raw,
                                                          "csrf_token": csrf_from(page.text)})
    assert response.status_code == 200
    assert message.lower() in html.unescape(response.text).lower()
    with app.app_context():
        assert pod_secrets.allowlist() == ["WANDB_API_KEY"]


def test_the_settings_form_stores_names(app, client, owner):
    """Are names from the form stored (de-duplicated, in order) and shown back?"""
    page = client.get("/settings")
    response = client.post("/settings/pod-secrets", data={"pod_secret_allowlist": "HF_TOKEN, WANDB_API_KEY\nHF_TOKEN",
                                                          "csrf_token": csrf_from(page.text)})
    assert response.status_code == 303
    with app.app_context():
        assert pod_secrets.allowlist() == ["HF_TOKEN", "WANDB_API_KEY"]
    assert "HF_TOKEN, WANDB_API_KEY" in client.get("/settings").text


def test_every_secret_setting_in_config_is_reserved():
    """Is every config.py setting shaped like a secret (…_KEY, …_TOKEN, …_PASSWORD, …_URL)
    refused as a pod secret, so a setting added later is covered without a list to update?"""
    from config import Config
    shaped = [n for n in dir(Config) if n.isupper() and n.endswith(("_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_URL"))]
    assert {"ANTHROPIC_API_KEY", "SAGAN_OWNER_PASSWORD", "REDIS_URL"} <= set(shaped)
    assert all(pod_secrets.reserved(n) for n in shaped)
    assert all(pod_secrets.reserved(n) for n in ("SECRET_KEY", "DATABASE_URL", "RUNPOD_API_KEY_TEAM",
                                                 "RUNPOD_API_KEY_PERSONAL", "RUNPOD_TEAM_ID"))
    assert not pod_secrets.reserved("HF_TOKEN") and not pod_secrets.reserved("WANDB_API_KEY")


def _approved_dispatch(app, make_experiment, secrets):
    number = make_experiment("Dispatch with secrets", status="planning", pod_account="team")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        submission = approvals.submit_plan(experiment, plan_with(pod_spec(secrets=secrets)), OWNER, source="owner")
        approvals.approve(submission.approval, OWNER, confirm_unchecked=True)
        lifecycle.transition(experiment, "implementing", Actor.system())
        db.session.commit()
    return number


def test_dispatch_injects_only_allowlisted_secrets(app, runpod, make_experiment, monkeypatch):  # noqa: F811
    """Does the created pod receive the allowed secrets' values but no Sagan secret — even with
    one forced into the stored list past the form?"""
    monkeypatch.setenv("HF_TOKEN", "hf_value_for_the_pod_0000000")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-value-000000000000")
    monkeypatch.setenv("SECRET_KEY", "server-secret-key-never-for-pods")
    _allow(app, ["HF_TOKEN", "WANDB_API_KEY"])
    number = _approved_dispatch(app, make_experiment, ["HF_TOKEN", "WANDB_API_KEY"])
    _allow(app, ["HF_TOKEN", "WANDB_API_KEY", "SECRET_KEY"])  # written straight to the table: the form would refuse it
    dispatch(app, number)
    env = runpod.requests_to("POST")[0].body["env"]
    assert env["HF_TOKEN"] == "hf_value_for_the_pod_0000000"
    assert env["WANDB_API_KEY"] == "wandb-value-000000000000"
    assert "SECRET_KEY" not in env
    assert "server-secret-key-never-for-pods" not in repr(env)


def test_a_secret_removed_from_the_allowlist_after_approval_stops_the_dispatch_before_any_pod(
        app, runpod, make_experiment, monkeypatch):  # noqa: F811
    """Is a name taken off the allowlist after approval refused by the preflight — no pod created,
    the experiment blocked with the name in its reason — rather than a pod started without it?"""
    monkeypatch.setenv("HF_TOKEN", "hf_value_for_the_pod_0000000")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-value-000000000000")
    _allow(app, ["HF_TOKEN", "WANDB_API_KEY"])
    number = _approved_dispatch(app, make_experiment, ["HF_TOKEN", "WANDB_API_KEY"])
    _allow(app, ["HF_TOKEN"])
    dispatch(app, number)
    assert runpod.requests_to("POST") == []
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        note = db.session.scalar(sa.select(WorkflowEvent.note).where(WorkflowEvent.entity_id == experiment.id,
                                                                     WorkflowEvent.to_status == "blocked"))
        assert "WANDB_API_KEY is not on the pod-secret allowlist" in note
