"""The pod backends for real: RunPodBackend over HTTP against the fake RunPod REST v2 API,
and LocalBackend running real commands through scripts/pod_bootstrap.sh, posting to a
loopback receiver that stands in for Sagan's progress and artifact endpoints."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from unittest.mock import ANY

import httpx
import psutil
import pytest

from services.dispatch.backends import BackendError, PodRequest, backend_for
from services.dispatch.backends.local import LocalBackend
from services.dispatch.backends.runpod import RunPodBackend
from tests.fakes.pod_receiver import PodReceiver

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
ROOT = Path(__file__).resolve().parents[2]


def request(name="sagan-7-1a2b3c4d-0-1", gpu=A100, cloud="SECURE", **fields) -> PodRequest:
    values = dict(name=name, image="runpod/pytorch:2.4.0", args="bash -lc 'python train.py'", gpu_id=gpu,
                  gpu_count=1, cloud=cloud, disk_gb=50, volume_gb=100, env={"SAGAN_POD_NAME": name})
    values.update(fields)
    return PodRequest(**values)


class Sleeps(list):
    """Stands in for time.sleep and remembers every wait."""

    def __call__(self, seconds):
        self.append(seconds)


@pytest.fixture
def sleeps():
    return Sleeps()


@pytest.fixture
def team(fake_runpod, sleeps):
    with RunPodBackend("team", fake_runpod.team_key, fake_runpod.url, team_id=fake_runpod.team_id,
                       sleep=sleeps, timeout=5) as backend:
        yield backend


@pytest.fixture
def personal(fake_runpod, sleeps):
    with RunPodBackend("personal", fake_runpod.personal_key, fake_runpod.url, team_id=fake_runpod.team_id,
                       sleep=sleeps, timeout=5) as backend:
        yield backend


# --- RunPod: create and read ---------------------------------------------------------

def test_create_posts_the_v2_body_and_the_pod_comes_up(fake_runpod, team):
    """Does create POST the REST v2 body with the bearer key, and does get() follow the pod
    from PROVISIONING through STARTING to RUNNING with cost, uptime and SSH?"""
    pod = team.create(request(env={"SAGAN_POD_NAME": "sagan-7-1a2b3c4d-0-1", "SEED": "7"}))
    assert pod.status == "PROVISIONING" and pod.name == "sagan-7-1a2b3c4d-0-1"
    sent = fake_runpod.requests_to("POST")[0]
    assert sent.headers["Authorization"] == f"Bearer {fake_runpod.team_key}"
    assert sent.body == {
        "name": "sagan-7-1a2b3c4d-0-1", "image": "runpod/pytorch:2.4.0", "args": "bash -lc 'python train.py'",
        "gpu": {"id": A100, "count": 1}, "cloud": "SECURE", "dataCenterIds": [], "disk": 50,
        "mounts": {"persistent": {"size": 100, "path": "/workspace"}},
        "env": {"SAGAN_POD_NAME": "sagan-7-1a2b3c4d-0-1", "SEED": "7"}, "ports": ["22/tcp"], "startSsh": True}
    fake_runpod.advance(15)
    assert team.get(pod.id).status == "STARTING"
    fake_runpod.advance(75)
    running = team.get(pod.id)
    assert running.status == "RUNNING" and running.uptime_seconds == 60
    assert running.cost_per_hr == pytest.approx(1.89) and running.gpu_id == A100 and running.gpu_count == 1
    assert (running.ssh_host, running.ssh_port, running.data_center_id) == ("203.0.113.10", 10341, "US-KS-2")


def test_a_missing_pod_is_none(team):
    """Does get() answer None (not an error) for a pod RunPod does not know?"""
    assert team.get("nosuchpod") is None
    assert team.stop("nosuchpod") is None
    team.terminate("nosuchpod")  # already gone: nothing to do


def test_list_by_name_finds_exactly_that_pod_after_the_listing_lag(fake_runpod, team):
    """Is a just-created pod absent from name lists during the listing lag, then found by its exact name?"""
    fake_runpod.listing_lag = 20
    pod = team.create(request(name="sagan-7-1a2b3c4d-0-1"))
    team.create(request(name="sagan-7-1a2b3c4d-0-10"))
    assert team.list_by_name("sagan-7-1a2b3c4d-0-1") == []
    assert team.get(pod.id) is not None  # the pod itself is there
    fake_runpod.advance(21)
    found = team.list_by_name("sagan-7-1a2b3c4d-0-1")
    assert [p.id for p in found] == [pod.id]
    # v2 documents no name filter: nothing undocumented is sent, the match is ours.
    assert fake_runpod.requests_to("GET")[-1].query == {}


def test_the_list_is_one_answer_asked_with_no_filter_and_no_cursor(fake_runpod, team):
    """`GET /v2/pods` has one parameter (includeClusterPods) and no cursor: is every pod of the account
    read from one answer, with nothing sent in the query, and a name matched on our side?"""
    names = [f"sagan-8-0000000{i}-0-1" for i in range(5)]
    for name in names:
        fake_runpod.add_pod(name, status="RUNNING")
    assert sorted(p.name for p in team.list_all()) == names
    assert [p.name for p in team.list_by_name(names[4])] == [names[4]]
    assert [r.query for r in fake_runpod.requests_to("GET")] == [{}, {}]


def test_the_edge_gets_a_browser_like_user_agent(fake_runpod, team):
    """An edge that refuses HTTP-library user agents (python-httpx, python-requests) still serves us."""
    fake_runpod.refuse_user_agents = ("python-httpx", "python-requests")
    assert team.list_all() == []
    agent = fake_runpod.requests_to("GET")[-1].headers["User-Agent"]
    assert agent.startswith("Mozilla/5.0") and "sagan/" in agent
    assert httpx.get(f"{fake_runpod.url}/v2/pods",
                     headers={"Authorization": f"Bearer {fake_runpod.team_key}"}).status_code == 403


def test_list_all_is_the_accounts_sagan_pods_only(fake_runpod, team, personal):
    """Does list_all list the account's pods named sagan-* and nothing of the other account or other names?"""
    mine = team.create(request(name="sagan-1-aaaaaaaa-0-1"))
    fake_runpod.add_pod("someone-elses-notebook", scope="team")
    fake_runpod.add_pod("sagan-2-bbbbbbbb-0-1", scope="personal")
    assert [p.id for p in team.list_all()] == [mine.id]
    assert [p.name for p in personal.list_all()] == ["sagan-2-bbbbbbbb-0-1"]
    assert {p.name for p in team.list_all(prefix="")} == {"sagan-1-aaaaaaaa-0-1", "someone-elses-notebook"}


