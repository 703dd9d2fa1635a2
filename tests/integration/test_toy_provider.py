"""A new pod provider is one backend module and one pod-accounts entry (docs/pods.md).

Toy Cloud (tests/fakes/toy_cloud.py) lives only in the tests: its module registers its
backend, and the fixture below adds its entry to the table — a billing account at a fixed
$2.00 per GPU-hour — and its provider to the settings. No module of Sagan is edited for it,
and yet it is driven through the real services: the owner's approval, the provisioner's
dispatch, the watcher seeing it run and exit, the owner's stop, and billing (spend, the cost
ledger, the idle-GPU flag and the preflight's price check treat it as an account that bills).
"""
from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import AgentRun, Pod, db
from services.core import clock, pod_accounts
from services.dispatch import cost_ledger, metrics, pod_logs, provisioner, spend, system_metrics, watcher
from services.dispatch.backends import backend_for
from services.workflow import experiments
from tests.fakes.toy_cloud import ACCOUNT, RATE_PER_GPU_HOUR, ToyCloud
from tests.integration import test_dispatch as base
from tests.integration.test_dispatch import dispatch, notes, pod_spec

approved = base.approved


@pytest.fixture
def toycloud(app, monkeypatch):
    """Toy Cloud's one table entry, its provider in the settings, and the provisioner's wait
    for a listing to catch up passed on the provider's clock."""
    cloud = ToyCloud()
    monkeypatch.setitem(pod_accounts.ACCOUNTS, ACCOUNT.name, ACCOUNT)
    monkeypatch.setitem(app.config, ACCOUNT.settings["cloud"], cloud)
    monkeypatch.setattr(provisioner, "sleep", cloud.advance)
    return cloud


def _pod(run_id) -> Pod:
    return db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id, Pod.status != "failed"))


def _running(app, toycloud, approved) -> tuple[int, object]:
    """An experiment approved on toycloud, dispatched, booted and seen running; (number, run id)."""
    number = approved(pod_spec(), account="toycloud")
    run_id = dispatch(app, number)
    toycloud.advance(toycloud.boot_seconds)
    with app.app_context():
        watcher.watch()
    return number, run_id


def test_the_account_is_known_once_its_entry_is_in_the_table(app, api_client, monkeypatch):
    """Is `toycloud` refused as an experiment's account before its entry exists, and taken
    after, with no migration (the database no longer lists the accounts)?"""
    client = api_client("read,write")
    refused = client.post("/api/experiments", json={"title": "Too early", "podAccount": "toycloud"})
    assert refused.status_code == 400 and refused.get_json()["field"] == "pod_account"
    assert "team, personal, local" in refused.get_json()["message"]
    monkeypatch.setitem(pod_accounts.ACCOUNTS, ACCOUNT.name, ACCOUNT)
    created = client.post("/api/experiments", json={"title": "On Toy Cloud", "podAccount": "toycloud"})
    assert created.status_code == 201, created.get_json()
    assert created.get_json()["experiment"]["podAccount"] == "toycloud"


def test_a_toy_pod_is_dispatched_watched_to_its_exit_and_billed(app, toycloud, approved):
    """Approved on toycloud: does the provisioner create the pod there, the watcher see it
    running and then exited, and spend and the cost ledger count its dollars at the
    provider's rate (not free, not a local pod)?"""
    number = approved(pod_spec(), account="toycloud")
    run_id = dispatch(app, number)
    assert toycloud.count("create") == 1
    with app.app_context():
        pod = _pod(run_id)
        assert (pod.account, pod.status) == ("toycloud", "deploying")
        assert pod.provider_pod_id in toycloud.pods
        assert "Toy Cloud pod dispatched; waiting for runtime." in notes(pod.experiment_id)

    toycloud.advance(toycloud.boot_seconds)
    with app.app_context():
        watcher.watch()
        pod = _pod(run_id)
        experiment = experiments.get_experiment(number)
        assert pod.status == "running" and pod.cost_per_hr == RATE_PER_GPU_HOUR
        assert experiment.status == "running" and "Toy Cloud pod is running." in notes(experiment.id)

    toycloud.advance(1800)  # half an hour at $2.00/h
    with app.app_context():
        toycloud.print(pod.provider_pod_id, "epoch 1 done")
        log = pod_logs.read_pod_logs(_pod(run_id), since="2026-12-02T00:00:00Z")
        assert log.source_words == "Toy Cloud's log" and "epoch 1 done" in log.text and log.note is None
    toycloud.exit_pod(pod.provider_pod_id, code=0)
    with app.app_context():
        clock.advance(timedelta(minutes=1))
        watcher.watch()
        pod = _pod(run_id)
        assert (pod.status, pod.exit_code, pod.uptime_seconds) == ("exited", 0, 1800)
        assert spend.experiment_spend(pod.experiment_id) == pytest.approx(1.00)
        assert not spend.price_unknown(pod)
        ledger = cost_ledger.ledger_for(experiments.get_experiment(number))
        assert ledger.gpu_usd == pytest.approx(1.00) and ledger.pods == 1
        assert ledger.pods_local == 0 and not ledger.gpu_free
        # Every pod exited 0: the dispatch is complete and the uploads were checked — the
        # spec's metrics.json never arrived, so verification blocks the experiment.
        assert db.session.get(AgentRun, run_id).status == "completed"
        assert experiments.get_experiment(number).status == "blocked"


