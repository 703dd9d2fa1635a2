"""Pod dispatch against the loopback fake RunPod v2 server, with the injectable clock:
substitution, lookup-by-name after a 5xx, partial dispatch, one dispatch per experiment,
spec drift, vanish and fleet incidents, exits, crash loops, keep-alive, orphans, caps."""
from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import AgentRun, Experiment, FleetIncident, Pod, RunEvent, WorkflowEvent, db
from services.core import clock
from services.core.actors import Actor
from services.core.errors import Conflict
from services.dispatch import pod_logs, provisioner, recovery, watcher
from services.workflow import experiments, parking
from tests.fakes.runpod_server import FakeRunPod

OWNER = Actor("owner", "owner-1", "Owner")
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def plan_with(spec) -> str:
    sections = "\n\n".join(f"## {t}\n{t} text." for t in (
        "Goal", "Hypothesis", "Prediction", "Kill Criterion", "Experimental Setup", "Compute and Hardware",
        "Artifacts", "Verification", "Risks and Red Team", "Likely Clean Result"))
    return f"{sections}\n\n## Approval Checklist\n- [x] ok\n\n```runpod-spec\n{json.dumps(spec)}\n```\n"


def pod_spec(name="p", gpu="A100", **extra) -> dict:
    return {"name": name, "gpuType": gpu, "gpuCount": 1, "volumeGb": 10, "containerDiskGb": 10,
            "cloudType": "SECURE", "estimatedMinutes": 60, "dockerArgs": "bash -lc 'python train.py'",
            "config": {"artifacts": ["/workspace/sagan-artifacts/metrics.json"]}, **extra}


@pytest.fixture
def runpod(app, monkeypatch):
    """The fake RunPod; the app's real client points at it, and the listing lag is waited on its clock."""
    with FakeRunPod() as fake:
        monkeypatch.setitem(app.config, "RUNPOD_API_URL", fake.url)
        monkeypatch.setitem(app.config, "RUNPOD_API_KEY_TEAM", fake.team_key)
        monkeypatch.setitem(app.config, "RUNPOD_TEAM_ID", fake.team_id)
        monkeypatch.setitem(app.config, "RUNPOD_API_KEY_PERSONAL", fake.personal_key)
        monkeypatch.setattr(provisioner, "sleep", fake.advance)
        yield fake


@pytest.fixture
def approved(make_approved):
    """Factory: an experiment at `implementing` with an approved spec; returns its number."""
    def make(spec, title="Dispatch me", account="team"):
        return make_approved(plan_with(spec), title=title, account=account, owner=OWNER)
    return make


def dispatch(app, number):
    """Launch and run the saga in-process; returns the dispatch run id."""
    with app.app_context():
        run, _ = provisioner.launch(experiments.get_experiment(number), OWNER)
        db.session.commit()
        run_id = run.id
        provisioner.run_dispatch(run_id)
        return run_id


def notes(experiment_id):
    return [e.note for e in db.session.scalars(sa.select(WorkflowEvent).where(
        WorkflowEvent.entity_id == experiment_id).order_by(WorkflowEvent.created_at))]


def run_events(run_id, kind):
    from models import RunEvent
    return [e.body for e in db.session.scalars(sa.select(RunEvent).where(
        RunEvent.run_id == run_id, RunEvent.event_type == kind).order_by(RunEvent.seq))]


def test_substitution_to_second_gpu_after_capacity_error(app, runpod, approved):
    """A100 has no capacity: the next allowed GPU (H100) is used and the substitution recorded."""
    runpod.no_capacity(A100)
    number = approved(pod_spec(substitution_policy={"gpuType": {"allowed": ["A100", "H100"]}}))
    run_id = dispatch(app, number)
    with app.app_context():
        pods = list(db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id).order_by(Pod.attempt)))
        assert [(p.gpu_type_id, p.status) for p in pods] == [(A100, "failed"), (H100, "deploying")]
        assert "asked 1× A100 on SECURE (team), trying 1× H100" in run_events(run_id, "pod_substitution")[0]
        assert experiments.get_experiment(number).status == "queued"
        assert run_events(run_id, "deploy_completed") == ["dispatched 1/1 pod(s)"]
        assert "RunPod pod dispatched; waiting for runtime." in notes(experiments.get_experiment(number).id)


