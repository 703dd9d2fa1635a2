"""Local pods are started and stopped by the `local` queue's worker, whoever asks.

A local pod asked to stop by a process that may not stop it: in a deployment the scheduler
may tick in a `sagan-worker@` unit and the owner's Stop comes through the web, both as the
worker account; a local pod runs as the pod user, started by the `local` queue's worker as
root. Such a stop goes to that worker as a job: the pod shows as stopping meanwhile, the job
stops it, and the job run again does nothing. The asking process is real: a fork of the test
that drops to the worker account's uid before it asks, so the backend's own uid check (not a
switch) decides.

A plan asking a remote account first with `local` as its fallback is dispatched on `local`
too, or its fallback pod would be refused. Needs root, nftables and bubblewrap, like the
other local-pod tests.
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import tempfile
import time
import traceback
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import AgentRun, Pod, RunEvent, WorkflowEvent, db
from services.agents import toolbox, toolkit
from services.core.actors import Actor
from services.core.clock import utcnow
from services.dispatch import provisioner, tokens, watcher
from services.dispatch.backends import PodRequest, backend_for
from services.dispatch.backends import local as local_backend
from services.core.errors import Conflict
from services.workflow import experiments, jobs, lifecycle, runs
from tests.fakes.pod_receiver import PodReceiver
from tests.integration import test_dispatch as dispatch_tests
from tests.integration import test_toy_provider as toy_tests
from tests.integration.test_workers import run_one_job
from workers import runtime

WORKER_ACCOUNT = "sagan"
approved, toycloud, pod_spec = dispatch_tests.approved, toy_tests.toycloud, dispatch_tests.pod_spec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="local pods run as their own user only under root")


@pytest.fixture
def local_pods(app, monkeypatch):
    """Local pods on, in a folder of their own that the pod user may traverse."""
    folder = tempfile.mkdtemp(prefix="sagan-local-pods-", dir="/tmp")
    os.chmod(folder, 0o711)
    monkeypatch.setitem(app.config, "SAGAN_LOCAL_PODS", True)
    monkeypatch.setitem(app.config, "SAGAN_LOCAL_PODS_DIR", folder)
    monkeypatch.setitem(app.config, "SAGAN_LOCAL_POD_STOP_GRACE_SECONDS", 2)
    receiver = PodReceiver().start()
    runtime.set_app(app)  # the `local` worker below runs its jobs in this app
    yield receiver
    runtime.set_app(None)
    with app.app_context():
        backend = backend_for("local")
        for pod in backend.list_all(prefix=""):
            backend.terminate(pod.id)
    receiver.stop()
    shutil.rmtree(folder, ignore_errors=True)


def _running_pod(app, make_experiment, receiver) -> tuple[int, uuid.UUID, str]:
    """A local pod started as root (as the `local` worker does) and its row; (number, row id, name)."""
    number = make_experiment("Stopped from elsewhere", status="running")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        run = runs.create_run(kind="experiment", agent=provisioner.PROVISIONER, scope_id=experiment.id,
                              request="Dispatch.", status="waiting", pod_account="local")
        name = f"sagan-{number}-{run.id.hex[:8]}-0-1"
        _secret, digest = tokens.new_token()
        made = backend_for("local").create(PodRequest(
            name=name, image="local", args="sleep 600", gpu_id="cpu", gpu_count=0, cloud="SECURE", disk_gb=0,
            volume_gb=0, env={**receiver.env(), "SAGAN_KEEP_ALIVE_MINUTES": "0", "SAGAN_POD_NAME": name}))
        pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, run_index=0, attempt=1,
                  account="local", name=name, provider_pod_id=made.id, status="running", progress_token_hash=digest,
                  gpu_type_id="cpu", gpu_count=0, metadata_={})
        db.session.add(pod)
        db.session.commit()
        return number, pod.id, name


def _as_worker_account(app, ask) -> str:
    """Run `ask()` in a fork of this process that dropped to the worker account's uid (what a
    `sagan-worker@` unit or the web runs as), inside an app context; its answer, or its error."""
    account = pwd.getpwnam(WORKER_ACCOUNT)
    with app.app_context():
        backend_for("local")  # every backend module imported here: the child cannot read the source tree
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's result travels through the pipe
        os.close(read_end)
        answer = "error: nothing ran"
        try:
            os.setgroups([])
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            # Another process started the pods: this one has none of them as its children.
            local_backend._CHILDREN.clear()
            with app.app_context():
                db.engine.dispose(close=False)  # the parent's connections stay the parent's
                answer = f"uid={os.geteuid()} {ask()}"
                db.session.remove()
        except BaseException:  # noqa: BLE001 - everything goes back to the test
            answer = "error: " + traceback.format_exc()
        finally:
            os.write(write_end, answer.encode()[:60000])
            os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(child, 0)
    return b"".join(chunks).decode()


def _row(app, pod_id) -> Pod:
    with app.app_context():
        pod = db.session.get(Pod, pod_id)
        db.session.expunge(pod)
        return pod


def _process_runs(app, name) -> bool:
    with app.app_context():
        return backend_for("local").get(name).status == "RUNNING"


def test_the_owners_stop_from_the_worker_account_is_done_by_the_local_worker(
        app, owner, client, make_experiment, local_pods):
    """Asked from a process of the worker account, is the stop handed to the `local` queue
    (the pod untouched and shown as stopping), done by that queue's worker, and harmless
    when the job runs again?"""
    number, pod_id, name = _running_pod(app, make_experiment, local_pods)
    assert _process_runs(app, name)

    csrf = owner.csrf()

    def owners_stop():
        # The owner's Stop button, served by a web process of the worker account.
        response = client.post(f"/pods/{pod_id}/stop", data={"csrf_token": csrf})
        db.session.remove()
        return f"status={db.session.get(Pod, pod_id).status} {response.status_code} {response.location}"

    answer = _as_worker_account(app, owners_stop)
    assert answer.startswith(f"uid={pwd.getpwnam(WORKER_ACCOUNT).pw_uid} status=stop_requested 303"), answer
    assert "is+stopping" in answer or "is%20stopping" in answer, answer

    # Not stopped by the unprivileged process: the pod runs, its row says stopping, and the
    # stop waits on the `local` queue (its worker is the only one that may do it).
    assert _process_runs(app, name)
    assert _row(app, pod_id).status == "stop_requested"
    with app.app_context():
        queued = jobs.queue(jobs.LOCAL).job_ids
        assert provisioner.local_stop_job_id(pod_id) in queued
        assert jobs.queue(jobs.DISPATCH).job_ids == [] and jobs.queue(jobs.DEFAULT).job_ids == []
    page = client.get(f"/experiments/{number}").get_data(as_text=True)
    assert ">stopping<" in page

    run_one_job(app, jobs.LOCAL)
    stopped = _row(app, pod_id)
    assert stopped.status == "stopped" and stopped.stopped_at is not None and stopped.stop_reason == "owner"
    deadline = time.monotonic() + 10
    while _process_runs(app, name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _process_runs(app, name)
    with app.app_context():
        said = db.session.scalars(sa.select(RunEvent.body).where(RunEvent.run_id == stopped.agent_run_id,
                                                                 RunEvent.event_type == "pod_stopped")).all()
    assert said == [f"{name} stopped by this host's local worker; volume kept."]

    # The same job again (a retry, a second hand-off): nothing changes.
    with app.app_context():
        again = jobs.put(jobs.LOCAL, "workers.dispatch.settle_local_pod", (str(pod_id),))
    run_one_job(app, jobs.LOCAL)
    assert again.get_status(refresh=True) == "finished" and again.return_value() == "nothing to do"
    assert _row(app, pod_id).status == "stopped" and _row(app, pod_id).stopped_at == stopped.stopped_at


def test_a_scheduler_of_the_worker_account_hands_the_stop_on_again_and_the_root_one_stops_itself(
        app, make_experiment, local_pods):
    """A stop whose job was lost (Redis flushed): does the watcher's pass in a worker-account
    scheduler queue it again rather than fail it, and a scheduler running as root (`make run`)
    stop the pod itself with nothing queued?"""
    _number, pod_id, name = _running_pod(app, make_experiment, local_pods)
    with app.app_context():
        pod = db.session.get(Pod, pod_id)
        pod.status, pod.desired_status, pod.stop_reason = "stop_requested", "stopped", "cost_cap"
        db.session.commit()

    answer = _as_worker_account(app, lambda: f"checked={watcher.watch()['checked']}")
    assert "checked=1" in answer, answer
    assert _row(app, pod_id).status == "stop_requested" and _process_runs(app, name)
    with app.app_context():
        assert jobs.queue(jobs.LOCAL).job_ids == [provisioner.local_stop_job_id(pod_id)]
        jobs.queue(jobs.LOCAL).empty()  # lost

    with app.app_context():
        watcher.watch()  # this process is root: it may stop the pod itself
        assert jobs.queue(jobs.LOCAL).job_ids == []
    assert _row(app, pod_id).status == "stopped"
    assert not _process_runs(app, name)


def test_a_local_worker_that_is_not_root_says_so_rather_than_looping(app, make_experiment, local_pods):
    """The job run where it cannot stop the pod either (a local worker left unprivileged by
    mistake): does it say what is wrong on the pod and queue nothing again?"""
    _number, pod_id, name = _running_pod(app, make_experiment, local_pods)
    with app.app_context():
        pod = db.session.get(Pod, pod_id)
        pod.status, pod.desired_status, pod.stop_reason = "stop_requested", "stopped", "owner"
        db.session.commit()
    answer = _as_worker_account(app, lambda: watcher.settle_local_pod(pod_id))
    assert answer.endswith("cannot stop here"), answer
    pod = _row(app, pod_id)
    assert pod.status == "stop_requested" and "must run as root" in pod.last_error
    assert _process_runs(app, name)
    with app.app_context():
        assert jobs.queue(jobs.LOCAL).job_ids == []


# --- a plan that falls back from a remote account to this host ----------------------------------

def test_a_plan_falling_back_to_this_host_is_dispatched_by_the_local_worker(app, local_pods, toycloud, approved,
                                                                           monkeypatch):
    """A plan asking Toy Cloud first, with `local` as its account policy's fallback: is its
    dispatch queued on `local` (a worker on `dispatch` would be refused the local pod), and does
    that queue's worker, finding Toy Cloud full, start the pod here?"""
    monkeypatch.setitem(app.config, "SAGAN_BASE_URL", local_pods.url)
    toycloud.no_capacity("NVIDIA A100-SXM4-80GB")
    number = approved(pod_spec(substitution_policy={"account": {"allowed": ["toycloud", "local"]}},
                               dockerArgs="sleep 600"), account="toycloud")
    with app.app_context():
        run, effects = provisioner.launch(experiments.get_experiment(number), Actor("owner"))
        db.session.commit()
        run_id = run.id
        lifecycle.run_side_effects(effects)
        assert jobs.queue(jobs.LOCAL).job_ids == [provisioner.dispatch_job_id(run_id)]
        assert jobs.queue(jobs.DISPATCH).job_ids == []

    run_one_job(app, jobs.LOCAL)
    assert toycloud.count("create") == 1  # refused for capacity, then the fallback
    with app.app_context():
        pods = list(db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id).order_by(Pod.attempt)))
        assert [(p.account, p.status) for p in pods] == [("toycloud", "failed"), ("local", "running")], \
            [p.last_error for p in pods]
        assert experiments.get_experiment(number).status == "queued"
    assert _process_runs(app, pods[1].provider_pod_id)


