"""Shared fixtures (flaskr style): app, client, runner, auth, htmx_client, api_client.

Tests run against real PostgreSQL and Redis (TEST_DATABASE_URL, TEST_REDIS_URL). The
schema is built once per session by the Alembic migrations themselves; each test then
starts from empty tables, a clean Redis database and the real clock.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import create_app  # noqa: E402
from blueprints import access  # noqa: E402
from config import TestConfig  # noqa: E402
from models import db  # noqa: E402
from services.core import clock  # noqa: E402

OWNER_EMAIL = "owner@example.com"
OWNER_PASSWORD = "correct-horse-battery"


def _require_services() -> None:
    """Fail loudly (never skip) when PostgreSQL or Redis is not reachable."""
    problems = []
    try:
        engine = sa.create_engine(TestConfig.SQLALCHEMY_DATABASE_URI)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # noqa: BLE001
        problems.append(f"PostgreSQL at {TestConfig.SQLALCHEMY_DATABASE_URI}: {exc.__class__.__name__}: {exc}")
    try:
        redis.Redis.from_url(TestConfig.REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001
        problems.append(f"Redis at {TestConfig.REDIS_URL}: {exc}")
    if problems:
        pytest.exit("Test services are not reachable (run `make test`, which starts them):\n  "
                    + "\n  ".join(problems), returncode=3)


def build_schema(app) -> None:
    """Drop everything and build the schema with the real migrations."""
    import flask_migrate
    with app.app_context():
        with db.engine.begin() as conn:
            conn.execute(sa.text("DROP SCHEMA IF EXISTS public CASCADE"))
            conn.execute(sa.text("CREATE SCHEMA public"))
        flask_migrate.upgrade(directory=str(ROOT / "migrations"))


def truncate_all(app) -> None:
    """Empty every table. DELETE, children first, rather than TRUNCATE: a test leaves a
    handful of rows, and TRUNCATE's new files and fsyncs cost ~0.1-0.3 s per test while
    DELETE of a few rows costs a millisecond. (The schema has no sequences to restart.)"""
    with app.app_context():
        db.session.remove()
        with db.engine.begin() as conn:
            for table in reversed(db.metadata.sorted_tables):
                conn.execute(table.delete())


@pytest.fixture(scope="session")
def app():
    """The app on the test database, schema built by migrations once per session."""
    _require_services()
    app = create_app(TestConfig)
    build_schema(app)
    yield app
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing():
    """Cheap argon2id parameters for the suite: the production cost (~0.1 s per hash or
    verify) would dominate every test that logs in. Hashes keep the same format."""
    from argon2 import PasswordHasher

    from services.core import auth as auth_service
    cheap = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(auth_service, "_hasher", cheap)
        patch.setattr(auth_service, "_DUMMY_HASH", cheap.hash("not-a-real-password"))
        yield


@pytest.fixture(autouse=True)
def _clean_state(request):
    """Every test starts from empty tables, an empty Redis database and the real clock."""
    yield
    clock.reset()
    if "app" in request.fixturenames:
        app = request.getfixturevalue("app")
        truncate_all(app)
        redis.Redis.from_url(app.config["REDIS_URL"]).flushdb()
        # The process's memory of addresses past the bad-token limit goes with the Redis
        # counts it mirrors: left over, it sent a later test's lean ingest post to Flask.
        access._throttled_until.clear()


@pytest.fixture
def app_ctx(app):
    """An application context for calling services directly."""
    with app.app_context():
        yield
        db.session.remove()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def runner(app):
    return app.test_cli_runner()


def csrf_from(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html) or \
        re.search(r'"X-CSRFToken": "([^"]+)"', html)
    assert match, "page has no CSRF token"
    return match.group(1)


class AuthActions:
    """Log the owner in and out through the real login form."""

    def __init__(self, app, client):
        self._app = app
        self._client = client

    def create_owner(self, email: str = OWNER_EMAIL, password: str = OWNER_PASSWORD):
        from services.core.auth import create_owner
        with self._app.app_context():
            user = create_owner(email, password)
            db.session.commit()
            return user.id

    def login(self, email: str = OWNER_EMAIL, password: str = OWNER_PASSWORD):
        page = self._client.get("/login")
        return self._client.post("/login", data={"email": email, "password": password,
                                                 "csrf_token": csrf_from(page.text)})

    def logout(self):
        page = self._client.get("/")
        return self._client.post("/logout", data={"csrf_token": csrf_from(page.text)})

    def csrf(self) -> str:
        """A valid CSRF token for the logged-in session."""
        return csrf_from(self._client.get("/api-tokens").text)


@pytest.fixture
def auth(app, client):
    return AuthActions(app, client)


@pytest.fixture
def owner(auth, client):
    """The owner account, logged in on `client`."""
    auth.create_owner()
    response = auth.login()
    assert response.status_code == 302, response.text
    return auth


@pytest.fixture
def htmx_client(app, owner):
    """A logged-in client whose requests look like htmx swaps."""
    client = app.test_client()
    page = client.get("/login")
    client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                "csrf_token": csrf_from(page.text)})
    client.environ_base["HTTP_HX_REQUEST"] = "true"
    client.csrf = csrf_from(client.get("/api-tokens", headers={"HX-Request": "false"}).text)
    return client


@pytest.fixture
def api_client(app):
    """Factory: a client that sends `Authorization: Bearer <token>` with the given scopes."""
    def make(scopes="read,write", name="test token"):
        from services.core.auth import create_token
        with app.app_context():
            token, secret = create_token(name, scopes)
            token_id = token.id
            db.session.commit()
        client = app.test_client()
        client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
        client.secret = secret
        client.token_id = token_id
        return client
    return make


@pytest.fixture
def make_experiment(app):
    """Factory: create an experiment through the service, optionally walked to a status."""
    def make(title="A test experiment", status=None, **fields):
        from services.core.actors import Actor
        from services.pipeline import demo
        from services.workflow import experiments
        with app.app_context():
            experiment = experiments.create_experiment({"title": title, **fields}, Actor("owner", None, "t"))
            if status:
                demo.walk_to(experiment, status)
            db.session.commit()
            return experiment.number
    return make


@pytest.fixture
def fake_anthropic(app):
    """A loopback fake Anthropic API; the app's real client points at it for this test."""
    from tests.fakes.anthropic_server import FakeAnthropic
    saved = {k: app.config.get(k) for k in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MODEL_MAX_RETRIES")}
    with FakeAnthropic() as fake:
        app.config.update(ANTHROPIC_API_KEY="sk-ant-test-0000000000000000", ANTHROPIC_BASE_URL=fake.url,
                          MODEL_MAX_RETRIES=2)
        try:
            yield fake
        finally:
            app.config.update(saved)


@pytest.fixture
def worker(app):
    """Run queued jobs in-process, in burst mode, with RQ's SimpleWorker (STYLE §17)."""
    from rq import SimpleWorker

    from services.core import redis_store
    from services.workflow import jobs
    from workers.runtime import AppContextJob, set_app
    set_app(app)

    def work(max_jobs: int | None = None) -> int:
        with app.app_context():
            queues = [jobs.queue(name) for name in jobs.ALL_QUEUES]
            conn = redis_store.connection()
        done = SimpleWorker(queues, connection=conn, job_class=AppContextJob, serializer=jobs.SERIALIZER)
        done.work(burst=True, max_jobs=max_jobs, with_scheduler=False)
        return done.successful_job_count
    yield work
    set_app(None)


@pytest.fixture
def fake_runpod(request):
    """A loopback fake RunPod REST v2 API (tests/fakes/runpod_server.py). When the test also
    uses `app`, the app's RunPod settings point at it (team and personal keys, team id)."""
    from tests.fakes.runpod_server import FakeRunPod
    with FakeRunPod() as fake:
        if "app" not in request.fixturenames:
            yield fake
            return
        app = request.getfixturevalue("app")
        keys = ("RUNPOD_API_URL", "RUNPOD_API_KEY_TEAM", "RUNPOD_API_KEY_PERSONAL", "RUNPOD_TEAM_ID",
                "RUNPOD_TEAM_HEADER")
        saved = {k: app.config.get(k) for k in keys}
        app.config.update(RUNPOD_API_URL=fake.url, RUNPOD_API_KEY_TEAM=fake.team_key,
                          RUNPOD_API_KEY_PERSONAL=fake.personal_key, RUNPOD_TEAM_ID=fake.team_id,
                          RUNPOD_TEAM_HEADER=fake.team_header)
        try:
            yield fake
        finally:
            app.config.update(saved)