def test_a_vanished_pod_is_none_and_leaves_lists(fake_runpod, team):
    """Does a pod that vanishes at the provider read as None and disappear from lists?"""
    pod = team.create(request())
    fake_runpod.vanish(pod.id, after=30)
    fake_runpod.advance(29)
    assert team.get(pod.id) is not None and team.list_all()
    fake_runpod.advance(1)
    assert team.get(pod.id) is None and team.list_all() == []


def test_an_exited_pod_costs_nothing(fake_runpod, team):
    """Does a pod whose container exited (by itself or with an error) read EXITED/ERROR with cost 0 / its rate?"""
    fake_runpod.run_seconds = 100
    pod = team.create(request())
    fake_runpod.advance(30 + 100)
    exited = team.get(pod.id)
    assert exited.status == "EXITED" and exited.cost_per_hr == 0 and exited.finished
    other = team.create(request(name="sagan-7-1a2b3c4d-1-1"))
    fake_runpod.exit_pod(other.id, error=True)
    assert team.get(other.id).status == "ERROR"


# --- RunPod: actions -----------------------------------------------------------------

def test_stop_then_terminate(fake_runpod, team):
    """Does stop answer the EXITED pod, a second stop (409 at RunPod) answer it too, and terminate (204) remove it?"""
    pod = team.create(request())
    fake_runpod.advance(60)
    stopped = team.stop(pod.id)
    assert stopped.status == "EXITED" and stopped.cost_per_hr == 0
    assert team.stop(pod.id).status == "EXITED"
    assert [r.status for r in fake_runpod.requests_to("POST", f"/v2/pods/{pod.id}/action")] == [200, 409]
    assert [r.body for r in fake_runpod.requests_to("POST", f"/v2/pods/{pod.id}/action")] == [
        {"action": "stop"}, {"action": "stop"}]
    assert team.terminate(pod.id) is None
    assert fake_runpod.requests_to("POST", f"/v2/pods/{pod.id}/action")[-1].status == 204
    assert fake_runpod.status_of(pod.id) == "TERMINATED" and team.list_all() == []
    team.terminate(pod.id)  # terminating twice (409 at RunPod) is not an error


def test_the_fake_answers_409_for_actions_its_table_forbids(fake_runpod):
    """Does the fake refuse actions RunPod's table forbids (start a RUNNING pod, stop an EXITED one) with 409?"""
    pod_id = fake_runpod.add_pod("sagan-9-cccccccc-0-1", status="RUNNING")
    headers = {"Authorization": f"Bearer {fake_runpod.team_key}", "X-Team-Id": fake_runpod.team_id}
    with httpx.Client(base_url=fake_runpod.url, headers=headers) as client:
        answer = client.post(f"/v2/pods/{pod_id}/action", json={"action": "start"})
        assert answer.status_code == 409 and answer.headers["Content-Type"] == "application/problem+json"
        assert client.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"}).status_code == 200
        assert client.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"}).status_code == 409
        assert client.post(f"/v2/pods/{pod_id}/action", json={"action": "start"}).json()["status"] == "PROVISIONING"


# --- RunPod: errors ------------------------------------------------------------------

def test_no_capacity_is_provider_capacity_with_runpods_words(fake_runpod, team):
    """Is RunPod's capacity answer — a 400 whose only sign is its detail, 'no longer any instances
    available' — a provider_capacity error quoting it, while other GPU types still create?"""
    fake_runpod.no_capacity(H100)
    with pytest.raises(BackendError) as caught:
        team.create(request(gpu=H100))
    assert caught.value.reason == "provider_capacity" and caught.value.status == 400
    assert "no longer any instances available" in caught.value.message
    assert len(fake_runpod.requests_to("POST")) == 1  # not retried
    assert team.create(request(gpu=A100)).status == "PROVISIONING"


def test_no_balance_is_provider_balance_and_never_retried(fake_runpod, team, sleeps):
    """Is RunPod's 402 (a balance too low to deploy) provider_balance with its words, one POST, no wait?"""
    fake_runpod.no_balance(times=1)
    with pytest.raises(BackendError) as caught:
        team.create(request())
    assert caught.value.reason == "provider_balance" and caught.value.status == 402
    assert "Insufficient balance" in caught.value.message
    assert len(fake_runpod.requests_to("POST")) == 1 and fake_runpod.pods == {} and sleeps == []
    assert team.create(request()).status == "PROVISIONING"  # the balance was topped up


def test_a_pool_the_account_cannot_use_is_a_403_for_that_gpu_only(fake_runpod, team):
    """Is RunPod's 403 for a pool (this GPU on this cloud) provider_auth with status 403, and another
    GPU, or the same GPU on another cloud, still created?"""
    fake_runpod.no_pool_access(H100, cloud="SECURE")
    with pytest.raises(BackendError) as caught:
        team.create(request(gpu=H100))
    assert caught.value.reason == "provider_auth" and caught.value.status == 403
    assert "cannot access the requested pool" in caught.value.message
    assert team.create(request(name="sagan-7-1a2b3c4d-0-2", gpu=H100, cloud="COMMUNITY")).status == "PROVISIONING"
    assert team.create(request(name="sagan-7-1a2b3c4d-0-3", gpu=A100)).status == "PROVISIONING"


def test_a_volume_under_runpods_floor_is_a_422_naming_the_field(fake_runpod, team):
    """RunPod's schema puts a 10 GB floor on the persistent mount: is a 5 GB volume refused with 422, its
    `errors` strings folded into a spec_invalid message?"""
    with pytest.raises(BackendError) as caught:
        team.create(request(volume_gb=5))
    assert caught.value.reason == "spec_invalid" and caught.value.status == 422
    assert "$.mounts.persistent.size: must be >= 10 but found 5" in caught.value.message
    assert fake_runpod.pods == {}
    assert team.create(request(volume_gb=0)).status == "PROVISIONING"  # no volume at all is fine


def test_the_fake_refuses_fields_runpods_contract_does_not_know(fake_runpod):
    """The create body allows no unknown field, at any level: is one answered 422 with `errors` as an
    array of strings in RunPod's words, and nothing made?"""
    body = {"name": "sagan-1-00000000-0-1", "image": "runpod/pytorch", "gpu": {"id": A100, "count": 1, "spot": True},
            "bogus": 1, "mounts": {"persistent": {"size": 20, "path": "/workspace", "kind": "ssd"}}}
    answer = httpx.post(f"{fake_runpod.url}/v2/pods", json=body,
                        headers={"Authorization": f"Bearer {fake_runpod.team_key}"})
    assert answer.status_code == 422 and answer.headers["Content-Type"] == "application/problem+json"
    assert answer.json() == {"title": "Unprocessable Entity", "status": 422, "detail": "Request validation failed.",
                             "errors": ["$: additional properties 'bogus' not allowed",
                                        "$.gpu: additional properties 'spot' not allowed",
                                        "$.mounts.persistent: additional properties 'kind' not allowed"]}
    assert fake_runpod.pods == {}