def test_a_plan_asking_a_remote_account_alone_stays_on_the_dispatch_queue(app, toycloud, approved):
    """Without `local` among its accounts, the dispatch goes to `dispatch`, which never needs root."""
    number = approved(pod_spec(substitution_policy={"account": {"allowed": ["toycloud", "team"]}}),
                      account="toycloud")
    with app.app_context():
        run, _effects = provisioner.launch(experiments.get_experiment(number), Actor("owner"))
        db.session.commit()
        assert provisioner.dispatch_queue(run.id) == jobs.DISPATCH


def test_an_auto_approved_plan_never_falls_back_to_this_host(app, toycloud, approved):
    """An auto-approved plan never runs on the local backend: not when its account policy
    names `local` as a fallback either — refused at launch by anyone but the owner."""
    number = approved(pod_spec(substitution_policy={"account": {"allowed": ["toycloud", "local"]}}),
                      account="toycloud")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        experiment.auto_approve_plan = True
        db.session.commit()
        with pytest.raises(Conflict) as refused:
            provisioner.launch(experiment, Actor.system("orchestrator"))
        assert refused.value.code == "local_refused"
        db.session.rollback()
        assert provisioner.live_dispatch(experiment.id) is None


def test_a_stop_handed_off_while_redis_is_down_is_kept_and_queued_by_the_next_pass(app, make_experiment, local_pods,
                                                                                   monkeypatch):
    """Redis refuses connections when the hand-off commits: does the commit still hold (the
    pod `stop_requested`, no error for the caller), and the watcher's next pass queue it?"""
    _number, pod_id, name = _running_pod(app, make_experiment, local_pods)
    working = app.config["REDIS_URL"]
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{probe.getsockname()[1]}/0"

    def stop_without_redis():
        app.config["REDIS_URL"] = dead
        try:
            provisioner.stop_pod(db.session.get(Pod, pod_id), "owner")
            db.session.commit()
        finally:
            app.config["REDIS_URL"] = working
        return db.session.get(Pod, pod_id).status

    answer = _as_worker_account(app, stop_without_redis)
    assert answer.endswith("stop_requested"), answer
    assert _row(app, pod_id).status == "stop_requested" and _process_runs(app, name)
    with app.app_context():
        assert jobs.queue(jobs.LOCAL).job_ids == []
    assert "stop_requested" in _as_worker_account(app, lambda: f"{watcher.watch()} {db.session.get(Pod, pod_id).status}")
    with app.app_context():
        assert jobs.queue(jobs.LOCAL).job_ids == [provisioner.local_stop_job_id(pod_id)]
    run_one_job(app, jobs.LOCAL)
    assert _row(app, pod_id).status == "stopped" and not _process_runs(app, name)


