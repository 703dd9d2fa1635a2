"""`/healthz` (SPEC §9.2, §10): names the failing part, reveals no configuration."""
from __future__ import annotations

import pytest

import config as sagan_config
from app import create_app
from models import db


def _health_of(config_class):
    app = create_app(config_class)
    try:
        return app.test_client().get("/healthz")
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()


def test_healthz_reports_ok_without_secrets(app, client):
    """Does /healthz answer 200 ok/db/redis/workers/version and never the secret key or URLs?"""
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.get_json()
    assert body["ok"] is True and body["db"] == "ok" and body["redis"] == "ok"
    assert isinstance(body["workers"], int) and body["workers"] >= 0
    assert body["version"] == app.config["VERSION"]
    assert set(body) == {"ok", "db", "redis", "workers", "artifact_workers", "version"}
    raw = response.get_data(as_text=True)
    for secret in (app.config["SECRET_KEY"], app.config["SQLALCHEMY_DATABASE_URI"],
                   app.config["REDIS_URL"], "postgres@", "127.0.0.1"):
        assert secret not in raw


def test_healthz_needs_no_session_and_sets_no_cookie(client):
    """Is /healthz public and free of session cookies?"""
    response = client.get("/healthz")
    assert response.status_code == 200
    assert not any(h.startswith("session=") for h in response.headers.getlist("Set-Cookie"))


def test_healthz_names_redis_when_it_is_down():
    """With Redis unreachable, does /healthz answer 503 with redis: "down" and db still ok?"""
    class NoRedis(sagan_config.TestConfig):
        REDIS_URL = "redis://127.0.0.1:1/0"

    response = _health_of(NoRedis)
    assert response.status_code == 503
    body = response.get_json()
    assert body["ok"] is False and body["redis"] == "down" and body["db"] == "ok"
    assert "127.0.0.1:1" not in response.get_data(as_text=True)


def test_healthz_names_the_database_when_it_is_down():
    """With the database unreachable, does /healthz answer 503 with db: "down" and redis ok?"""
    class NoDatabase(sagan_config.TestConfig):
        SQLALCHEMY_DATABASE_URI = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"
        SQLALCHEMY_ENGINE_OPTIONS = {"connect_args": {"connect_timeout": 2}}

    response = _health_of(NoDatabase)
    assert response.status_code == 503
    body = response.get_json()
    assert body["ok"] is False and body["db"] == "down" and body["redis"] == "ok"
    assert "nowhere" not in response.get_data(as_text=True)


@pytest.mark.parametrize("path", ["/no-such-page", "/experiments/abc"])
def test_error_pages_reveal_no_configuration(app, client, owner, path):
    """Does a 404 page say "Nothing here." without any configuration or stack trace?"""
    response = client.get(path)
    assert response.status_code == 404
    raw = response.get_data(as_text=True)
    assert "Traceback" not in raw
    assert app.config["SECRET_KEY"] not in raw and app.config["SQLALCHEMY_DATABASE_URI"] not in raw