def test_5xx_after_create_is_found_by_name_not_created_twice(app, runpod, approved):
    """The provider made the pod and answered 500: the saga waits out the lag and adopts it."""
    runpod.fail_after_create(1)
    runpod.listing_lag = 20
    number = approved(pod_spec())
    run_id = dispatch(app, number)
    assert len(runpod.pods) == 1 and len(runpod.requests_to("POST", "/v2/pods")) == 1
    with app.app_context():
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        assert pod.provider_pod_id == next(iter(runpod.pods)) and pod.attempt == 1


def test_a_pod_whose_container_never_started_shows_the_hosts_lines_after_the_failure(app, runpod, approved):
    """The image cannot be pulled: the pod never leaves STARTING and RunPod has only its host's system
    lines. The start deadline fails the dispatch and stops the pod (not terminated); does
    read_pod_logs then show those system lines, labelled, which is what this crash needs?"""
    runpod.starting_seconds = 10 ** 6
    number = approved(pod_spec())
    run_id = dispatch(app, number)
    runpod.advance(60)
    with app.app_context():
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        runpod.add_log(pod.provider_pod_id, "Pulling image runpod/pytorch:2.4.0", source="system")
        runpod.add_log(pod.provider_pod_id, "failed to pull image: no space left on device", source="system")
        clock.advance(timedelta(seconds=app.config["POD_START_DEADLINE_SECONDS"] + 60))
        watcher.watch()
        db.session.refresh(pod)
        assert db.session.get(AgentRun, run_id).failure_reason == "start_deadline"
        assert pod.status == "stopped" and runpod.status_of(pod.provider_pod_id) == "EXITED"
        log = pod_logs.read_pod_logs(pod)
    assert log.source == "runpod" and log.lines == 2
    assert "[system] failed to pull image: no space left on device" in log.text
    assert "the container has printed nothing" in log.render()


def test_partial_array_dispatch_stops_survivors_with_exact_note(app, runpod, approved):
    """Pod 2 of 2 cannot be created anywhere: pod 1 is stopped, the note is exact, nothing retries."""
    runpod.no_capacity(H100)
    number = approved([pod_spec("a", "A100"), pod_spec("b", "H100")])
    run_id = dispatch(app, number)
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        assert notes(experiment.id)[-1] == (
            "Partial RunPod dispatch: 1/2 pods came up. Survivors were stopped because the plan was designed "
            "around 2 partitions and proceeding with fewer would corrupt the result. Re-approve the plan to retry.")
        survivor = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id, Pod.run_index == 0))
        assert survivor.status == "stopped" and survivor.stop_reason == "failure"
        assert runpod.status_of(survivor.provider_pod_id) == "EXITED"
        run = db.session.get(AgentRun, run_id)
        assert run.failure_reason == "partial_dispatch"
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.resumes_run_id == run_id)) == 0


def test_concurrent_dispatch_requests_make_exactly_one(app, runpod, approved):
    """Two requests at once (a manual dispatch and a recovery): one wins, the other gets 409."""
    number = approved(pod_spec())
    barrier, outcomes = threading.Barrier(2), []

    def request():
        with app.app_context():
            experiment = experiments.get_experiment(number)
            barrier.wait()
            try:
                provisioner.launch(experiment, OWNER)
                db.session.commit()
                outcomes.append("launched")
            except Conflict as exc:
                db.session.rollback()
                outcomes.append(exc.code)
            finally:
                db.session.remove()

    threads = [threading.Thread(target=request) for _ in range(2)]
    [t.start() for t in threads]
    [t.join(20) for t in threads]
    assert sorted(outcomes) == ["dispatch_active", "launched"]
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.kind == "experiment")) == 1