def test_an_agents_stop_pods_from_the_agents_queue_says_the_pod_is_still_stopping(app, make_experiment, local_pods):
    """The orchestrator's `stop_pods` tool, run by an `agents` worker as `sagan`: does it tell
    the model the pod is still stopping (not "stopped"), and the local worker then stop it?"""
    number, pod_id, name = _running_pod(app, make_experiment, local_pods)

    def agents_stop():
        experiment = experiments.get_experiment(number)
        run = runs.create_run(kind="qa", agent="experiment-orchestrator", request="Stop.", scope_id=experiment.id)
        result = toolbox.call(toolkit.ToolContext(run, experiment), "stop_pods", {})
        db.session.commit()
        return result.content

    answer = _as_worker_account(app, agents_stop)
    assert answer.endswith("Stopped 0 pod(s); volumes kept. 1 still stopping (asked again until it holds)."), answer
    assert _process_runs(app, name)
    run_one_job(app, jobs.LOCAL)
    assert _row(app, pod_id).status == "stopped" and not _process_runs(app, name)


def test_a_failed_dispatch_says_its_local_pod_is_stopping_not_that_it_needs_a_hand(app, make_experiment, local_pods):
    """A dispatch failing in a worker-account scheduler stops its pods first: is its local pod
    named as stopping on the local worker, rather than "could not stop — stop them by hand"?"""
    number, pod_id, name = _running_pod(app, make_experiment, local_pods)

    def fail_it():
        pod = db.session.get(Pod, pod_id)
        stopped, unstopped = provisioner.stop_owned_pods(db.session.get(AgentRun, pod.agent_run_id), "pod_exit_nonzero")
        return f"stopped={len(stopped)} unstopped={len(unstopped)}"

    answer = _as_worker_account(app, fail_it)
    assert answer.endswith("stopped=0 unstopped=0"), answer  # neither: being stopped elsewhere
    with app.app_context():
        note = db.session.scalars(sa.select(WorkflowEvent.note).where(
            WorkflowEvent.entity_id == experiments.get_experiment(number).id,
            WorkflowEvent.note.like("Dispatch%failed%"))).one()
    assert f"stopping {name} on this host's local worker" in note and "by hand" not in note, note
    run_one_job(app, jobs.LOCAL)
    assert _row(app, pod_id).status == "stopped" and not _process_runs(app, name)


