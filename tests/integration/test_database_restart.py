"""PostgreSQL restarts under a running web server and worker (reliability issue).

The test owns its cluster: `initdb` into a temporary directory, `pg_ctl` on a free port
(never the machine's shared server). While the database is down, pages and the API answer
a clear 503 — no traceback, no configuration; once it is back, the same processes serve
again without a restart, and the worker runs a job queued after the restart.
"""
from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import redis
import sqlalchemy as sa

import serve
from config import Config, TestConfig
from tests.fakes.anthropic_server import FakeAnthropic, reply, text
from tests.processes import stop_process_group

ROOT = Path(__file__).resolve().parents[2]
OWNER = ("restart@example.com", "restart-password-0")
LEAKS = ("Traceback", "psycopg", "OperationalError", "sqlalchemy", "postgresql://", "postgresql+psycopg")


def _pg_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or \
        sorted(glob.glob(f"/usr/local/pgsql/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    """A throwaway PostgreSQL cluster: initdb, start, stop, restart; removed at the end."""

    def __init__(self):
        self.initdb, self.pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        if not (self.initdb and self.pg_ctl):
            pytest.skip("PostgreSQL's initdb and pg_ctl are not installed")
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="sagan-pg-"))
        self.data = self.dir / "data"
        # initdb refuses to run as root: then the cluster belongs to the postgres user.
        self.user = None
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and there is no postgres user to own a test cluster")
            self.user = "postgres"
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self.dir.chmod(0o700)
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/sagan"

    def _run(self, *argv: str, timeout: float = 60) -> None:
        command = list(argv)
        if self.user:
            command = ["runuser", "-u", self.user, "--"] + command
        subprocess.run(command, check=True, capture_output=True, timeout=timeout)

    def create(self) -> None:
        self._run(self.initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        self.start()
        engine = sa.create_engine(self.url.replace("/sagan", "/postgres"), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text("CREATE DATABASE sagan"))
        engine.dispose()

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(self.pg_ctl, "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"), "-w", "start")

    def stop(self) -> None:
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _spawn(argv: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _wait_for(check, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return last


def _assert_clean_503(answer: httpx.Response, *, json: bool) -> None:
    assert answer.status_code == 503, (answer.request.url, answer.status_code, answer.text[:500])
    for leak in LEAKS:
        assert leak not in answer.text, (answer.request.url, leak)
    if json:
        assert answer.json()["error"] == "unavailable"
    else:
        assert "try again in a moment" in answer.text


@pytest.mark.slow
def test_web_and_worker_survive_a_database_restart(tmp_path):
    """Stop PostgreSQL under a running web server (serve.py) and worker: clear 503s, no traceback; start it
    again: the same processes serve pages and the API, and the worker runs a new job."""
    cluster = Cluster()
    redis_url = TestConfig.REDIS_URL
    processes: list[subprocess.Popen] = []
    try:
        cluster.create()

        class RestartConfig(Config):
            SQLALCHEMY_DATABASE_URI = cluster.url
            REDIS_URL = redis_url
            TESTING = True

        import flask_migrate

        from app import create_app
        from models import db
        from services.core import auth
        from services.core.actors import Actor
        from services.workflow import experiments, jobs, runs
        app = create_app(RestartConfig)
        with app.app_context():
            flask_migrate.upgrade(directory=str(ROOT / "migrations"))
            auth.create_owner(*OWNER)
            _token, secret = auth.create_token("restart", "read,write")
            experiments.create_experiment({"title": "Before the restart"}, Actor("owner", None, "t"))
            db.session.commit()

        with FakeAnthropic() as fake:
            fake.script(reply(text("Answered after the restart.")))
            port = _free_port()
            env = {**os.environ, "DATABASE_URL": cluster.url, "REDIS_URL": redis_url, "SECRET_KEY": "restart-test",
                   "SAGAN_INSTANCE_DIR": str(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-test-0000000000000000",
                   "ANTHROPIC_BASE_URL": fake.url, "SAGAN_SCHEDULER_TICK_SECONDS": "1"}
            web = _spawn(serve.command(host="127.0.0.1", port=port, workers=2), env)
            worker = _spawn([sys.executable, "-m", "workers.launcher", "--queues", "agents"], env)
            processes += [web, worker]
            base = f"http://127.0.0.1:{port}"
            assert _wait_for(lambda: httpx.get(f"{base}/healthz", timeout=2).status_code == 200), "web never came up"
            with httpx.Client(base_url=base, timeout=10) as browser, \
                    httpx.Client(base_url=base, timeout=10, headers={"Authorization": f"Bearer {secret}"}) as script:
                login = browser.get("/login")
                token = re.search(r'name="csrf_token" value="([^"]+)"', login.text).group(1)
                assert browser.post("/login", data={"email": OWNER[0], "password": OWNER[1],
                                                    "csrf_token": token}).status_code == 302
                assert browser.get("/").status_code == 200
                assert script.get("/api/experiments").status_code == 200
                web_pids = {web.pid} | {int(p) for p in _children(web.pid)}

                cluster.stop()
                for _ in range(3):  # every web worker, whichever answers
                    _assert_clean_503(browser.get("/"), json=False)
                    _assert_clean_503(browser.get("/", headers={"HX-Request": "true"}), json=False)
                    _assert_clean_503(script.get("/api/experiments"), json=True)
                    _assert_clean_503(script.post("/api/experiments", json={"title": "During"}), json=True)
                health = browser.get("/healthz")
                assert health.status_code == 503 and health.json()["db"] == "down"
                assert all(leak not in health.text for leak in LEAKS)
                time.sleep(2)  # the scheduler ticks against the dead database meanwhile

                cluster.start()
                assert _wait_for(lambda: browser.get("/").status_code == 200, 30), "pages did not recover"
                assert _wait_for(lambda: script.get("/api/experiments").status_code == 200, 30)
                created = script.post("/api/experiments", json={"title": "After the restart"})
                assert created.status_code == 201
                assert browser.get("/healthz").json()["db"] == "ok"
                assert web.poll() is None and worker.poll() is None  # nobody was restarted
                assert {web.pid} | {int(p) for p in _children(web.pid)} == web_pids

            with app.app_context():
                experiment = experiments.get_experiment(created.json()["experiment"]["number"])
                # A question for the comment responder: a run whose text answer is its whole job
                # (a planner must leave questions or a plan, which a new idea cannot take yet).
                run = runs.create_run(kind="qa", agent="comment-responder", request="Is it still there?",
                                      scope_id=experiment.id)
                db.session.commit()
                run_id = run.id
                jobs.enqueue_run(run_id)

            def finished():
                with app.app_context():
                    db.session.remove()
                    return runs.get_run(run_id).status == "completed"
            assert _wait_for(finished, 30), "the worker did not run a job queued after the restart"
        with app.app_context():
            db.session.remove()
            db.engine.dispose()
    finally:
        for process in processes:
            stop_process_group(process)
        cluster.destroy()
        redis.Redis.from_url(redis_url).flushdb()  # our own test Redis database only


def _children(pid: int) -> list[str]:
    import psutil
    return [str(child.pid) for child in psutil.Process(pid).children()]
