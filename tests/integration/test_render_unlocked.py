"""Outside text is rendered and sanitized with no database transaction open.

On SQLite every transaction holds the write lock from its first statement (BEGIN
IMMEDIATE), so a render inside one stalls every other writer for as long as it takes.
The real sanitizer is wrapped to note, each time it runs, whether the session it runs
beside has a transaction open; every request path and agent tool that stores rendered
text is driven, and none may render inside one.
"""
from __future__ import annotations

import sqlite3
from io import BytesIO
from pathlib import Path

import flask_migrate
import pytest

from models import Comment, db
from services.core import sanitize
from services.core.actors import Actor
from services.core.auth import create_owner
from services.workflow import experiments, runs
from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, csrf_from
from tests.integration.code_fixtures import call, tool_context
from tests.integration.test_migrations import MIGRATIONS, _scratch_app
from tests.integration.test_progress_ingest import upload

PLAN = (Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "two_pod_seed_sweep.md").read_text()


@pytest.fixture
def renders(monkeypatch):
    """Whether a transaction was open at each sanitizer run (True is a render under the lock)."""
    seen: list[bool] = []
    real = sanitize._clean

    def noting(html, policy):
        seen.append(db.session().in_transaction())
        return real(html, policy)

    monkeypatch.setattr(sanitize, "_clean", noting)
    return seen


def test_owner_comments_render_outside_a_transaction(app, htmx_client, make_experiment, renders):
    """Are the owner's new and edited comments rendered with no transaction open?"""
    number = make_experiment()
    renders.clear()  # the demo walk that made it renders its own plan as it seeds
    headers = {"X-CSRFToken": htmx_client.csrf}
    assert htmx_client.post(f"/experiments/{number}/comments", headers=headers,
                            data={"body": "**First** try"}).status_code == 200
    with app.app_context():
        comment = db.session.scalar(db.select(Comment))
    assert htmx_client.post(f"/comments/{comment.id}/edit", headers=headers,
                            data={"body": "**Second** try"}).status_code == 200
    assert len(renders) >= 2 and not any(renders), renders


def test_the_owners_clean_result_preview_and_figures_sanitize_outside_a_transaction(app, client, owner,
                                                                                   make_experiment, renders):
    """Are the owner's clean result (saved and previewed) and an uploaded SVG figure
    sanitized with no transaction open?"""
    number = make_experiment("Draft", status="awaiting_promotion")
    renders.clear()  # the demo walk that made it renders its own plan as it seeds
    token = csrf_from(client.get(f"/experiments/{number}").text)
    html = "<h2>Result</h2><p>The loss falls.</p>"
    assert client.post(f"/experiments/{number}/clean-result/preview",
                       data={"csrf_token": token, "html": html}).status_code in (200, 303)
    assert client.post(f"/experiments/{number}/clean-result",
                       data={"csrf_token": token, "html": html, "title": "Loss falls"}).status_code == 303
    svg = b'<svg viewBox="0 0 10 10"><circle r="3"/></svg>'
    assert client.post(f"/experiments/{number}/figures", data={"csrf_token": token, "file": (BytesIO(svg), "dots.svg")},
                       content_type="multipart/form-data").status_code == 303
    assert len(renders) >= 3 and not any(renders), renders


def test_plans_and_clean_results_from_the_api_render_outside_a_transaction(app, api_client, make_experiment,
                                                                         renders):
    """Are a plan posted with a write token and a clean result patched with one sanitized
    with no transaction open?"""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    renders.clear()  # the demo walk that made it renders its own plan as it seeds
    client = api_client("read,write")
    response = client.post(f"/api/experiments/{number}/plans", json={"markdown": PLAN})
    assert response.status_code == 201, response.get_json()
    assert client.patch(f"/api/clean-results/{number}", json={"html": "<p>The loss falls.</p>"}).status_code == 200
    assert len(renders) >= 2 and not any(renders), renders


def test_agent_tools_render_outside_a_transaction(app, make_experiment, renders):
    """Do the agent's plan, clean-result and comment tools render with no transaction open,
    even after the turn's previous tool wrote its result event?"""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    renders.clear()  # the demo walk that made it renders its own plan as it seeds
    with app.app_context():
        ctx = tool_context(number, "analyzer")
        for name, data in (("submit_plan", {"markdown": PLAN}),
                           ("write_clean_result", {"html": "<p>The loss falls.</p>"}),
                           ("add_comment", {"body": "The **loss** falls."})):
            runs.append_event(ctx.run.id, "notice", "the previous tool's result")  # not committed
            result = call(ctx, name, **data)
            assert not result.is_error, (name, result.content)
    assert len(renders) >= 3 and not any(renders), renders


def test_a_pods_small_svg_upload_sanitizes_outside_a_transaction(app, client, make_live_pod, renders):
    """Is a small SVG a pod uploads (sanitized in its request) sanitized with no transaction open?"""
    pod = make_live_pod()
    renders.clear()
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><circle r="3"/></svg>'
    assert upload(client, pod.secret, "figures/dot.svg", svg, "image/svg+xml").status_code == 201
    assert len(renders) >= 1 and not any(renders), renders


def test_on_sqlite_another_writer_gets_the_lock_while_a_comment_renders(tmp_path, monkeypatch):
    """On the embedded default's SQLite, can another connection take the write lock at once
    (no waiting) while the owner's comment is being rendered?"""
    path = tmp_path / "sagan.db"
    lite = _scratch_app(f"sqlite:///{path}")
    with lite.app_context():
        flask_migrate.upgrade(directory=MIGRATIONS)
        create_owner(OWNER_EMAIL, OWNER_PASSWORD)
        number = experiments.create_experiment({"title": "Lite"}, Actor("owner", None, "t")).number
        db.session.commit()
    taken: list[bool] = []
    real = sanitize._clean

    def another_writer_meanwhile(html, policy):
        other = sqlite3.connect(path, timeout=0, isolation_level=None)  # a held lock fails at once
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            taken.append(True)
        except sqlite3.OperationalError:
            taken.append(False)
        finally:
            other.close()
        return real(html, policy)

    monkeypatch.setattr(sanitize, "_clean", another_writer_meanwhile)
    try:
        client = lite.test_client()
        page = client.get("/login")
        client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                    "csrf_token": csrf_from(page.text)})
        token = csrf_from(client.get(f"/experiments/{number}").text)
        response = client.post(f"/experiments/{number}/comments", data={"csrf_token": token, "body": "**Lite**"})
        assert response.status_code in (200, 303), response.text
        assert taken and all(taken), taken
    finally:
        with lite.app_context():
            db.session.remove()
            db.engine.dispose()

