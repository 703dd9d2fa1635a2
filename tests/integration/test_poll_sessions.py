"""The two live polls' "nothing changed" is answered before Flask, with the session checked
in the answer's own one query (front/quiet_polls.py, services/core/lean_reads.py;
docs/performance.md): what that must never weaken.

A logout, "sign out everywhere" or a password change refuses the very next poll; a stale
session is refused before a 404 or a 400 could say anything; an answer without the user
load still carries the security headers and writes no cookie; a connection PostgreSQL
dropped is replaced without the poll failing; and the quiet poll is one statement."""
from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from flask_login.utils import _create_identifier

from front import quiet_polls
from models import User, db
from services.core import auth as auth_service
from services.core import lean_reads
from services.workflow import experiments, runs
from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, csrf_from
from tests.integration.queries import counting_queries

SECURITY_HEADERS = ("Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy", "X-Frame-Options")


def _experiment_poll(client, number: int, version: str, **headers):
    return client.get(f"/experiments/{number}/live",
                      headers={"If-None-Match": f'"{version}"', "HX-Request": "true", **headers})


def _run_poll(client, run_id: str, after: int, **headers):
    return client.get(f"/runs/{run_id}/events?after={after}", headers={"HX-Request": "true", **headers})


def _version(client, number: int) -> str:
    return re.search(r'data-version="([0-9a-f]+)"', client.get(f"/experiments/{number}").text).group(1)


def _make_run(app, number: int) -> str:
    with app.app_context():
        experiment = experiments.get_experiment(number)
        run = runs.create_run(kind="plan", agent="planner", request="r", scope_id=experiment.id, status="running")
        db.session.commit()
        return str(run.id)


def _login(client):
    page = client.get("/login")
    return client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                       "csrf_token": csrf_from(page.text)})


def _copy_session(source, target) -> None:
    target.set_cookie("session", source.get_cookie("session").value)


def _refused(response) -> bool:
    """The htmx refusal every owner route gives without a valid session."""
    return response.status_code == 401 and response.headers["HX-Redirect"].startswith("/login")


def _bump_session_version(app) -> None:
    with app.app_context():
        auth_service.end_sessions(db.session.scalar(sa.select(User)))
        db.session.commit()


def test_a_logout_refuses_the_very_next_poll_of_a_copied_cookie(app, client, owner, make_experiment):
    """A session cookie copied while signed in polls fine; once the owner logs out, is its next
    poll (either page's) refused?"""
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    version = _version(client, number)
    thief = app.test_client()
    _copy_session(client, thief)
    assert _experiment_poll(thief, number, version).status_code == 304
    assert _run_poll(thief, run_id, 0).status_code == 204
    owner.logout()
    assert _refused(_experiment_poll(thief, number, version))
    assert _refused(_run_poll(thief, run_id, 0))
    assert _refused(_experiment_poll(client, number, version))


def test_ending_the_sessions_refuses_the_next_poll_and_a_new_login_polls_again(app, client, owner, make_experiment):
    """A password change or "sign out everywhere" bumps the session version: is the next poll
    refused, and does the same browser poll again after logging in anew?"""
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    version = _version(client, number)
    assert _experiment_poll(client, number, version).status_code == 304
    _bump_session_version(app)
    assert _refused(_experiment_poll(client, number, version))
    assert _refused(_run_poll(client, run_id, 0))
    assert _login(client).status_code == 302
    assert _experiment_poll(client, number, version).status_code == 304
    assert _run_poll(client, run_id, 0).status_code == 204


def test_a_stale_session_is_refused_before_anything_else_is_said(app, client, owner, make_experiment):
    """With an ended session, do an unknown experiment, an unknown run, a malformed run id and a
    malformed cursor all answer the login refusal — not 404 or 400, which would answer a
    credential that no longer holds; and with a good session the 404 and 400 come back?"""
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    unknown_run = "00000000-0000-4000-8000-000000000001"
    asked = [lambda: _experiment_poll(client, 987654, "0" * 24), lambda: _run_poll(client, unknown_run, 0),
             lambda: _run_poll(client, "not-a-run", 0), lambda: client.get(
                 f"/runs/{run_id}/events?after=x", headers={"HX-Request": "true"})]
    assert [ask().status_code for ask in asked] == [404, 404, 404, 400]
    _bump_session_version(app)
    for ask in asked:
        assert _refused(ask())


