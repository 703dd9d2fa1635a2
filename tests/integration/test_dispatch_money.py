"""Pods never bill for nothing, against the loopback RunPod
fake with its vanish, exit, restart-after-exit, capacity and empty-listing scenarios: a
failed dispatch stops every pod it owns before anything else, keep-alive ends with our stop
(never a restarted container), stopped pods are terminated after the retention period, an
empty account listing is an incident rather than a wave of vanishes, and unknown prices
never count as $0."""
from __future__ import annotations

import base64
import subprocess
from datetime import timedelta

import sqlalchemy as sa

from models import AgentRun, FleetIncident, Pod, db
from services.core import clock, redis_store
from services.dispatch import provisioner, watcher
from services.workflow import experiments, runs
from tests.integration import test_dispatch as base
from tests.integration.test_dispatch import H100, dispatch, notes, pod_spec, run_events

# The fake RunPod and the approved-experiment factory of the dispatch tests, shared as fixtures.
runpod = base.runpod
approved = base.approved


def creates(fake):
    return [r for r in fake.requests_to("POST") if r.path.rstrip("/") == "/v2/pods"]


def stops(fake):
    return [r for r in fake.requests_to("POST") if r.path.endswith("/action") and (r.body or {}).get("action") == "stop"]


def running_dispatch(app, runpod, number):
    run_id = dispatch(app, number)
    runpod.advance(120)
    with app.app_context():
        watcher.watch()
    return run_id


def pods_of(run_id):
    return list(db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id).order_by(Pod.run_index)))


def test_one_pod_of_two_vanishing_stops_the_other_in_the_same_pass(app, runpod, approved):
    """The measured incident: pod a vanishes; in the pass that declares it, pod b is stopped (volume
    kept), the timeline names it, and no pod is created anywhere."""
    number = approved([pod_spec("a"), pod_spec("b")])
    run_id = running_dispatch(app, runpod, number)
    runpod.add_pod("notebook-of-a-colleague", status="RUNNING")  # the account still lists pods
    with app.app_context():
        first, second = pods_of(run_id)
        runpod.vanish(first.provider_pod_id)
        made = len(creates(runpod))
        for minute in range(3):
            clock.advance(timedelta(minutes=1))
            watcher.watch()
            if minute < 2:
                assert runpod.status_of(second.provider_pod_id) == "RUNNING"
        db.session.refresh(first)
        db.session.refresh(second)
        assert first.status == "vanished"
        assert second.status == "stopped" and second.stop_reason == "failure"
        assert runpod.status_of(second.provider_pod_id) == "EXITED"  # stopped: the volume is kept
        assert [r.path for r in stops(runpod)] == [f"/v2/pods/{second.provider_pod_id}/action"]
        assert db.session.get(AgentRun, run_id).failure_reason == "pod_vanished"
        experiment = experiments.get_experiment(number)
        stopped_note = next(n for n in notes(experiment.id) if n and "failed (pod_vanished)" in n)
        assert f"stopped {second.name} (volumes kept)" in stopped_note
        assert len(creates(runpod)) == made