def test_capacity_can_be_scripted_per_cloud_and_for_a_number_of_calls(fake_runpod, team):
    """Does the fake's capacity rule apply only to its cloud and only `times` times?"""
    fake_runpod.no_capacity(A100, cloud="SECURE", times=1)
    with pytest.raises(BackendError):
        team.create(request(cloud="SECURE"))
    assert team.create(request(name="sagan-7-1a2b3c4d-0-2", cloud="COMMUNITY")).status == "PROVISIONING"
    assert team.create(request(name="sagan-7-1a2b3c4d-0-3", cloud="SECURE")).status == "PROVISIONING"


def test_a_wrong_key_is_provider_auth_and_the_key_is_never_in_the_message(fake_runpod, sleeps):
    """Does a refused key raise provider_auth (not retried) with RunPod's words and without the key?"""
    key = "rpa_WRONGKEY1234567890abcdef"
    with RunPodBackend("personal", key, fake_runpod.url, sleep=sleeps) as backend:
        for call in (lambda: backend.get("p1"), backend.list_all, lambda: backend.create(request())):
            with pytest.raises(BackendError) as caught:
                call()
            assert caught.value.reason == "provider_auth" and caught.value.status == 401
            assert "Invalid or missing API key" in caught.value.message and key not in caught.value.message
    assert sleeps == []


def test_an_error_that_echoes_the_key_is_redacted(fake_runpod, team):
    """If RunPod's problem detail quotes the API key, is it redacted from the error message?"""
    fake_runpod.fail_next(1, status=422, detail=f"key {fake_runpod.team_key} cannot deploy image x")
    with pytest.raises(BackendError) as caught:
        team.create(request())
    assert caught.value.reason == "spec_invalid"
    assert fake_runpod.team_key not in caught.value.message and "[REDACTED]" in caught.value.message


def test_a_validation_error_is_spec_invalid_naming_the_field(team):
    """Is a 400 refusal of a body that matches the contract (a GPU type RunPod does not know) a
    spec_invalid error naming the field?"""
    with pytest.raises(BackendError) as caught:
        team.create(request(gpu="NVIDIA B300"))
    assert caught.value.reason == "spec_invalid" and caught.value.status == 400
    assert "gpu.id: unknown GPU type" in caught.value.message


def test_the_team_header_goes_with_the_team_key_only(fake_runpod, team, personal):
    """v2 documents no team header: none is sent by default. One configured is sent with the team key,
    never with the personal key, where RunPod would refuse it."""
    team.list_all()
    personal.list_all()
    team_call, personal_call = fake_runpod.requests_to("GET")
    assert "X-Team-Id" not in team_call.headers and team_call.status == 200
    assert "X-Team-Id" not in personal_call.headers and personal_call.status == 200
    with RunPodBackend("team", fake_runpod.team_key, fake_runpod.url, team_id=fake_runpod.team_id,
                       team_header="X-Team-Id") as with_header:
        with_header.list_all()
    assert fake_runpod.requests_to("GET")[-1].headers["X-Team-Id"] == fake_runpod.team_id
    fake_runpod.team_header_required = True
    refused = httpx.get(f"{fake_runpod.url}/v2/pods", headers={
        "Authorization": f"Bearer {fake_runpod.personal_key}", "X-Team-Id": fake_runpod.team_id})
    assert refused.status_code == 403
    # A team key in the wrong scope (no team header) silently sees no team pods, as on RunPod.
    fake_runpod.add_pod("sagan-3-dddddddd-0-1", scope="team")
    with RunPodBackend("team", fake_runpod.team_key, fake_runpod.url) as no_team_id:
        assert no_team_id.list_all() == []
    with RunPodBackend("team", fake_runpod.team_key, fake_runpod.url, team_id=fake_runpod.team_id,
                       team_header="X-Team-Id") as with_header:
        assert [p.name for p in with_header.list_all()] == ["sagan-3-dddddddd-0-1"]


def test_reads_are_retried_with_exponential_back_off_then_fail(fake_runpod, team, sleeps):
    """Is a GET answered 5xx retried with growing waits, and after the retries a provider_error?"""
    pod = team.create(request())
    fake_runpod.fail_next(10, status=503, method="GET")
    with pytest.raises(BackendError) as caught:
        team.get(pod.id)
    assert caught.value.reason == "provider_error" and caught.value.status == 503
    assert sleeps == [1.0, 2.0, 4.0]
    assert len(fake_runpod.requests_to("GET")) == 4


def test_a_read_that_recovers_within_the_retries_succeeds(fake_runpod, team, sleeps):
    """Does a GET that fails twice with 5xx and then answers return the pod?"""
    pod = team.create(request())
    fake_runpod.fail_next(2, status=500, method="GET")
    assert team.get(pod.id).id == pod.id
    assert sleeps == [1.0, 2.0]


def test_actions_are_retried_on_5xx(fake_runpod, team, sleeps):
    """Is a stop answered 502 retried (stopping twice is harmless)?"""
    pod = team.create(request())
    fake_runpod.fail_next(1, status=502, method="POST")
    assert team.stop(pod.id).status == "EXITED"
    assert sleeps == [1.0]


def test_rate_limits_are_waited_out_as_the_headers_say(fake_runpod, team, sleeps):
    """Is a 429 retried after the RateLimit reset (or Retry-After, whichever is later)?"""
    pod = team.create(request())
    fake_runpod.rate_limit(2, reset=7)
    assert team.get(pod.id).id == pod.id
    fake_runpod.rate_limit(1, reset=3, retry_after=5)
    assert team.list_all()
    assert sleeps == [7.0, 7.0, 5.0]
    assert [r.status for r in fake_runpod.requests_to("GET")] == [429, 429, 200, 429, 200]


def test_a_rate_limit_that_resets_too_late_fails_at_once(fake_runpod, team, sleeps):
    """Is a 429 whose reset is beyond the wait limit (a daily quota) a provider_error without sleeping an hour?"""
    fake_runpod.rate_limit(1, reset=3600)
    with pytest.raises(BackendError) as caught:
        team.list_all()
    assert caught.value.reason == "provider_error" and caught.value.status == 429
    assert "resets in 3600 s" in caught.value.message and sleeps == []