def test_a_poll_without_a_session_is_refused(app, client, owner, make_experiment):
    """No cookie, or a session cookie whose signature is not the server's: refused."""
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    version = _version(client, number)
    stranger = app.test_client()
    assert _refused(_experiment_poll(stranger, number, version))
    assert _refused(_run_poll(stranger, run_id, 0))
    forged = app.test_client()
    value = client.get_cookie("session").value
    forged.set_cookie("session", value[:-4] + ("AAAA" if not value.endswith("AAAA") else "BBBB"))
    assert _refused(_experiment_poll(forged, number, version))
    assert _refused(_run_poll(forged, run_id, 0))


def test_the_quiet_answers_keep_the_headers_and_write_no_cookie(app, client, owner, make_experiment):
    """Do the 304 and the 204 carry the security headers and their cache headers, no body, and
    no Set-Cookie (a poll does not re-sign the session)?"""
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    version = _version(client, number)
    quiet = _experiment_poll(client, number, version)
    nothing = _run_poll(client, run_id, 0)
    assert quiet.status_code == 304 and quiet.headers["ETag"] == f'"{version}"'
    assert quiet.headers["Cache-Control"] == "no-cache"
    assert nothing.status_code == 204 and nothing.headers["Vary"].startswith("HX-Request")
    for response in (quiet, nothing):
        assert response.data == b"" and "Set-Cookie" not in response.headers
        for name in SECURITY_HEADERS:
            assert response.headers.get(name), name


def test_another_client_identifier_takes_the_full_check_and_still_polls(app, client, owner, make_experiment):
    """Session protection ("basic"): a different User-Agent is not the identifier the session was
    made for. Does the poll then take Flask-Login's own path (which marks the session not
    fresh) and still answer, not refuse or fail?"""
    number = make_experiment(status="clarifying")
    version = _version(client, number)
    moved = _experiment_poll(client, number, version, **{"User-Agent": "another browser"})
    assert moved.status_code == 304


def test_a_remember_me_cookie_alone_polls_through_the_full_check(app, client, auth, make_experiment):
    """A browser that kept only its remember-me cookie: does the poll sign it in (Flask-Login's
    path) and answer, and refuse it once the sessions are ended?"""
    auth.create_owner()
    page = client.get("/login")
    client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD, "remember": "1",
                                "csrf_token": csrf_from(page.text)})
    number = make_experiment(status="clarifying")
    version = _version(client, number)
    returning = app.test_client()
    returning.set_cookie("remember_token", client.get_cookie("remember_token").value)
    assert _experiment_poll(returning, number, version).status_code == 304
    _bump_session_version(app)
    later = app.test_client()
    later.set_cookie("remember_token", client.get_cookie("remember_token").value)
    assert _refused(_experiment_poll(later, number, version))


def test_the_quiet_polls_are_one_statement(app, client, owner, make_experiment):
    """Is "nothing changed" one SQL statement on either page (the session check rides along)?"""
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    version = _version(client, number)
    _experiment_poll(client, number, version)  # the poll connection is made on first use
    with counting_queries() as statements:
        assert _experiment_poll(client, number, version).status_code == 304
    assert len(statements) == 1 and "session_version" in statements[0], statements
    with counting_queries() as statements:
        assert _run_poll(client, run_id, 0).status_code == 204
    assert len(statements) == 1 and "session_version" in statements[0], statements