def test_the_owner_stops_a_toy_pod_and_a_second_stop_changes_nothing(app, client, owner, toycloud, approved):
    """Does the owner's Stop stop the pod at Toy Cloud (volume kept: EXITED, not terminated),
    block the experiment in Toy Cloud's words, and a repeated stop stay harmless?"""
    number, run_id = _running(app, toycloud, approved)
    with app.app_context():
        pod = _pod(run_id)
        pod_id, provider_id = pod.id, pod.provider_pod_id
    response = client.post(f"/pods/{pod_id}/stop", data={"csrf_token": owner.csrf()})
    assert response.status_code == 303
    assert toycloud.status_of(provider_id) == "EXITED" and toycloud.count("stop") == 1
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        assert notes(experiment.id)[-1].startswith("Toy Cloud pod stopped; volume preserved. Stopped by")
        assert db.session.get(Pod, pod_id).stop_reason == "owner"
        again = backend_for("toycloud").stop(provider_id)
        assert again.status == "EXITED" and again.cost_per_hr == 0
        watcher.watch()
        assert db.session.get(Pod, pod_id).status == "stopped"


def test_an_idle_toy_gpu_is_flagged_with_its_rate(app, toycloud, approved):
    """A running toy pod whose GPU idles for 15 minutes: is it flagged like any pod that bills,
    with Toy Cloud's hourly rate?"""
    _number, run_id = _running(app, toycloud, approved)
    with app.app_context():
        pod = _pod(run_id)
        for seq in range(1, 20):
            metrics.record_batch(pod, metrics.parse_batch(
                {"seq": seq, "points": [{"step": seq, "name": system_metrics.GPU_UTIL, "value": 0.0}]}))
            db.session.commit()
            clock.advance(timedelta(minutes=1))
        flagged = system_metrics.idle_gpus([pod])
        assert flagged[pod.id].minutes >= system_metrics.IDLE_MINUTES
        assert flagged[pod.id].rate_usd_per_hour == RATE_PER_GPU_HOUR


def test_preflight_holds_a_toy_gpu_without_a_price_as_it_would_on_runpod(app, toycloud, approved):
    """The policy lets the pod move to an L40S, which has no price: on a billing account the
    preflight refuses before any create call, naming it — Toy Cloud is no free local pod."""
    number = approved(pod_spec(substitution_policy={"gpuType": {"allowed": ["A100", "L40S"]}}),
                      account="toycloud")
    dispatch(app, number)
    assert toycloud.count("create") == 0
    with app.app_context():
        experiment = experiments.get_experiment(number)
        assert experiment.status == "blocked"
        run = db.session.scalar(sa.select(AgentRun).where(AgentRun.scope_id == experiment.id))
        assert run.failure_reason == "preflight_failed"
        assert any("no known price for L40S" in (note or "") for note in notes(experiment.id))


def test_a_full_gpu_moves_to_the_next_candidate_on_toy_cloud(app, toycloud, approved):
    """Toy Cloud has no A100 free: does the provisioner follow the same create rule as on
    RunPod (capacity: the next allowed GPU) and record the substitution?"""
    toycloud.no_capacity("NVIDIA A100-SXM4-80GB")
    number = approved(pod_spec(substitution_policy={"gpuType": {"allowed": ["A100", "H100"]}}),
                      account="toycloud")
    run_id = dispatch(app, number)
    assert toycloud.count("create") == 2
    with app.app_context():
        pods = list(db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id).order_by(Pod.attempt)))
        assert [(p.gpu_type_id, p.status) for p in pods] == [
            ("NVIDIA A100-SXM4-80GB", "failed"), ("NVIDIA H100 80GB HBM3", "deploying")]
        assert experiments.get_experiment(number).status == "queued"


def test_a_pod_made_before_an_upstream_error_is_found_after_the_listing_lag(app, toycloud, approved):
    """Toy Cloud made the pod and then failed the call: does the provisioner wait out the
    listing lag, find the pod by its name and keep it, rather than create a second?"""
    toycloud.fail_after_create()
    number = approved(pod_spec(), account="toycloud")
    run_id = dispatch(app, number)
    assert toycloud.count("create") == 1 and len(toycloud.pods) == 1
    assert toycloud.now >= toycloud.listing_lag  # it waited for the listing before looking
    with app.app_context():
        pod = _pod(run_id)
        # The wait outlasted its boot: it is adopted as the provider lists it, running.
        assert pod.provider_pod_id == next(iter(toycloud.pods)) and pod.status == "running"