def test_create_is_retried_after_a_rate_limit_only(fake_runpod, team, sleeps):
    """Is a create answered 429 (nothing done at RunPod) retried after the reset, making exactly one pod?"""
    fake_runpod.rate_limit(1, reset=2)
    pod = team.create(request())
    assert sleeps == [2.0] and len(fake_runpod.pods) == 1 and pod.id in fake_runpod.pods


def test_create_is_not_retried_after_a_5xx_and_the_pod_can_be_found_by_name(fake_runpod, team, sleeps):
    """Does a create answered 500 after the pod was made raise provider_error at once (one POST, no sleep),
    and can the provisioner then find that pod by name after the listing lag?"""
    fake_runpod.listing_lag = 30
    fake_runpod.fail_after_create(times=1)
    with pytest.raises(BackendError) as caught:
        team.create(request(name="sagan-7-1a2b3c4d-0-1"))
    assert caught.value.reason == "provider_error" and caught.value.status == 500
    assert len(fake_runpod.requests_to("POST")) == 1 and sleeps == []
    assert team.list_by_name("sagan-7-1a2b3c4d-0-1") == []
    fake_runpod.advance(30)
    assert [p.name for p in team.list_by_name("sagan-7-1a2b3c4d-0-1")] == ["sagan-7-1a2b3c4d-0-1"]


def test_a_plain_5xx_on_create_is_not_retried(fake_runpod, team, sleeps):
    """Is a create answered 503 (nothing made) still not retried: provider_error, one POST, no pod?"""
    fake_runpod.fail_next(1, status=503, method="POST")
    with pytest.raises(BackendError) as caught:
        team.create(request())
    assert caught.value.reason == "provider_error"
    assert len(fake_runpod.requests_to("POST")) == 1 and fake_runpod.pods == {} and sleeps == []


def test_a_create_that_times_out_is_not_retried(fake_runpod, sleeps):
    """Does a create that times out raise provider_error without a second POST, though the pod was made?"""
    fake_runpod.delay_next(0.6)
    with RunPodBackend("team", fake_runpod.team_key, fake_runpod.url, team_id=fake_runpod.team_id,
                       sleep=sleeps, timeout=0.2) as backend:
        with pytest.raises(BackendError) as caught:
            backend.create(request())
        assert caught.value.reason == "provider_error" and "did not answer in time" in caught.value.message
        assert len(fake_runpod.requests_to("POST")) == 1 and sleeps == []
        deadline = time.monotonic() + 5
        while not fake_runpod.pods and time.monotonic() < deadline:
            time.sleep(0.05)
        assert backend.list_by_name(request().name)


def test_a_read_that_times_out_is_retried(fake_runpod, sleeps):
    """Is a GET that times out once retried and answered?"""
    fake_runpod.delay_next(0.6)
    with RunPodBackend("team", fake_runpod.team_key, fake_runpod.url, team_id=fake_runpod.team_id,
                       sleep=sleeps, timeout=0.2) as backend:
        assert backend.list_all() == []
    assert sleeps == [1.0]


def test_an_unreachable_provider_is_provider_error(sleeps):
    """Does a RunPod URL nobody listens on give provider_error after the retries?"""
    with RunPodBackend("personal", "rpa_PERSONALKEY00000000000", "http://127.0.0.1:9", sleep=sleeps,
                       timeout=1) as backend:
        with pytest.raises(BackendError) as caught:
            backend.list_all()
    assert caught.value.reason == "provider_error" and "could not be reached" in caught.value.message
    assert sleeps == [1.0, 2.0, 4.0]


def test_backend_for_uses_the_apps_runpod_settings(app, fake_runpod):
    """Does backend_for build team and personal backends from the app's settings that reach the provider?"""
    with app.app_context():
        team, personal = backend_for("team"), backend_for("personal")
    pod = team.create(request())
    assert [p.id for p in team.list_all()] == [pod.id] and personal.list_all() == []
    assert fake_runpod.requests[0].headers["X-Team-Id"] == fake_runpod.team_id
    assert "X-Team-Id" not in fake_runpod.requests[-1].headers


# --- RunPod: SSH keys and logs --------------------------------------------------------

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILXGDN/SclOozk1xsDztpmhGiKkkrfQB9SKoO8dSIQQZ me@example.com"


def test_ssh_keys_are_registered_per_account_and_reach_only_pods_created_after(fake_runpod, team, personal):
    """startSsh does nothing without registered keys: is a pod created before registration left without
    keys, the set replaced with PUT (per account), and a pod created afterwards given them?"""
    before = team.create(request(name="sagan-7-1a2b3c4d-0-1"))
    assert fake_runpod.pods[before.id].public_keys == []
    assert team.ssh_keys() == []
    assert team.replace_ssh_keys([ED25519]) == [ED25519]
    assert team.ssh_keys() == [ED25519] and personal.ssh_keys() == []
    after = team.create(request(name="sagan-7-1a2b3c4d-0-2"))
    assert fake_runpod.pods[after.id].public_keys == [ED25519]
    assert fake_runpod.pods[before.id].public_keys == []  # running pods are not updated
    assert fake_runpod.requests_to("PUT", "/v2/account/ssh-keys")[0].body == {"keys": [ED25519]}
    assert team.replace_ssh_keys([]) == [] and team.ssh_keys() == []


def test_the_fake_refuses_a_key_that_is_not_an_authorized_keys_line(fake_runpod, team):
    """Is a key that does not match RunPod's pattern refused with 422 (spec_invalid) and the set unchanged?"""
    team.replace_ssh_keys([ED25519])
    with pytest.raises(BackendError) as caught:
        team.replace_ssh_keys(["-----BEGIN OPENSSH PRIVATE KEY-----"])
    assert caught.value.status == 422 and "$.keys[0]: does not match pattern" in caught.value.message
    assert team.ssh_keys() == [ED25519]


def test_a_running_pod_reports_ssh_with_its_user(fake_runpod, team):
    """Is the direct connection (22/tcp, running) read with its user, and only the proxy while starting?"""
    pod = team.create(request())
    fake_runpod.advance(15)
    starting = team.get(pod.id)
    assert (starting.ssh_host, starting.ssh_port, starting.ssh_user) == ("ssh.runpod.io", 22, f"{pod.id}-64410f2e")
    fake_runpod.advance(60)
    running = team.get(pod.id)
    assert (running.ssh_host, running.ssh_port, running.ssh_user) == ("203.0.113.10", 10341, "root")