def test_a_connection_the_database_dropped_is_replaced_without_failing_the_poll(app, client, owner,
                                                                                 make_experiment):
    """PostgreSQL ends the poll's connections (a restart, an admin): is the next poll still
    answered — the read is retried once on a fresh connection — and the one after?"""
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    version = _version(client, number)
    assert _experiment_poll(client, number, version).status_code == 304
    with app.app_context():
        # Several idle poll connections, as a busy process has: the restart drops them all,
        # so the retry must connect afresh rather than take the next dead one.
        held = lean_reads._connections()
        taken = [held.take() for _ in range(3)]
        for connection in taken:
            held.give_back(connection)
        database = db.engine.url.database
        admin = sa.create_engine(db.engine.url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as connection:
        ended = connection.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = :database AND pid <> pg_backend_pid()"), {"database": database}).scalar()
    admin.dispose()
    assert ended >= 1
    assert _experiment_poll(client, number, version).status_code == 304
    assert _run_poll(client, run_id, 0).status_code == 204
    assert _experiment_poll(client, number, version).status_code == 304


def test_after_a_restart_the_retry_connects_afresh_not_on_another_dropped_connection(app):
    """A busy process keeps several idle poll connections; a restart drops them all. The read
    is retried on a new connection (it took the next idle one, dead too, and failed)."""
    with app.app_context():
        held = lean_reads._connections()
        taken = [held.take() for _ in range(3)]
        for connection in taken:
            held.give_back(connection)
        url = db.engine.url
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as connection:
        ended = connection.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = :database AND pid <> pg_backend_pid()"), {"database": url.database}).scalar()
    admin.dispose()
    assert ended >= 3
    with app.app_context():
        assert lean_reads.first_row(sa.select(sa.literal(1)), {}) == (1,)
        assert held.idle and len(held.idle) == 1  # the dead ones are gone, the fresh one kept


@pytest.mark.parametrize("environ", [
    {"REMOTE_ADDR": "127.0.0.1", "HTTP_USER_AGENT": "Mozilla/5.0 (X11; Linux) Firefox/140.0"},
    {"REMOTE_ADDR": "10.0.0.9"},
    {"REMOTE_ADDR": "10.0.0.9", "HTTP_X_FORWARDED_FOR": "203.0.113.7, 10.0.0.1", "HTTP_USER_AGENT": "curl/8"},
    {"REMOTE_ADDR": "::1", "HTTP_USER_AGENT": "Agent with ünïcode"},
])
def test_the_client_identifier_is_flask_logins(app, environ):
    """Is the identifier the layer compares the one Flask-Login computes for the same request?"""
    with app.test_request_context("/", environ_overrides=environ):
        from flask import request
        assert quiet_polls.client_identifier(request.environ) == _create_identifier()


def test_other_shapes_of_the_poll_are_answered_by_flask(app, client, owner, make_experiment):
    """A query string, a HEAD, a boosted or non-htmx run poll: not the layer's (it answers no
    shape it was not written for), and Flask still answers them rightly."""
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    version = _version(client, number)
    with counting_queries() as statements:
        assert client.get(f"/experiments/{number}/live?x=1", headers={
            "If-None-Match": f'"{version}"', "HX-Request": "true"}).status_code == 304
    assert len(statements) > 1  # the user load: Flask's path
    assert client.head(f"/experiments/{number}/live", headers={"If-None-Match": f'"{version}"'}).status_code == 304
    boosted = _run_poll(client, run_id, 0, **{"HX-Boosted": "true"})
    assert boosted.status_code == 200 and "<html" in boosted.text


def test_the_layer_refuses_to_start_when_its_route_changes_rule(app, monkeypatch):
    """If the live route lost its owner rule, would the app refuse to start instead of the layer
    answering for a route whose rule it no longer knows?"""
    monkeypatch.setattr(app.view_functions["experiments.live"], "access_rule", ("public", None))
    with pytest.raises(RuntimeError, match="quiet_polls"):
        quiet_polls.QuietPolls(app, app.wsgi_app)


def test_a_poll_whose_read_fails_answers_503_not_500(app, client, owner, make_experiment, monkeypatch):
    """The poll connection cannot be had (the database refuses connections): does the layer step
    aside and the route answer the usual 503 with Retry-After, for either poll?"""
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    version = _version(client, number)

    def refused(_self, **_how):
        raise sa.exc.OperationalError("connect", {}, ConnectionRefusedError("connection refused"))

    monkeypatch.setattr(lean_reads._Connections, "take", refused)
    for response in (_experiment_poll(client, number, version), _run_poll(client, run_id, 0)):
        assert response.status_code == 503 and response.headers["Retry-After"] == "5"


def test_a_kept_session_cookie_past_its_age_is_refused(app, client, owner, make_experiment, monkeypatch):
    """The quiet layer keeps what a session cookie it verified says, to skip the signature
    check on the next polls: once the cookie is older than the session lifetime, is its next
    poll (either page's) still refused, as Flask refuses it?"""
    from datetime import timedelta
    number = make_experiment(status="clarifying")
    run_id = _make_run(app, number)
    version = _version(client, number)
    assert _experiment_poll(client, number, version).status_code == 304  # verified and kept
    assert _run_poll(client, run_id, 0).status_code == 204
    monkeypatch.setattr(app, "permanent_session_lifetime", timedelta(seconds=-1))
    assert _refused(_experiment_poll(client, number, version))
    assert _refused(_run_poll(client, run_id, 0))

