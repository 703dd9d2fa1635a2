"""Integration fixtures: a live HTTP server for clients that speak real HTTP (the CLI), and
a way to see the worker's fork wait for the scheduler."""
from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from werkzeug.serving import make_server

import serve
from models import Pod, db
from services.core.actors import Actor
from services.dispatch import tokens
from services.planning import approvals
from services.workflow import experiments, lifecycle, runs
# Two projects and members signed in through real invitations (SPEC §13).
from tests.integration.members_fixtures import member_client, two_projects  # noqa: F401
from tests.processes import stop_process_group
from tests.slow_clients import free_port
from workers import fork_guard

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def live_server(app):
    """The app served over real HTTP on a free loopback port for the test's duration."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_port}"
    yield server
    server.shutdown()
    thread.join(timeout=5)


@pytest.fixture
def fork_wait_seen():
    """An event set when the worker's fork guard logs that a fork waits for a scheduler tick."""
    seen = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record):
            if "fork waits" in record.getMessage():
                seen.set()

    handler = Watch()
    guard_log = logging.getLogger(fork_guard.__name__)
    guard_log.addHandler(handler)
    guard_log.setLevel(logging.INFO)
    yield seen
    guard_log.removeHandler(handler)
    guard_log.setLevel(logging.NOTSET)


@pytest.fixture
def make_planless_pending(app, make_experiment):
    """Factory: a card at plan_pending with no plan and no approval request (as the old demo
    data had), forced there by an override; returns its number."""
    def make(title: str = "Planless") -> int:
        number = make_experiment(title, status="planning")
        with app.app_context():
            lifecycle.transition(experiments.get_experiment(number), "plan_pending", Actor("owner"),
                                 note="Forced for the test.", override=True)
            db.session.commit()
        return number
    return make


@dataclass(frozen=True)
class LivePod:
    id: uuid.UUID
    secret: str        # its progress token, for Authorization: Bearer
    run_id: uuid.UUID  # the dispatch run it belongs to
    number: int        # its experiment's number


@pytest.fixture
def make_live_pod(app, make_experiment):
    """Factory: a running pod with its progress token, in a waiting dispatch run of an
    experiment at running (a new one titled `title`); `tag` goes into the pod's name."""
    def make(title: str = "Live pod", tag: str = "x") -> LivePod:
        number = make_experiment(title, status="running")
        with app.app_context():
            experiment = experiments.get_experiment(number)
            run = runs.create_run(kind="experiment", agent="provisioner", request="d", scope_id=experiment.id,
                                  status="waiting")
            secret, digest = tokens.new_token()
            pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                      name=f"sagan-{number}-{tag}-0-1", status="running", progress_token_hash=digest)
            db.session.add(pod)
            db.session.commit()
            return LivePod(pod.id, secret, run.id, number)
    return make


@pytest.fixture
def make_approved(app, make_experiment):
    """Factory: an experiment at `implementing` whose plan (`plan_markdown`, with its
    runpod-spec) the owner approved on `account`; returns its number, ready to launch."""
    def make(plan_markdown: str, *, title: str = "Dispatch me", account: str = "team",
             owner: Actor | None = None) -> int:
        owner = owner or Actor("owner")
        number = make_experiment(title, status="planning", pod_account=account)
        with app.app_context():
            experiment = experiments.get_experiment(number)
            submission = approvals.submit_plan(experiment, plan_markdown, owner, source="owner")
            assert submission.approval is not None, submission.problems
            approvals.approve(submission.approval, owner, confirm_unchecked=True)
            lifecycle.transition(experiment, "implementing", Actor.system())
            db.session.commit()
        return number
    return make


@pytest.fixture
def start_server(tmp_path):
    """Factory: the web server as deployed (serve.py: granian) serving `target`, with `env`
    added to this process's environment; returns its base URL once /healthz answers."""
    processes = []

    def start(target: str, *, workers: int = 1, threads: int = 2, **env) -> str:
        port = free_port()
        argv = serve.command(host="127.0.0.1", port=port, workers=workers, threads=threads, log_level="warning",
                             target=target)
        process = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "SAGAN_INSTANCE_DIR": str(tmp_path), **env},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        processes.append(process)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail("the web server exited at start: " + process.stderr.read().decode()[-2000:])
            try:
                httpx.get(f"{base}/healthz", timeout=2)
                return base
            except httpx.HTTPError:
                time.sleep(0.2)
        pytest.fail("the web server did not answer within 60 s")

    yield start
    for process in processes:
        stop_process_group(process)