def test_retention_from_a_worker_account_scheduler_is_done_by_the_local_worker(app, make_experiment, local_pods):
    """A stopped local pod past SAGAN_POD_RETENTION_DAYS, seen by a scheduler running as
    `sagan` (which cannot remove root's folder): is its termination queued on `local`, and
    done there — the folder gone, the row terminated?"""
    _number, pod_id, name = _running_pod(app, make_experiment, local_pods)
    with app.app_context():
        backend_for("local").stop(name)
        pod = db.session.get(Pod, pod_id)
        days = app.config["POD_RETENTION_DAYS"]
        pod.status, pod.stopped_at = "stopped", utcnow() - timedelta(days=days, hours=1)
        db.session.commit()
    folder = Path(app.config["SAGAN_LOCAL_PODS_DIR"]) / name

    answer = _as_worker_account(app, lambda: f"{watcher.terminate_expired(utcnow())} {db.session.commit()}")
    assert answer.endswith("[] None"), answer  # nothing terminated by that process
    assert folder.is_dir() and _row(app, pod_id).status == "stopped"
    with app.app_context():
        assert jobs.queue(jobs.LOCAL).job_ids == [provisioner.local_stop_job_id(pod_id)]
    run_one_job(app, jobs.LOCAL)
    assert _row(app, pod_id).status == "terminated" and not folder.exists()


