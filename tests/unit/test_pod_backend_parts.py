"""The pod backends' small parts: errors, backend choice, header parsing, pod environment."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from services.dispatch.backends import BackendError, backend_for
from services.dispatch.backends.local import LocalBackend, pod_environment
from services.dispatch.backends.runpod import RunPodBackend, _is_capacity, _pod_from, _ratelimit_reset, _retry_after

KEYS = {"RUNPOD_API_URL": "http://127.0.0.1:9", "RUNPOD_API_KEY_TEAM": "rpa_TEAMKEY0000000000000000",
        "RUNPOD_API_KEY_PERSONAL": "rpa_PERSONALKEY00000000000", "RUNPOD_TEAM_ID": "team_1",
        "RUNPOD_TEAM_HEADER": "X-Team-Id", "TESTING": False, "SAGAN_LOCAL_PODS": False}


def test_backend_error_carries_a_registry_reason_and_status():
    """Does BackendError keep the reason code, the message and the HTTP status, and refuse unknown codes?"""
    error = BackendError("provider_capacity", "no A100 left", status=500)
    assert (error.reason, error.message, error.status) == ("provider_capacity", "no A100 left", 500)
    assert str(error) == "provider_capacity: no A100 left"
    with pytest.raises(ValueError):
        BackendError("out_of_gpus", "not a registry code")


@pytest.mark.parametrize("account, setting", [("team", "RUNPOD_API_KEY_TEAM"),
                                              ("personal", "RUNPOD_API_KEY_PERSONAL")])
def test_backend_for_an_account_without_a_key_is_a_clear_auth_error(account, setting):
    """Does asking for a RunPod account with no key configured raise provider_auth naming the setting?"""
    with pytest.raises(BackendError) as caught:
        backend_for(account, {**KEYS, setting: ""})
    assert caught.value.reason == "provider_auth"
    assert setting in caught.value.message and account in caught.value.message


def test_backend_for_reuses_one_client_per_configuration():
    """Does every call for the same account and settings get the same backend (one HTTP client,
    kept-alive connections), and a changed key a new one?"""
    first, again = backend_for("team", KEYS), backend_for("team", dict(KEYS))
    assert first is again
    assert backend_for("team", {**KEYS, "RUNPOD_API_KEY_TEAM": "rpa_OTHERKEY000000000000000"}) is not first
    assert backend_for("personal", KEYS) is not first


def test_backend_for_team_sends_the_team_header_and_personal_never_does():
    """Does the team backend carry the configured team header, and the personal one not even when a team id is set?"""
    team = backend_for("team", {**KEYS, "RUNPOD_TEAM_HEADER": "X-RunPod-Team"})
    personal = backend_for("personal", KEYS)
    assert isinstance(team, RunPodBackend) and team.name == "team"
    assert team._client.headers["X-RunPod-Team"] == "team_1"
    assert team._client.headers["Authorization"] == "Bearer rpa_TEAMKEY0000000000000000"
    assert personal._client.headers["Authorization"] == "Bearer rpa_PERSONALKEY00000000000"
    assert not any(name.lower().startswith("x-team") for name in personal._client.headers)
    direct = RunPodBackend("personal", "rpa_PERSONALKEY00000000000", "http://127.0.0.1:9", team_id="team_1")
    assert "X-Team-Id" not in direct._client.headers


def test_backend_for_local_is_refused_unless_enabled(tmp_path):
    """Is the local backend refused with a message naming SAGAN_LOCAL_PODS when it is off, and given when on?"""
    with pytest.raises(BackendError) as caught:
        backend_for("local", KEYS)
    assert caught.value.reason == "spec_invalid" and "SAGAN_LOCAL_PODS=1" in caught.value.message
    for switch in ({"SAGAN_LOCAL_PODS": True}, {"TESTING": True}):
        backend = backend_for("local", {**KEYS, **switch, "SAGAN_LOCAL_PODS_DIR": str(tmp_path)})
        assert isinstance(backend, LocalBackend) and backend.root == Path(tmp_path)


def test_backend_for_an_unknown_account_names_the_known_ones():
    """Does an unknown account raise spec_invalid listing team, personal and local?"""
    with pytest.raises(BackendError) as caught:
        backend_for("spot", KEYS)
    assert caught.value.reason == "spec_invalid" and "team, personal, local" in caught.value.message


def test_rate_limit_headers_are_read_in_both_forms():
    """Are `RateLimit: limit=…, remaining=…, reset=N`, the structured `;t=N` form and Retry-After understood?"""
    def response(**headers):
        return httpx.Response(429, headers=headers)
    assert _ratelimit_reset(response(RateLimit="limit=100, remaining=0, reset=17")) == 17
    assert _ratelimit_reset(response(RateLimit='"default";r=0;t=9')) == 9
    assert _ratelimit_reset(response()) is None
    assert _retry_after(response(**{"Retry-After": "4"})) == 4
    assert _retry_after(response(**{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0


@pytest.mark.parametrize("status, detail, capacity", [
    (500, "There are no longer any instances available with the requested specifications.", True),
    (400, "create pod: There are no longer any instances available with enough disk space.", True),
    (409, "This machine does not have enough free GPUs", True),
    (500, "upstream request failed", False),
    (400, "gpu.id: unknown GPU type", False),
])
def test_capacity_wording_is_recognised_whatever_the_status(status, detail, capacity):
    """Is RunPod's capacity wording recognised in a problem+json body, and nothing else mistaken for it?"""
    response = httpx.Response(status, json={"title": "Could not create pod", "status": status, "detail": detail})
    assert _is_capacity(response) is capacity