def test_spec_changed_after_approval_is_refused(app, runpod, approved):
    """Only branch/commit env may change without re-approval; anything else refuses dispatch."""
    number = approved(pod_spec())
    with app.app_context():
        experiment = experiments.get_experiment(number)
        db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id).values(
            pod_spec={**experiment.pod_spec, "gpuCount": 8}))
        db.session.commit()
        with pytest.raises(Conflict) as refused:
            provisioner.launch(experiments.get_experiment(number), OWNER)
        assert refused.value.code == "spec_changed"
        db.session.rollback()
        spliced = {**pod_spec(), "env": {"SAGAN_GIT_COMMIT": "abc123"}}
        db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id).values(pod_spec=spliced))
        db.session.commit()
        run, _ = provisioner.launch(experiments.get_experiment(number), OWNER)
        assert run is not None


def _running(app, runpod, number):
    run_id = dispatch(app, number)
    runpod.advance(120)
    with app.app_context():
        watcher.watch()
    return run_id


def test_vanish_is_rechecked_then_declared(app, runpod, approved):
    """A pod missing from the provider is checked three times over two minutes before `vanished`."""
    number = approved(pod_spec())
    run_id = _running(app, runpod, number)
    with app.app_context():
        assert experiments.get_experiment(number).status == "running"
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        runpod.vanish(pod.provider_pod_id)
        for minute in range(3):
            clock.advance(timedelta(minutes=1))
            watcher.watch()
            db.session.refresh(pod)
            assert pod.status == ("vanished" if minute == 2 else "running")
        run = db.session.get(AgentRun, run_id)
        assert run.failure_reason == "pod_vanished"
        assert experiments.get_experiment(number).status == "blocked"


def test_two_experiments_vanishing_open_a_fleet_incident(app, runpod, approved):
    """Vanishes in two experiments within 5 minutes: incident open, dispatch and recovery paused."""
    first, second, third = (approved(pod_spec(), title=f"E{i}") for i in range(3))
    runs_ = [_running(app, runpod, n) for n in (first, second)]
    runpod.add_pod("notebook-of-a-colleague", status="RUNNING")  # the account still lists pods: real vanishes
    with app.app_context():
        for run_id in runs_:
            runpod.vanish(db.session.scalar(sa.select(Pod.provider_pod_id).where(Pod.agent_run_id == run_id)))
        for _ in range(3):
            clock.advance(timedelta(minutes=1))
            watcher.watch()
        incident = db.session.scalar(sa.select(FleetIncident))
        assert incident is not None and len(incident.pods) == 2 and incident.resolved_at is None
        assert recovery.fleet_incident_open()
        run, effects = provisioner.launch(experiments.get_experiment(third), OWNER)
        db.session.commit()
        assert run is None and experiments.get_experiment(third).status == "gate_pending"
        watcher.resolve_incident(incident, OWNER)
        db.session.commit()
        assert not recovery.fleet_incident_open()