def test_orphans_a_worker_account_sweep_cannot_list_are_swept_by_the_local_worker(app, make_experiment, local_pods):
    """The orphan sweep of a scheduler running as `sagan` cannot list this host's pods (their
    folder is root's, 0711): does it queue the sweep on `local` rather than fail, and does that
    worker stop both a pod whose row ended and one no row names?"""
    _number, pod_id, name = _running_pod(app, make_experiment, local_pods)
    with app.app_context():
        pod = db.session.get(Pod, pod_id)
        pod.status, pod.stopped_at = "failed", utcnow()
        db.session.commit()
        unknown = "sagan-999-0000abcd-0-1"  # a pod the database does not know (a restored database)
        backend_for("local").create(PodRequest(
            name=unknown, image="local", args="sleep 600", gpu_id="cpu", gpu_count=0, cloud="SECURE", disk_gb=0,
            volume_gb=0, env={**local_pods.env(), "SAGAN_KEEP_ALIVE_MINUTES": "0", "SAGAN_POD_NAME": unknown}))

    answer = _as_worker_account(app, lambda: str(watcher.orphan_sweep()))
    assert answer.endswith("[]"), answer  # nothing stopped by that process, and no error
    assert _process_runs(app, name) and _process_runs(app, unknown)
    with app.app_context():
        assert jobs.queue(jobs.LOCAL).job_ids == [watcher.LOCAL_SWEEP_JOB_ID]
    run_one_job(app, jobs.LOCAL)
    assert not _process_runs(app, name) and not _process_runs(app, unknown)
    row = _row(app, pod_id)
    assert row.status == "failed" and row.stop_reason == "orphan"