def test_logs_come_from_both_sources_labelled(fake_runpod, team):
    """Is the log read without a source (RunPod then sends both), each line keeping its source?"""
    pod_id = fake_runpod.add_pod("sagan-7-1a2b3c4d-0-1", status="EXITED")
    fake_runpod.add_log(pod_id, "pulling image runpod/pytorch", source="system")
    fake_runpod.add_log(pod_id, "epoch 1")
    lines = team.logs(pod_id, tail=10)
    assert [(line.source, line.line) for line in lines] == [("system", "pulling image runpod/pytorch"),
                                                            ("container", "epoch 1")]
    assert fake_runpod.requests_to("GET", f"/v2/pods/{pod_id}/logs")[0].query == {"tail": "10"}


# --- Local backend -------------------------------------------------------------------

@pytest.fixture
def local_root():
    """A pods directory the unprivileged pod user can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="sagan-local-pods-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def local(local_root):
    backend = LocalBackend(local_root / "pods", stop_grace_seconds=2)
    yield backend
    for pod in backend.list_all(prefix=""):  # never leave a process behind
        backend.terminate(pod.id)


@pytest.fixture
def receiver():
    with PodReceiver() as stand_in:
        yield stand_in


def local_request(receiver, args, name="sagan-5-0a0b0c0d-0-1", **env) -> PodRequest:
    pod_env = {**receiver.env(), "SAGAN_KEEP_ALIVE_MINUTES": "0", "SAGAN_POD_NAME": name, **env}
    return PodRequest(name=name, image="local", args=args, gpu_id="cpu", gpu_count=0, cloud="SECURE",
                      disk_gb=0, volume_gb=0, env=pod_env)


def wait_until_finished(backend, pod_id, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = backend.get(pod_id)
        if pod is None or pod.status != "RUNNING":
            return pod
        time.sleep(0.05)
    raise AssertionError(f"local pod {pod_id} still running after {timeout} s:\n{backend.log_tail(pod_id)}")


def wait_for(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_local_pod_runs_posts_progress_uploads_and_exits_0(local, receiver):
    """Does a local pod run its command through the bootstrap, post the bootstrap and exit progress
    with seq, upload its artifacts, record exit code 0 and (keep-alive 0) end?"""
    args = ("mkdir -p \"$SAGAN_ARTIFACT_DIR/plots\" && echo '{\"loss\": 0.1}' > \"$SAGAN_ARTIFACT_DIR/metrics.json\" "
            "&& echo '<svg/>' > \"$SAGAN_ARTIFACT_DIR/plots/curve.svg\" && echo a,b > \"$SAGAN_ARTIFACT_DIR/t.csv\" "
            "&& printf 'x' > \"$SAGAN_ARTIFACT_DIR/blob.bin\" && echo training done")
    pod = local.create(local_request(receiver, args))
    assert pod.status == "RUNNING" and pod.id == pod.name == "sagan-5-0a0b0c0d-0-1"
    assert pod.cost_per_hr == 0
    finished = wait_until_finished(local, pod.id)
    assert finished.status == "EXITED" and finished.exit_code == 0
    assert receiver.progress == [
        {"progressPct": 5, "message": "bootstrap complete on branch (none)", "milestone": "bootstrap", "seq": 1},
        {"progressPct": 100, "message": "experiment finished", "milestone": "exit", "seq": 2, "exitCode": 0}]
    uploads = {a["name"]: (a["content_type"], a["body"]) for a in receiver.artifacts}
    log_upload = uploads.pop(f"sagan-logs/{pod.id}.log")
    assert log_upload[0] == "text/plain" and b"training done" in log_upload[1]
    assert receiver.token.encode() not in log_upload[1]
    assert uploads == {"metrics.json": ("application/json", b'{"loss": 0.1}\n'),
                       "plots/curve.svg": ("image/svg+xml", b"<svg/>\n"),
                       "t.csv": ("text/csv", b"a,b\n"),
                       "blob.bin": ("application/octet-stream", b"x")}
    assert {a["authorization"] for a in receiver.attempts} == {f"Bearer {receiver.token}"}
    assert (local.root / pod.id / "state" / "exit_code").read_text().strip() == "0"
    assert "training done" in local.log_tail(pod.id)
    assert receiver.token not in local.log_tail(pod.id)


def test_a_failing_local_pod_posts_its_exit_code_and_stderr_tail(local, receiver):
    """Does a command exiting 3 post '0% · experiment exited with code 3 · err: <last stderr lines>' with exitCode 3?"""
    args = "for i in $(seq 1 30); do echo \"line $i\" >&2; done; echo 'Traceback: CUDA OOM' >&2; exit 3"
    pod = local.create(local_request(receiver, args))
    finished = wait_until_finished(local, pod.id)
    assert finished.status == "EXITED" and finished.exit_code == 3
    exit_post = receiver.progress[-1]
    assert exit_post["exitCode"] == 3 and exit_post["progressPct"] == 0 and exit_post["seq"] == 2
    assert exit_post["message"].startswith("experiment exited with code 3 · err: line 12\n")
    assert exit_post["message"].endswith("line 30\nTraceback: CUDA OOM")
    assert "line 11\n" not in exit_post["message"]


def test_the_stderr_tail_is_capped_at_1500_characters(local, receiver):
    """Is the stderr tail in the exit post at most 1,500 characters, keeping the end?"""
    args = "for i in $(seq 1 20); do printf '%0200d\\n' $i >&2; done; echo LAST >&2; exit 1"
    local.create(local_request(receiver, args))
    wait_until_finished(local, "sagan-5-0a0b0c0d-0-1")
    message = receiver.progress[-1]["message"]
    tail = message.split(" · err: ", 1)[1]
    assert len(tail) == 1500 and tail.endswith("LAST")


def test_the_bootstrap_checks_out_the_research_repository(local, local_root, receiver):
    """Does the bootstrap clone the repository, check out the branch named in env (old name too) and
    run the command inside it, announcing the branch?"""
    origin = local_root / "origin"
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(origin)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(origin)], check=True)
    (origin / "README.md").write_text("main\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "main"], check=True)
    subprocess.run([*git, "checkout", "-qb", "exp-42"], check=True)
    (origin / "train.sh").write_text("echo trained on exp-42 > \"$SAGAN_ARTIFACT_DIR/which.txt\"\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "exp"], check=True)
    subprocess.run([*git, "checkout", "-q", "main"], check=True)
    pod = local.create(local_request(receiver, "bash train.sh", SAGAN_REPO_URL=str(origin),
                                     SAGAN_EPS_BRANCH="exp-42"))
    finished = wait_until_finished(local, pod.id)
    assert finished.exit_code == 0, local.log_tail(pod.id)
    assert receiver.progress[0]["message"] == "bootstrap complete on branch exp-42"
    assert [(a["name"], a["body"]) for a in receiver.artifacts
            if not a["name"].startswith("sagan-logs/")] == [("which.txt", b"trained on exp-42\n")]
    # Cloned into /workspace/<repository name>, as plans written for RunPod expect.
    assert (local.root / pod.id / "work" / "origin" / "train.sh").exists()


def test_a_repository_that_cannot_be_cloned_is_a_failed_exit(local, local_root, receiver):
    """Does a clone failure skip the command and post a non-zero exit with git's complaint?"""
    pod = local.create(local_request(receiver, "echo should-not-run", SAGAN_REPO_URL=str(local_root / "nope")))
    finished = wait_until_finished(local, pod.id)
    assert finished.exit_code not in (None, 0)
    assert [p.get("milestone") for p in receiver.progress] == ["setup_failed"]
    assert receiver.progress[0]["message"].startswith("setup failed: could not clone or check out the repository · err: ")
    assert receiver.progress[0]["exitCode"] == finished.exit_code
    assert "does not exist" in receiver.progress[0]["message"]
    assert "should-not-run" not in local.log_tail(pod.id)