def test_no_new_pod_is_created_while_an_earlier_pod_may_still_bill(app, runpod, approved, client, monkeypatch):
    """A failed dispatch whose stops the provider refused: the next saga stops the leftovers first,
    and while one cannot be stopped it creates nothing and says which pod is in the way."""
    monkeypatch.setitem(app.config, "RUNPOD_MAX_RETRIES", 0)
    number = approved([pod_spec("a"), pod_spec("b")])
    run_id = running_dispatch(app, runpod, number)
    token = creates(runpod)[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    runpod.fail_next(2, status=503, method="POST")  # both stop calls fail
    client.post("/api/progress", headers={"Authorization": f"Bearer {token}"},
                json={"progressPct": 0, "seq": 3, "exitCode": 1, "message": "experiment exited with code 1"})
    with app.app_context():
        first, second = pods_of(run_id)
        assert {first.status, second.status} == {"stop_requested"}
        experiment = experiments.get_experiment(number)
        assert any(f"could not stop {first.name}, {second.name}" in (n or "") for n in notes(experiment.id))
        made = len(creates(runpod))

        def another_dispatch():
            run = runs.create_run(kind="experiment", agent=provisioner.PROVISIONER, scope_id=experiment.id,
                                  request="again", pod_account="team")
            db.session.commit()
            provisioner.run_dispatch(run.id)
            return db.session.get(AgentRun, run.id)

        runpod.fail_next(1, status=503, method="POST")  # pod a's stop fails once more
        blocked = another_dispatch()
        assert blocked.status == "failed" and first.name in blocked.last_error
        assert "No new pod was created" in blocked.last_error
        assert len(creates(runpod)) == made
        db.session.refresh(second)
        assert second.status == "stopped"  # what could be stopped was
        third = another_dispatch()
        db.session.refresh(first)
        assert first.status == "stopped" and runpod.status_of(first.provider_pod_id) == "EXITED"
        assert third.status == "waiting" and len(creates(runpod)) == made + 2


def test_a_finished_pod_is_stopped_at_the_end_of_keep_alive_not_restarted(app, runpod, approved, client):
    """The script reported exit 0 and the container waits (RunPod still says RUNNING, and would
    restart a container that exited): the pod is `exited` for Sagan, and at the end of keep-alive
    the watcher stops it — its container is never started again."""
    runpod.restart_on_exit = True
    number = approved(pod_spec(keepAliveMinutes=10))
    run_id = running_dispatch(app, runpod, number)
    token = creates(runpod)[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    auth = {"Authorization": f"Bearer {token}"}
    client.post("/api/artifacts", data=b'{"accuracy": 0.9}',
                headers={**auth, "X-Sagan-Artifact-Name": "metrics.json", "Content-Type": "application/json"})
    client.post("/api/progress", headers=auth, json={"progressPct": 100, "seq": 9, "exitCode": 0,
                                                     "message": "experiment finished"})
    with app.app_context():
        (pod,) = pods_of(run_id)
        clock.advance(timedelta(minutes=5))
        runpod.advance(300)
        watcher.watch()
        db.session.refresh(pod)
        assert pod.status == "exited" and runpod.status_of(pod.provider_pod_id) == "RUNNING"
        clock.advance(timedelta(minutes=6))
        runpod.advance(360)
        watcher.watch()
        db.session.refresh(pod)
        assert pod.status == "stopped" and pod.stop_reason == "completed"
        assert runpod.status_of(pod.provider_pod_id) == "EXITED"
        runpod.advance(3600)
        assert runpod.status_of(pod.provider_pod_id) == "EXITED" and runpod.pods[pod.provider_pod_id].restarts == 0


def test_the_fake_restarts_a_container_that_exits_by_itself(runpod):
    """The scenario the bootstrap's wait exists for: an exited container starts again (a stop does not)."""
    runpod.restart_on_exit = True
    pod_id = runpod.add_pod("sagan-1-00000000-0-1", status="RUNNING")
    runpod.exit_pod(pod_id)
    assert runpod.status_of(pod_id) == "PROVISIONING" and runpod.pods[pod_id].restarts == 1


def test_a_stopped_pod_is_terminated_after_the_retention_period(app, runpod, approved, client, owner, monkeypatch):
    """Stopped pods' volumes bill: a day before SAGAN_POD_RETENTION_DAYS the card warns, then the
    pod is terminated with a timeline note."""
    monkeypatch.setitem(app.config, "POD_RETENTION_DAYS", 3)
    number = approved(pod_spec())
    run_id = running_dispatch(app, runpod, number)
    with app.app_context():
        (pod,) = pods_of(run_id)
        provisioner.stop_pod(pod, "owner")
        db.session.commit()
        pod_id, provider_id = pod.id, pod.provider_pod_id
        clock.advance(timedelta(days=1, hours=23))
        watcher.watch()
    page = client.get(f"/experiments/{number}")
    assert "Its volume is terminated at" not in page.text
    with app.app_context():
        clock.advance(timedelta(hours=2))
        watcher.watch()
        assert db.session.get(Pod, pod_id).status == "stopped"
    page = client.get(f"/experiments/{number}")
    assert "Its volume is terminated at" in page.text and "SAGAN_POD_RETENTION_DAYS=3" in page.text
    with app.app_context():
        clock.advance(timedelta(days=1))
        watcher.watch()
        assert db.session.get(Pod, pod_id).status == "terminated"
        assert runpod.status_of(provider_id) == "TERMINATED"
        experiment = experiments.get_experiment(number)
        assert any("terminated after 3 day(s) stopped" in (n or "") for n in notes(experiment.id))
        assert run_events(run_id, "pod_terminated")


def test_an_empty_listing_for_the_whole_account_is_a_fleet_incident_not_vanishes(app, runpod, approved):
    """Every pod answers 404 and the account lists nothing (a key in the wrong scope, an outage):
    a fleet incident names the account; no pod is declared vanished and nothing is recovered."""
    number = approved([pod_spec("a"), pod_spec("b")])
    run_id = running_dispatch(app, runpod, number)
    with app.app_context():
        runpod.scope_outage("team")
        for _ in range(4):
            clock.advance(timedelta(minutes=1))
            watcher.watch()
        assert [p.status for p in pods_of(run_id)] == ["running", "running"]
        incident = db.session.scalar(sa.select(FleetIncident).where(FleetIncident.resolved_at.is_(None)))
        assert incident is not None and incident.pods[0]["reason"] == "empty_listing"
        assert incident.pods[0]["account"] == "team"
        run = db.session.get(AgentRun, run_id)
        assert run.status == "waiting" and run.failure_reason is None
        runpod.scope_outage("team", on=False)
        clock.advance(timedelta(minutes=1))
        watcher.watch()
        assert all(p.last_checked_at is not None and not (p.metadata_ or {}).get("missing_checks")
                   for p in pods_of(run_id))


def test_the_watcher_runs_once_per_configured_period(app, runpod, monkeypatch):
    """SAGAN_POD_WATCH_SECONDS is the watcher's period however often the scheduler ticks."""
    monkeypatch.setitem(app.config, "POD_WATCH_SECONDS", 600)
    with app.app_context():
        redis_store.connection().delete(watcher.WATCH_GATE_KEY)
        assert watcher.watch_now_and_then() is not None
        assert watcher.watch_now_and_then() is None
        assert 0 < redis_store.connection().pttl(watcher.WATCH_GATE_KEY) <= 600_000


def test_an_unknown_price_is_shown_unknown_and_counts_toward_the_cap(app, runpod, approved, client, owner):
    """RunPod reports no cost: the card says "price unknown", and the cap check counts the pod at the
    catalogue's rate for its GPU, never $0."""
    runpod.report_cost = False
    number = approved(pod_spec())
    run_id = running_dispatch(app, runpod, number)
    page = client.get(f"/experiments/{number}")
    assert "price unknown · spent unknown" in page.text
    listed = client.get(f"/api/experiments/{number}/pods").get_json()
    assert listed["pods"][0]["priceKnown"] is False and listed["pods"][0]["spendUsd"] is None
    assert listed["spendIncomplete"] is True
    with app.app_context():
        experiment = experiments.get_experiment(number)
        experiment.cost_cap_usd = 1.0
        db.session.commit()
        runpod.advance(3600)  # an hour of an A100, $1.49/h in the catalogue
        watcher.watch()
        (pod,) = pods_of(run_id)
        assert pod.cost_per_hr is None
        assert pod.status == "stopped" and pod.stop_reason == "cost_cap"


def test_an_unrecognised_4xx_moves_on_to_the_next_candidate(app, runpod, approved):
    """A 4xx the backend does not know (not a spec error) ends one candidate, not the list."""
    runpod.fail_next(1, status=418, method="POST", title="I'm a teapot", detail="Short and stout.")
    number = approved(pod_spec(substitution_policy={"gpuType": {"allowed": ["A100", "H100"]}}))
    run_id = dispatch(app, number)
    with app.app_context():
        assert [p.gpu_type_id for p in pods_of(run_id) if p.status != "failed"] == [H100]
        assert "418" in run_events(run_id, "pod_substitution")[0]


def test_the_same_refusal_from_every_candidate_is_a_spec_error(app, runpod, approved):
    """Every candidate refused with the same validation error: that is the spec, reported as spec_invalid."""
    runpod.max_env = 3
    number = approved(pod_spec(substitution_policy={"gpuType": {"allowed": ["A100", "H100"]}}))
    run_id = dispatch(app, number)
    with app.app_context():
        run = db.session.get(AgentRun, run_id)
        assert run.failure_reason == "spec_invalid" and "at most 3 environment variables" in run.last_error
        assert len(creates(runpod)) == 2


def test_the_bootstrap_travels_in_the_env_and_args_stay_short(app, runpod, approved):
    """RunPod publishes no `args` limit and the bootstrap is kilobytes: it goes base64 in an env var."""
    number = approved(pod_spec())
    dispatch(app, number)
    body = creates(runpod)[0].body
    assert len(body["args"]) < provisioner.MAX_ARGS_CHARS and "SAGAN_BOOTSTRAP_B64" in body["args"]
    assert base64.b64decode(body["env"]["SAGAN_BOOTSTRAP_B64"]) == provisioner.BOOTSTRAP.read_bytes()
    assert body["env"]["SAGAN_DOCKER_ARGS"] == pod_spec()["dockerArgs"]


def test_the_bootstrap_command_decodes_and_runs():
    """The short `args` really reproduces the script from the env var (run here with bash)."""
    script = b"#!/usr/bin/env bash\necho from-the-env-var\n"
    env = {"PATH": "/usr/bin:/bin", "SAGAN_BOOTSTRAP_B64": base64.b64encode(script).decode()}
    out = subprocess.run(["bash", "-c", provisioner.RUNPOD_ARGS.split(" ", 2)[2].strip("'")], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "from-the-env-var", out.stderr


def test_a_stop_the_provider_refused_is_asked_again_by_the_watcher_until_it_holds(app, runpod, approved, client,
                                                                                  owner, monkeypatch):
    """A failed dispatch whose stop the provider refused leaves a pod up and billing, and no
    new saga comes (the experiment is blocked): the watcher asks again on each pass, keeps
    the pod `stop_requested` while it is refused (it was stored as `running` and forgotten),
    and says so on the timeline once it holds."""
    monkeypatch.setitem(app.config, "RUNPOD_MAX_RETRIES", 0)
    number = approved(pod_spec("a"))
    run_id = running_dispatch(app, runpod, number)
    token = creates(runpod)[0].body["env"]["SAGAN_POD_PROGRESS_TOKEN"]
    runpod.fail_next(1, status=503, method="POST")  # the dispatch's own stop
    client.post("/api/progress", headers={"Authorization": f"Bearer {token}"},
                json={"progressPct": 0, "seq": 3, "exitCode": 1, "message": "experiment exited with code 1"})
    with app.app_context():
        (pod,) = pods_of(run_id)
        assert pod.status == "stop_requested" and runpod.status_of(pod.provider_pod_id) == "RUNNING"
        asked = len(stops(runpod))
        runpod.fail_next(1, status=503, method="POST")  # the watcher's first try is refused too
        watcher.watch()
        db.session.refresh(pod)
        assert pod.status == "stop_requested" and "503" in (pod.last_error or "")
        assert len(stops(runpod)) == asked + 1
        page = client.get(f"/experiments/{number}").text  # the owner sees the stop is still owed
        assert '<span class="chip">stopping</span>' in page and "The stop is not confirmed yet (" in page
        watcher.watch()
        db.session.refresh(pod)
        assert pod.status == "stopped" and runpod.status_of(pod.provider_pod_id) == "EXITED"
        assert pod.stop_reason == "failure"
        experiment = experiments.get_experiment(number)
        assert f"{pod.name} is stopped now (volume kept): the provider refused the first stop." in notes(experiment.id)
        watcher.watch()  # stopped: not asked again
        assert len(stops(runpod)) == asked + 2
