"""The web server's statement timeout (serve.py, app.py): PostgreSQL ends a statement of
a request that runs too long, on the ORM's connections and the lean reads' alike, and the
request answers a clear 503 instead of holding its thread for ever (granian has no
request timeout of its own). Other processes keep no limit."""
from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from app import create_app
from blueprints import access
from config import TestConfig
from models import db
from services.core import lean_reads

SLEEP = sa.text("SELECT pg_sleep(5)")


class OneSecondConfig(TestConfig):
    STATEMENT_TIMEOUT_SECONDS = 1


@pytest.fixture
def timed_app(app):
    """A second app on the test database (schema built by `app`), as the web server builds it."""
    limited = create_app(OneSecondConfig)

    def slow():  # a stand-in for a statement that never ends
        db.session.execute(SLEEP)
        return "finished"

    # A page and an API address (the API answers JSON).
    for path, endpoint in (("/_test/slow", "slow_page"), ("/api/_test/slow", "slow_api")):
        limited.add_url_rule(path, endpoint, access.public(slow))

    yield limited
    with limited.app_context():
        db.session.remove()
        db.engine.dispose()


def test_a_long_statement_is_ended_on_both_kinds_of_connection(timed_app):
    with timed_app.app_context():
        for run in (lambda: db.session.execute(SLEEP), lambda: lean_reads.first_row(SLEEP, {})):
            started = time.monotonic()
            with pytest.raises(sa.exc.OperationalError) as ended:
                run()
            assert "canceling statement due to statement timeout" in str(ended.value)
            assert time.monotonic() - started < 4
            db.session.rollback()
        assert db.session.scalar(sa.text("SELECT 1")) == 1  # the connection is usable after


def test_a_request_past_the_timeout_answers_a_clear_503(timed_app):
    client = timed_app.test_client()
    page = client.get("/_test/slow")
    assert page.status_code == 503 and page.headers["Retry-After"] == "5"
    assert page.headers["X-Sagan-Error"] == "timeout"
    assert "That took longer than Sagan lets one request use the database" in page.text
    answer = client.get("/api/_test/slow")
    assert answer.status_code == 503 and answer.get_json()["error"] == "timeout"


def test_without_the_setting_there_is_no_limit(app):
    with app.app_context():
        assert db.session.scalar(sa.text("SHOW statement_timeout")) == "0"


def test_a_negative_timeout_stops_start_up():
    class Negative(TestConfig):
        STATEMENT_TIMEOUT_SECONDS = -1

    with pytest.raises(ValueError, match="statement timeout must be 0"):
        create_app(Negative)