def test_the_pod_environment_holds_no_server_secrets(local, receiver, monkeypatch):
    """Does a server secret in the parent's environment stay out of the pod while the request's env
    (a spec variable, a named secret) reaches it, with HOME in the pod's own directory?"""
    monkeypatch.setenv("SECRET_KEY", "server-secret-key-value-123")
    monkeypatch.setenv("DATABASE_URL", "postgresql://sagan:dbpassword@db/sagan")
    monkeypatch.setenv("RUNPOD_API_KEY_TEAM", "rpa_SERVERKEY000000000000000")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-server-000000000000")
    monkeypatch.setenv("TZ", "UTC")
    pod = local.create(local_request(receiver, "env | sort > \"$SAGAN_ARTIFACT_DIR/env.txt\"",
                                     SEED="7", HF_TOKEN="hf_named_secret_for_this_pod"))
    wait_until_finished(local, pod.id)
    env = dict(line.split("=", 1) for line in receiver.artifacts[0]["body"].decode().splitlines() if "=" in line)
    for name in ("SECRET_KEY", "DATABASE_URL", "RUNPOD_API_KEY_TEAM", "ANTHROPIC_API_KEY", "REDIS_URL"):
        assert name not in env
    text = receiver.artifacts[0]["body"].decode()
    assert "server-secret-key-value-123" not in text and "dbpassword" not in text
    assert env["SEED"] == "7" and env["HF_TOKEN"] == "hf_named_secret_for_this_pod" and env["TZ"] == "UTC"
    assert env["HOME"] == "/workspace"  # the pod's own folder, as its sandbox shows it


def test_a_local_pod_runs_unprivileged_when_the_server_is_root(local, receiver):
    """Does the pod run as the dedicated pod user when the server runs as root (as the server's user
    otherwise), unable to write the server's state files?"""
    pid_file = local.root / "sagan-5-0a0b0c0d-0-1" / "pid"
    args = f"id -un > \"$SAGAN_ARTIFACT_DIR/user.txt\"; echo 1 > {pid_file} || echo refused"
    pod = local.create(local_request(receiver, args))
    wait_until_finished(local, pod.id)
    expected = "sagan-pod" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    assert receiver.artifacts[0]["body"].decode().strip() == expected
    if os.geteuid() == 0:
        assert "refused" in local.log_tail(pod.id)
        assert (local.root / pod.id / "pid").read_text().strip() != "1"
        assert (local.root / pod.id / "work").stat().st_uid == pwd.getpwnam("sagan-pod").pw_uid


def test_without_a_pod_user_a_local_pod_runs_as_the_server_user(local_root, receiver):
    """With no unprivileged user configured (the non-root case) and the owner opted in to unisolated local
    pods, does the pod run as the server's own user?"""
    backend = LocalBackend(local_root / "own", run_as=None, unisolated=True)
    try:
        pod = backend.create(local_request(receiver, "id -un > \"$SAGAN_ARTIFACT_DIR/user.txt\""))
        assert wait_until_finished(backend, pod.id).exit_code == 0
        assert receiver.artifacts[0]["body"].decode().strip() == pwd.getpwuid(os.geteuid()).pw_name
    finally:
        backend.terminate("sagan-5-0a0b0c0d-0-1")
    assert backend.list_all() == []


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_stop_kills_the_whole_process_group(local, receiver):
    """Does stop() end the bootstrap and every process the command started (SIGTERM, then SIGKILL for
    one that ignores it), keep the files, and read EXITED?"""
    args = ("(trap '' TERM; sleep 300) & echo $! > \"$SAGAN_ARTIFACT_DIR/../child.pid\"; "
            "sleep 300 & wait")
    pod = local.create(local_request(receiver, args))
    child_pid_file = local.root / pod.id / "work" / "child.pid"
    assert wait_for(child_pid_file.exists)
    assert wait_for(lambda: len(receiver.progress) == 1)
    leader = int((local.root / pod.id / "pid").read_text())
    # The child's pid in the file is the pod's own (its sandbox has its own pid namespace):
    # on the host, the pod's processes are its process group.
    group = [p for p in psutil.process_iter() if _pgid(p.pid) == leader and p.pid != leader]
    assert len(group) >= 3  # bwrap's init, the bootstrap, the two sleeps …
    stopped = local.stop(pod.id)
    assert stopped.status == "EXITED" and stopped.exit_code is None
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in group)
    assert not psutil.pid_exists(leader) or psutil.Process(leader).status() == psutil.STATUS_ZOMBIE
    assert (local.root / pod.id / "output.log").exists()
    assert local.stop(pod.id).status == "EXITED"  # stopping again is harmless


def test_a_finished_pod_stays_alive_for_its_keep_alive(local, receiver):
    """With keep-alive on, is a finished pod still RUNNING (exit code already known) until stopped?"""
    pod = local.create(local_request(receiver, "echo done", SAGAN_KEEP_ALIVE_MINUTES="1"))
    assert wait_for(lambda: len(receiver.progress) == 2)
    assert wait_for(lambda: local.get(pod.id).exit_code == 0)
    time.sleep(0.5)
    alive = local.get(pod.id)
    assert alive.status == "RUNNING" and alive.exit_code == 0
    assert local.stop(pod.id).status == "EXITED"


def test_a_pod_whose_process_died_unexplained_is_terminated(local, receiver):
    """Is a pod whose processes were killed from outside (no exit code, not stopped) TERMINATED?"""
    pod = local.create(local_request(receiver, "sleep 300"))
    assert wait_for(lambda: len(receiver.progress) == 1)
    os.killpg(int((local.root / pod.id / "pid").read_text()), signal.SIGKILL)
    assert wait_until_finished(local, pod.id).status == "TERMINATED"