def test_non_zero_exit_wakes_the_orchestrator_at_once(app, runpod, approved, client):
    """One pod posts exitCode 1: the dispatch fails pod_exit_nonzero and the waiting parent is woken."""
    number = approved([pod_spec("a"), pod_spec("b")])
    with app.app_context():
        from services.workflow import runs
        experiment = experiments.get_experiment(number)
        parent = runs.create_run(kind="apply", agent="experiment-orchestrator", request="Go.",
                                 scope_id=experiment.id, status="waiting")
        run, _ = provisioner.launch(experiment, OWNER, parent_run_id=parent.id)
        parent.waiting_for = {"pods": str(run.id)}
        db.session.commit()
        run_id, parent_id = run.id, parent.id
        provisioner.run_dispatch(run_id)
    token = runpod.requests_to("POST")[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    response = client.post("/api/progress", headers={"Authorization": f"Bearer {token}"}, json={
        "progressPct": 0, "exitCode": 1, "seq": 9,
        "message": "experiment exited with code 1 · err: CUDA out of memory"})
    assert response.status_code == 200
    with app.app_context():
        run = db.session.get(AgentRun, run_id)
        assert run.status == "failed" and run.failure_reason == "pod_exit_nonzero"
        assert "CUDA out of memory" in run.last_error
        assert parking.ready_to_wake(db.session.get(AgentRun, parent_id))


def test_crash_loop_stops_pods_and_blocks_with_stderr(app, runpod, approved, client):
    """Three `bootstrap complete` posts in ten minutes: pods stopped, experiment blocked with the tail."""
    number = approved(pod_spec())
    run_id = _running(app, runpod, number)
    token = runpod.requests_to("POST")[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    auth = {"Authorization": f"Bearer {token}"}
    client.post("/api/progress", headers=auth, json={"progressPct": 0, "seq": 1,
                                                     "message": "exited with code 2 · err: ImportError: no module x"})
    for seq in (2, 3, 4):
        client.post("/api/progress", headers=auth, json={"progressPct": 5, "seq": seq, "milestone": "bootstrap",
                                                         "message": "bootstrap complete on branch main"})
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        assert "Crash loop" in notes(experiment.id)[-1] and "ImportError: no module x" in notes(experiment.id)[-1]
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        assert pod.status == "stopped"
        assert db.session.get(AgentRun, run_id).failure_reason == "crash_loop"


def test_finished_pods_stop_after_keep_alive_and_uploads_are_verified(app, runpod, approved, client):
    """Exit 0: the system moves on (uploading → verifying → interpreting); after keep-alive the pod stops."""
    number = approved(pod_spec(keepAliveMinutes=10))
    run_id = _running(app, runpod, number)
    token = runpod.requests_to("POST")[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    auth = {"Authorization": f"Bearer {token}"}
    upload = client.post("/api/artifacts", data=b'{"accuracy": 0.91}',
                         headers={**auth, "X-Sagan-Artifact-Name": "metrics.json", "Content-Type": "application/json"})
    assert upload.status_code == 201
    client.post("/api/progress", headers=auth, json={"progressPct": 100, "seq": 50, "exitCode": 0,
                                                     "message": "experiment finished"})
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "interpreting"
        verification = db.session.scalar(sa.select(WorkflowEvent).where(
            WorkflowEvent.marker == "epm:upload-verification"))
        assert verification.metadata_["table"]["missing"] == []
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        runpod.exit_pod(pod.provider_pod_id)
        watcher.watch()
        db.session.refresh(pod)
        assert pod.status == "exited"
        clock.advance(timedelta(minutes=11))
        watcher.watch()
        db.session.refresh(pod)
        assert pod.status == "stopped" and pod.stop_reason == "completed"


def test_a_dispatch_finished_by_its_last_post_is_left_alone_by_a_watcher_that_saw_it_too(app, runpod, approved, client):
    """The watcher read the run and the experiment; before it acts, the pod's exit-0 post
    finishes the dispatch in another request. The watcher's late finish must do nothing
    (it raised a stale-status conflict that aborted the rest of its pass)."""
    number = approved(pod_spec())
    run_id = _running(app, runpod, number)
    token = runpod.requests_to("POST")[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    with app.app_context():
        run = db.session.get(AgentRun, run_id)  # the watcher's view, read before the post lands
        experiment = db.session.get(Experiment, run.scope_id)
        assert (run.status, experiment.status) == ("waiting", "running")
        posted = client.post("/api/progress", headers={"Authorization": f"Bearer {token}"},
                             json={"progressPct": 100, "seq": 50, "exitCode": 0, "message": "experiment finished"})
        assert posted.status_code in (200, 201, 202)
        watcher._dispatch_finished(run, experiment)  # stale objects: must not raise or move anything
        db.session.commit()
        moves = db.session.scalars(sa.select(WorkflowEvent.to_status).where(
            WorkflowEvent.experiment_id == experiment.id, WorkflowEvent.to_status == "uploading")).all()
        assert moves == ["uploading"]
        finished = db.session.scalars(sa.select(sa.func.count()).select_from(RunEvent).where(
            RunEvent.run_id == run_id, RunEvent.event_type == "completed")).one()
        assert finished == 1
        assert db.session.get(AgentRun, run_id).status == "completed"


@pytest.mark.parametrize("answered", ["before the stop", "after the stop"])
def test_a_pod_stopped_while_the_watcher_asks_the_provider_stays_stopped(app, runpod, approved, client, monkeypatch,
                                                                        answered):
    """The watcher read the pod as running and asked the provider; meanwhile a crash-loop post
    stopped the pod in another request. The watcher's answer — RUNNING from before the stop,
    or EXITED from after it — must not overwrite `stopped` (it wrote `exited`, or `running`,
    over it: the stopped pod was shown as live and the journey test failed on it)."""
    number = approved(pod_spec())
    run_id = _running(app, runpod, number)
    token = runpod.requests_to("POST")[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    auth = {"Authorization": f"Bearer {token}"}
    real_backend_for = watcher.backend_for

    class StoppedMeanwhile:
        """The provider client, with a crash loop landing while the watcher waits for its answer."""

        def __init__(self, backend):
            self.backend = backend

        def __getattr__(self, name):
            return getattr(self.backend, name)

        def get(self, provider_pod_id):
            before = self.backend.get(provider_pod_id)
            # Another thread, so the posts run in a request (and database session) of their
            # own, as they do on the server, not in the watcher's.
            statuses = []
            poster = threading.Thread(target=lambda: statuses.extend(client.post("/api/progress", headers=auth, json={
                "progressPct": 5, "seq": seq, "milestone": "bootstrap",
                "message": "bootstrap complete on branch main · err: ImportError: no module x"}).status_code
                for seq in (1, 2, 3)))
            poster.start()
            poster.join()
            assert statuses == [200, 200, 200]
            return before if answered == "before the stop" else self.backend.get(provider_pod_id)

    monkeypatch.setattr(watcher, "backend_for", lambda account: StoppedMeanwhile(real_backend_for(account)))
    with app.app_context():
        clock.advance(timedelta(minutes=1))
        watcher.watch()
        db.session.expire_all()
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        assert (pod.status, pod.stop_reason) == ("stopped", "failure")
        assert db.session.get(AgentRun, run_id).failure_reason == "crash_loop"


def test_missing_artifacts_block_with_the_table(app, runpod, approved, client):
    """A declared artifact that never arrived blocks the experiment with the verification table."""
    number = approved(pod_spec())
    _running(app, runpod, number)
    token = runpod.requests_to("POST")[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    client.post("/api/progress", headers={"Authorization": f"Bearer {token}"},
                json={"progressPct": 100, "seq": 1, "exitCode": 0, "message": "experiment finished"})
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        assert "missing /workspace/sagan-artifacts/metrics.json" in notes(experiment.id)[-1]


def test_orphan_sweep_stops_unknown_sagan_pods(app, runpod):
    """A `sagan-*` pod no row knows is stopped; other pods are left alone."""
    orphan = runpod.add_pod("sagan-999-deadbeef-0-1", status="RUNNING")
    other = runpod.add_pod("someone-elses-pod", status="RUNNING")
    with app.app_context():
        assert watcher.orphan_sweep() == ["sagan-999-deadbeef-0-1"]
    assert runpod.status_of(orphan) == "EXITED" and runpod.status_of(other) == "RUNNING"


def test_cost_cap_stops_pods_and_blocks_with_figures(app, runpod, approved):
    """Spend over the cap stops the pods (cost_cap) and blocks with the figures."""
    number = approved(pod_spec())
    run_id = _running(app, runpod, number)
    with app.app_context():
        experiment = experiments.get_experiment(number)
        experiment.cost_cap_usd = 0.5
        db.session.commit()
        runpod.advance(3600)  # an hour at the fake's $1.89/h
        watcher.watch()
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        assert pod.status == "stopped" and pod.stop_reason == "cost_cap"
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked" and "Cost cap reached: spent $" in notes(experiment.id)[-1]


def test_owner_stop_keeps_volume_and_blocks(app, runpod, approved, client, owner):
    """The Stop button: pod stopped, experiment blocked with the exact note and who stopped it."""
    number = approved(pod_spec())
    run_id = _running(app, runpod, number)
    with app.app_context():
        pod_id = db.session.scalar(sa.select(Pod.id).where(Pod.agent_run_id == run_id))
    page = client.get(f"/experiments/{number}")
    assert f'action="/pods/{pod_id}/stop" data-confirm="Stop sagan-{number}-' in page.text
    response = client.post(f"/pods/{pod_id}/stop", data={"csrf_token": owner.csrf()})
    assert response.status_code == 303
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        assert notes(experiment.id)[-1].startswith("RunPod pod stopped; volume preserved. Stopped by")
        assert db.session.get(Pod, pod_id).stop_reason == "owner"


def test_pods_api_and_cli(app, runpod, approved, live_server, api_client):
    """launch-pods (dispatch scope), a second launch is 409 naming the live dispatch; pods lists them;
    the CLI's launch-pod and pods speak the same API."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    number = approved(pod_spec())
    reader = api_client("read")
    assert reader.post(f"/api/experiments/{number}/launch-pods").status_code == 403
    dispatcher = api_client("read,dispatch")
    cli = Path(__file__).resolve().parents[2] / "scripts" / "sagan_state.py"
    env = {**os.environ, "SAGAN_BASE_URL": live_server.url, "SAGAN_API_TOKEN": dispatcher.secret}
    out = subprocess.run([sys.executable, "-I", str(cli), "launch-pod", str(number)], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0 and "queued" in out.stdout, out.stderr
    again = dispatcher.post(f"/api/experiments/{number}/launch-pods")
    assert again.status_code == 409 and again.get_json()["error"] == "dispatch_active"
    with app.app_context():
        run = provisioner.live_dispatch(experiments.get_experiment(number).id)
        provisioner.run_dispatch(run.id)
    pods = reader.get(f"/api/experiments/{number}/pods").get_json()["pods"]
    assert len(pods) == 1 and pods[0]["status"] == "deploying" and pods[0]["account"] == "team"
    with app.app_context():  # the owner's adjusted rate is what the pod costs, as everywhere else
        pod = db.session.scalar(sa.select(Pod).where(Pod.experiment_id == experiments.get_experiment(number).id))
        pod.cost_per_hr, pod.adjusted_cost_per_hr, pod.uptime_seconds = 2.0, 1.5, 3600
        db.session.commit()
    assert reader.get(f"/api/experiments/{number}/pods").get_json()["pods"][0]["spendUsd"] == 1.5
    listed = subprocess.run([sys.executable, "-I", str(cli), "pods", str(number)], capture_output=True, text=True,
                            env=env, timeout=60)
    assert listed.returncode == 0 and json.loads(listed.stdout)["pods"][0]["name"].startswith(f"sagan-{number}-")
    assert reader.get("/api/experiments/99999/pods").status_code == 404
    assert dispatcher.post("/api/pods/not-a-uuid/stop").status_code == 404


def test_pods_that_finish_between_two_polls_still_count_as_having_run(app, runpod, approved, client):
    """A fast pod exits before the watcher ever sees it running: the experiment still goes
    queued → running → uploading → verifying, not stuck at queued."""
    number = approved(pod_spec())
    dispatch(app, number)
    token = runpod.requests_to("POST")[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    auth = {"Authorization": f"Bearer {token}"}
    client.post("/api/artifacts", data=b'{"a": 1}', headers={**auth, "X-Sagan-Artifact-Name": "metrics.json",
                                                             "Content-Type": "application/json"})
    client.post("/api/progress", headers=auth, json={"progressPct": 100, "seq": 1, "exitCode": 0,
                                                     "message": "experiment finished"})
    with app.app_context():
        experiment = experiments.get_experiment(number)
        moves = [e.to_status for e in db.session.scalars(sa.select(WorkflowEvent).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed")
            .order_by(WorkflowEvent.created_at))]
        assert moves[-5:] == ["queued", "running", "uploading", "verifying", "interpreting"]


def test_a_pod_keeps_its_commit_and_the_specs_env_as_its_configuration(app, runpod, approved):
    """Does each created pod remember the commit it checks out and its spec's own env
    (seed, learning rate) as the configuration its chart lines are grouped by?"""
    number = approved(pod_spec(env={"SEED": "7", "LR": "3e-4", "SAGAN_GIT_COMMIT": "abc1234def"}))
    run_id = dispatch(app, number)
    with app.app_context():
        pod = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id))
        assert pod.metadata_["config"] == {"seed": 7, "lr": 0.0003}
        assert pod.metadata_["commit"] == "abc1234def"
