"""The security round's regression attacks on the embedded default's database (SQLite, migrated by the
same migrations `make run` applies), in-process: the session version, the pod-secret
allowlist, the approved account, deep markup and hostile JSON behave as on PostgreSQL."""
from __future__ import annotations

import json

import flask_migrate
import pytest

from models import Setting, db
from services.core.actors import Actor
from services.core.auth import create_owner, create_token
from services.core.errors import Conflict
from services.dispatch import pod_secrets, provisioner
from services.planning import approvals
from services.workflow import experiments, lifecycle
from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, csrf_from
from tests.integration.test_dispatch import OWNER, plan_with, pod_spec
from tests.integration.test_migrations import MIGRATIONS, _scratch_app


@pytest.fixture
def lite(tmp_path):
    """A Sagan app on a fresh, migrated SQLite file, with an owner and a write token."""
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


def _login(client):
    page = client.get("/login")
    return client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                       "csrf_token": csrf_from(page.text)})


def _writer(app):
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {app.write_secret}"
    return client


def test_sqlite_logout_ends_a_copied_session(lite):
    """On SQLite, does a session cookie copied before logout stop working after it?"""
    browser, thief = lite.test_client(), lite.test_client()
    _login(browser)
    thief.set_cookie("session", browser.get_cookie("session").value)
    assert thief.get("/").status_code == 200
    browser.post("/logout", data={"csrf_token": csrf_from(browser.get("/").text)})
    assert thief.get("/").status_code == 302


def test_sqlite_plan_naming_a_sagan_secret_is_refused(lite):
    """On SQLite, is a token's plan asking for SECRET_KEY refused with its field path?"""
    writer = _writer(lite)
    number = writer.post("/api/experiments", json={"title": "Steal"}).get_json()["experiment"]["number"]
    writer.patch(f"/api/experiments/{number}", json={"status": "clarifying"})
    response = writer.post(f"/api/experiments/{number}/plans",
                           json={"markdown": plan_with(pod_spec(secrets=["SECRET_KEY"]))})
    assert response.status_code == 422
    assert any(p.startswith("[0].secrets[0]: SECRET_KEY") for p in response.get_json()["problems"])


def test_sqlite_dispatch_refuses_an_account_changed_after_approval(lite):
    """On SQLite, is a launch refused when a token changed the account after approval?"""
    writer = _writer(lite)
    number = writer.post("/api/experiments", json={"title": "Local plan", "pod_account": "local"}
                         ).get_json()["experiment"]["number"]
    with lite.app_context():
        db.session.merge(Setting(key=pod_secrets.SETTING, value=[]))
        experiment = experiments.get_experiment(number)
        lifecycle.transition(experiment, "clarifying", OWNER)
        submission = approvals.submit_plan(experiment, plan_with(pod_spec(gpu="H100", gpuCount=8)), OWNER,
                                           source="owner")
        approvals.approve(submission.approval, OWNER, confirm_unchecked=True)
        lifecycle.transition(experiment, "implementing", Actor.system())
        db.session.commit()
    assert writer.patch(f"/api/experiments/{number}", json={"pod_account": "team"}).status_code == 200
    with lite.app_context():
        with pytest.raises(Conflict) as refused:
            provisioner.launch(experiments.get_experiment(number), OWNER)
        assert refused.value.code == "account_changed"


def test_sqlite_hostile_json_and_markup_answer_400(lite):
    """On SQLite, do NUL, lone surrogates, deep JSON and deeply nested markup answer 400?"""
    writer = _writer(lite)
    for raw in (b'{"title": "a\\u0000b"}', b'{"title": "\\ud800"}', b'{"title": ' + b"[" * 50_000 + b"}"):
        assert writer.post("/api/experiments", data=raw, content_type="application/json").status_code == 400
    number = writer.post("/api/experiments", json={"title": "Deep"}).get_json()["experiment"]["number"]
    response = writer.patch(f"/api/clean-results/{number}", data=json.dumps({"html": "<div>" * 30_000}),
                            content_type="application/json")
    assert response.status_code == 400 and response.get_json()["error"] == "markup_too_deep"