def test_a_recycled_pid_is_never_signalled(local, receiver):
    """If the pid file names some other process (a recycled pid), is the pod not RUNNING and is that
    process left alone by stop()?"""
    pod = local.create(local_request(receiver, "true"))
    wait_until_finished(local, pod.id)
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        (local.root / pod.id / "pid").write_text(f"{stranger.pid}\n")
        assert local.get(pod.id).status == "EXITED"
        local.stop(pod.id)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_local_pods_are_listed_found_by_name_and_terminated(local, receiver):
    """Do list_all and list_by_name find local pods, and does terminate stop one and remove its directory?"""
    first = local.create(local_request(receiver, "sleep 300", name="sagan-5-0a0b0c0d-0-1"))
    local.create(local_request(receiver, "true", name="sagan-5-0a0b0c0d-1-1"))
    assert [p.name for p in local.list_all()] == ["sagan-5-0a0b0c0d-0-1", "sagan-5-0a0b0c0d-1-1"]
    assert [p.id for p in local.list_by_name(first.name)] == [first.id]
    assert local.list_by_name("sagan-5-unknown") == [] and local.get("sagan-5-unknown") is None
    leader = int((local.root / first.id / "pid").read_text())
    local.terminate(first.id)
    assert not (local.root / first.id).exists() and local.get(first.id) is None
    assert not psutil.pid_exists(leader) or psutil.Process(leader).status() == psutil.STATUS_ZOMBIE
    assert [p.name for p in local.list_all()] == ["sagan-5-0a0b0c0d-1-1"]
    assert local.stop(first.id) is None


def test_a_local_pod_name_is_created_once(local, receiver):
    """Is a second create under the same name refused (409), and an unsafe name spec_invalid?"""
    local.create(local_request(receiver, "true"))
    with pytest.raises(BackendError) as caught:
        local.create(local_request(receiver, "true"))
    assert caught.value.reason == "provider_error" and caught.value.status == 409
    with pytest.raises(BackendError) as caught:
        local.create(local_request(receiver, "true", name="../escape"))
    assert caught.value.reason == "spec_invalid"


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root server drops to an unprivileged user")
def test_a_pods_directory_the_pod_user_cannot_reach_is_a_clear_error(receiver):
    """Running as root, is a pods directory under a private folder refused with a message naming the setting?"""
    private = Path(tempfile.mkdtemp(prefix="sagan-private-"))  # mode 0700
    try:
        with pytest.raises(BackendError) as caught:
            LocalBackend(private / "pods").create(local_request(receiver, "true"))
        assert "SAGAN_LOCAL_PODS_DIR" in caught.value.message
        assert list((private / "pods").iterdir()) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)


# --- the bootstrap on its own --------------------------------------------------------

def run_bootstrap(workdir: Path, receiver, args: str, **env) -> subprocess.CompletedProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    full_env = {"PATH": os.environ["PATH"], "HOME": str(workdir), **receiver.env(),
                "SAGAN_DOCKER_ARGS": args, "SAGAN_WORKDIR": str(workdir), "SAGAN_KEEP_ALIVE_MINUTES": "0",
                "SAGAN_POST_RETRY_SECONDS": "0", **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / "pod_bootstrap.sh")], cwd=workdir, env=full_env,
                          capture_output=True, text=True, timeout=60)


def test_a_refused_post_is_retried_with_the_same_seq(tmp_path, receiver):
    """When Sagan answers 503, does the bootstrap retry the same post (same seq), so it is stored once?"""
    receiver.fail_next(2, status=503)
    result = run_bootstrap(tmp_path / "w", receiver, "true", SAGAN_ARTIFACT_DIR="out")
    assert result.returncode == 0, result.stderr
    progress_attempts = [a for a in receiver.attempts if a["path"] == "/api/progress"]
    assert [json.loads(a["body"])["seq"] for a in progress_attempts] == [1, 1, 1, 2]
    assert [p["seq"] for p in receiver.progress] == [1, 2]
    assert receiver.token not in result.stderr + result.stdout


def test_a_refused_token_is_not_retried(tmp_path, receiver):
    """Is a 401 (wrong token) given up at once rather than retried, and the experiment still runs?"""
    result = run_bootstrap(tmp_path / "w", receiver, "echo ran", SAGAN_POD_PROGRESS_TOKEN="spt_wrong_token_0000")
    assert result.returncode == 0 and "ran" in result.stdout
    assert len([a for a in receiver.attempts if a["path"] == "/api/progress"]) == 2 and receiver.progress == []
    assert "spt_wrong_token_0000" not in result.stderr + result.stdout


# Sagan's 413 for an upload past a budget (services/dispatch/artifacts.over_budget), as the app answers it.
BUDGET_REFUSAL = {
    "error": "artifact_budget", "budget": "pod_bytes", "limit": 1000, "used": 900, "size": 500,
    "message": "big.txt would take this pod's artifacts past their budget of 1,000 bytes "
               "(SAGAN_ARTIFACT_POD_MAX_BYTES): 900 bytes are stored and the upload adds 500. Nothing was stored."}


@pytest.mark.parametrize("http", ["python3", "curl"])
def test_a_budget_refusal_is_said_in_the_pods_log_and_not_retried(tmp_path, receiver, http):
    """When Sagan refuses an artifact with a 413 past a budget, does the pod's log say why (the
    message naming the budget and its numbers) and go on without retrying it?"""
    if http == "curl" and shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    receiver.fail_next(1, status=413, payload=BUDGET_REFUSAL, path="/api/artifacts")
    result = run_bootstrap(tmp_path / "w", receiver, "echo data > out/big.txt", SAGAN_ARTIFACT_DIR="out",
                           SAGAN_BOOTSTRAP_HTTP=http)
    assert result.returncode == 0, result.stderr
    assert "answered 413" in result.stderr and "past their budget of 1,000 bytes" in result.stderr
    assert "SAGAN_ARTIFACT_POD_MAX_BYTES" in result.stderr
    assert [a["name"] for a in receiver.attempts if a["path"] == "/api/artifacts"] == ["big.txt",
                                                                                      "sagan-logs/pod.log"]
    assert [a["name"] for a in receiver.artifacts] == ["sagan-logs/pod.log"]