def test_pod_is_read_from_the_v2_shape_with_ssh_from_runtime_ports():
    """Are status, cost, uptime, GPU and the SSH address read from a v2 pod (ssh from runtime.ports when absent)?"""
    pod = _pod_from({"id": "p1", "name": "sagan-1", "status": "running", "cost": 2.99,
                     "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 2}, "dataCenterId": "US-KS-2",
                     "runtime": {"uptime": 123, "ports": [{"private": 22, "public": 10341, "ip": "1.2.3.4"}]}})
    assert (pod.status, pod.cost_per_hr, pod.uptime_seconds) == ("RUNNING", 2.99, 123)
    assert (pod.gpu_id, pod.gpu_count, pod.data_center_id) == ("NVIDIA H100 80GB HBM3", 2, "US-KS-2")
    assert (pod.ssh_host, pod.ssh_port, pod.exit_code) == ("1.2.3.4", 10341, None)
    assert _pod_from({"id": "p2", "status": "EXITED", "runtime": None}).uptime_seconds == 0


def test_ssh_is_read_from_the_v2_proxy_and_direct_objects():
    """v2's `ssh` holds a `proxy` and a `direct` connection, each `{host, port, username, command}` or
    null: direct (public IP) first, else the proxy, with the user to connect as."""
    both = _pod_from({"id": "p1", "status": "RUNNING", "ssh": {
        "proxy": {"host": "ssh.runpod.io", "port": 22, "username": "p1-64410f2e", "command": "ssh p1-64410f2e@ssh.runpod.io"},
        "direct": {"host": "203.0.113.10", "port": 10341, "username": "root", "command": "ssh root@203.0.113.10 -p 10341"}}})
    assert (both.ssh_host, both.ssh_port, both.ssh_user) == ("203.0.113.10", 10341, "root")
    proxy_only = _pod_from({"id": "p1", "status": "RUNNING", "ssh": {
        "proxy": {"host": "ssh.runpod.io", "port": 22, "username": "p1-64410f2e"}, "direct": None}})
    assert (proxy_only.ssh_host, proxy_only.ssh_port, proxy_only.ssh_user) == ("ssh.runpod.io", 22, "p1-64410f2e")
    assert _pod_from({"id": "p1", "status": "PROVISIONING", "ssh": {"proxy": None, "direct": None}}).ssh_host is None
    assert _pod_from({"id": "p1", "status": "RUNNING", "ssh": None}).ssh_host is None


def test_capacity_is_recognised_by_a_problem_class_should_runpod_add_one():
    """v2's ErrorResponse has no `type` or `code` today (capacity is a 400 known by its detail); if one
    naming capacity comes, new wording with it is still provider_capacity, not spec_invalid."""
    response = httpx.Response(409, json={"title": "Conflict", "status": 409, "detail": "Try another data center later.",
                                         "type": "https://api.runpod.io/errors/insufficient-capacity"})
    assert _is_capacity(response)
    assert not _is_capacity(httpx.Response(402, json={"title": "Payment Required", "status": 402,
                                                      "detail": "Insufficient balance: no capacity to pay"}))


def test_pod_environment_is_an_allowlist_plus_the_request_env(tmp_path):
    """Does a pod get LANG, TZ, LC_*, PYTHON*, the sandbox's system PATH (the server's may name folders
    the sandbox does not show) and its own env, and none of the server's secrets?"""
    parent = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "TZ": "UTC", "LC_ALL": "C", "PYTHONUNBUFFERED": "1",
              "PYTHON_KEYRING_PASSWORD": "hunter2hunter2", "SECRET_KEY": "s" * 20,
              "DATABASE_URL": "postgresql://u:p@h/db", "RUNPOD_API_KEY_TEAM": "rpa_x", "ANTHROPIC_API_KEY": "sk-ant-x",
              "REDIS_URL": "redis://h", "HOME": "/root", "USER": "root"}
    env = pod_environment(parent, {"HF_TOKEN": "hf_named_secret", "SEED": "7"}, "/workspace")
    assert env == {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                   "TZ": "UTC", "LC_ALL": "C", "PYTHONUNBUFFERED": "1", "HOME": "/workspace", "TMPDIR": "/tmp",
                   "HF_TOKEN": "hf_named_secret", "SEED": "7"}


@pytest.mark.parametrize("database_url, warned", [
    ("postgresql+psycopg://sagan@127.0.0.1/sagan", True),
    ("postgresql+psycopg://sagan:pw@127.0.0.1/sagan", False),
    ("sqlite:////srv/sagan/instance/sagan.db", False),
])
def test_a_local_queue_host_is_warned_about_a_database_without_a_password(database_url, warned):
    """Does a worker serving `local` say when PostgreSQL takes no password?"""
    from services.core.instance_security import local_queue_warnings
    warnings = local_queue_warnings(database_url)
    assert bool(warnings) == warned and all("PostgreSQL should require" in text for text in warnings)


def test_instance_files_are_made_private_and_the_folder_only_passable(tmp_path):
    """The database, its WAL and the secret key become 0600; the folder 0711 (pass through, no listing)."""
    from services.core.instance_security import make_instance_private
    for name in ("sagan.db", "sagan.db-wal", "secret_key", "notes.txt"):
        (tmp_path / name).write_text("x")
        (tmp_path / name).chmod(0o644)
    make_instance_private(tmp_path)
    mode = lambda name: (tmp_path / name).stat().st_mode & 0o777  # noqa: E731
    assert (mode("sagan.db"), mode("sagan.db-wal"), mode("secret_key")) == (0o600, 0o600, 0o600)
    assert tmp_path.stat().st_mode & 0o777 == 0o711