def test_a_relative_artifact_dir_and_a_commit_checkout(tmp_path, receiver):
    """Does a relative SAGAN_ARTIFACT_DIR resolve inside the checkout, and SAGAN_GIT_COMMIT pick that commit?"""
    origin = tmp_path / "origin"
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(origin)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(origin)], check=True)
    (origin / "v.txt").write_text("one\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    first = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (origin / "v.txt").write_text("two\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    result = run_bootstrap(tmp_path / "w", receiver, "mkdir -p results && cp v.txt results/",
                           SAGAN_REPO_URL=str(origin), SAGAN_GIT_COMMIT=first, SAGAN_ARTIFACT_DIR="results")
    assert result.returncode == 0, result.stderr
    assert [(a["name"], a["body"]) for a in receiver.artifacts] == [("v.txt", b"one\n"), ("sagan-logs/pod.log", ANY)]
    assert receiver.progress[0]["message"] == f"bootstrap complete on branch {first[:12]}"


def test_the_curl_fallback_speaks_the_same_protocol(tmp_path, receiver):
    """Without python3's poster (curl forced), are the same progress posts and artifact upload made?"""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    result = run_bootstrap(tmp_path / "w", receiver,
                           "echo '\"quoted\" \\\\ text' > 'out/a b.txt'; echo oh no >&2; exit 2",
                           SAGAN_BOOTSTRAP_HTTP="curl", SAGAN_ARTIFACT_DIR="out")
    assert result.returncode == 2, result.stderr
    assert receiver.progress == [
        {"progressPct": 5, "message": "bootstrap complete on branch (none)", "seq": 1, "milestone": "bootstrap"},
        {"progressPct": 0, "message": "experiment exited with code 2 · err: oh no", "seq": 2, "milestone": "exit",
         "exitCode": 2}]
    assert [(a["name"], a["content_type"]) for a in receiver.artifacts] == [("a b.txt", "text/plain"),
                                                                             ("sagan-logs/pod.log", "text/plain")]
    assert receiver.token not in result.stderr + result.stdout


def test_the_start_up_check_says_which_scope_each_account_reaches(fake_runpod):
    """One list call per configured account, naming the key, the header if any, and what it lists;
    a key the provider refuses is reported, not raised."""
    from services.dispatch.accounts import check_runpod_accounts
    fake_runpod.add_pod("sagan-1-00000000-0-1", status="RUNNING")
    config = {"RUNPOD_API_URL": fake_runpod.url, "RUNPOD_API_KEY_TEAM": fake_runpod.team_key,
              "RUNPOD_API_KEY_PERSONAL": "rpa_WRONGKEY00000000000000", "RUNPOD_MAX_RETRIES": 0}
    team, personal = check_runpod_accounts(config)
    assert team.ok and "RUNPOD_API_KEY_TEAM only" in team.summary and "lists 1 pod(s), 1 of them Sagan's" in team.summary
    assert not personal.ok and "401" in personal.summary and "rpa_WRONGKEY" not in personal.summary
    assert len(fake_runpod.requests_to("GET")) == 2


def test_a_restarted_container_does_not_run_the_script_again(tmp_path, receiver):
    """RunPod restarts a container that exits: the second start finds the finished marker on the
    volume, says so, and does not run the command again."""
    workdir = tmp_path / "w"
    first = run_bootstrap(workdir, receiver, "echo run >> /dev/stderr; echo ran >> \"$SAGAN_WORKDIR/runs.txt\"")
    assert first.returncode == 0, first.stderr
    again = run_bootstrap(workdir, receiver, "echo ran >> \"$SAGAN_WORKDIR/runs.txt\"")
    assert again.returncode == 0, again.stderr
    assert (workdir / "runs.txt").read_text() == "ran\n"
    assert receiver.progress[-1]["message"] == ("container restarted after the script finished (exit 0); "
                                                "not running it again")
    assert "exitCode" not in receiver.progress[-1]
    assert "ran" not in (workdir / ".sagan" / "logs" / "pod.log").read_text().split("not running it again")[-1]


def test_after_its_script_the_pod_waits_to_be_stopped(tmp_path, receiver):
    """With keep-alive on, the bootstrap does not exit after the script (an exited container would be
    restarted): it is still running well after its exit was posted."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(workdir), **receiver.env(), "SAGAN_DOCKER_ARGS": "true",
           "SAGAN_WORKDIR": str(workdir), "SAGAN_KEEP_ALIVE_MINUTES": "1", "SAGAN_POST_RETRY_SECONDS": "0"}
    process = subprocess.Popen(["bash", str(ROOT / "scripts" / "pod_bootstrap.sh")], cwd=workdir, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: any(p.get("exitCode") == 0 for p in receiver.progress))
        time.sleep(1.0)
        assert process.poll() is None
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)


def test_an_ssh_deploy_key_reaches_git_through_a_file_that_is_removed(tmp_path, receiver):
    """SAGAN_REPO_SSH_KEY_ENV names the variable holding the key: git's ssh gets it as `-i <file>`
    (a 0600 file in TMPDIR), the file is gone after the clone, the variable is unset for the
    experiment, and the key is in no progress post and not in the pod's log."""
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAtestkey0123456789\n-----END OPENSSH PRIVATE KEY-----"
    tools, record = tmp_path / "bin", tmp_path / "ssh-called.txt"
    tools.mkdir()
    # A stand-in ssh on PATH: it records what git gave it (and the key file's content), then fails
    # like an unreachable host would.
    (tools / "ssh").write_text(f"#!/bin/bash\nfor a in \"$@\"; do echo \"arg:$a\"; done > {record}\n"
                               f"while [ $# -gt 0 ]; do [ \"$1\" = -i ] && {{ stat -c %a \"$2\"; cat \"$2\"; }} >> {record}; "
                               f"shift; done\necho 'ssh: connect to host example.invalid: refused' >&2; exit 255\n")
    (tools / "ssh").chmod(0o755)
    result = run_bootstrap(tmp_path / "w", receiver, "env > \"$SAGAN_WORKDIR/env.txt\"",
                           PATH=f"{tools}:{os.environ['PATH']}", TMPDIR=str(tmp_path),
                           SAGAN_REPO_URL="ssh://git@example.invalid/org/private.git",
                           SAGAN_REPO_SSH_KEY_ENV="DEPLOY_KEY", DEPLOY_KEY=key)
    assert result.returncode != 0
    called = record.read_text()
    key_file = next(line[4:] for line in called.splitlines() if line.startswith("arg:") and "sagan-key." in line)
    assert "arg:-i" in called and "600" in called and key.splitlines()[1] in called
    assert not Path(key_file).exists()
    assert receiver.progress[-1]["message"].startswith("setup failed: could not clone")
    assert key.splitlines()[1] not in json.dumps(receiver.progress)
    assert key.splitlines()[1] not in (tmp_path / "w" / ".sagan" / "logs" / "pod.log").read_text()
