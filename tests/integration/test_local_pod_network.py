"""What a local pod reaches on the network, tried from inside real pods started through the
local backend: the host's Redis, PostgreSQL, the web server and a port on the host's own
non-loopback address are refused at once; the pod API it is told to post to still answers;
and a pod is refused, not started unisolated, where the filter cannot be set up."""
from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from services.dispatch.backends import BackendError, PodRequest, local_network
from services.dispatch.backends.local import LocalBackend
from tests.fakes.pod_receiver import PodReceiver

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or local_network.nft_path() is None,
                                reason="the filter needs root and nft (scripts/test_services.py installs nft)")

# Runs inside the pod: one TCP connect per target, and how it ended and how long it took.
PROBE = """
import json, socket, sys, time
report = {}
for name, host, port in json.loads(sys.argv[1]):
    started = time.monotonic()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    probe.settimeout(10)
    try:
        probe.connect((host, port))
        outcome = "connected"
    except OSError as exc:
        outcome = type(exc).__name__
    finally:
        probe.close()
    report[name] = [outcome, round(time.monotonic() - started, 3)]
print("PROBE " + json.dumps(report), flush=True)
"""


@pytest.fixture
def pods_dir():
    root = Path(tempfile.mkdtemp(prefix="sagan-net-pods-", dir="/tmp"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def backend(pods_dir):
    local = LocalBackend(pods_dir / "local-pods", stop_grace_seconds=2)
    yield local
    for pod in local.list_all(prefix=""):
        local.terminate(pod.id)


@pytest.fixture
def host_listener():
    """A TCP server on every address, reached by the host's first non-loopback address."""
    address = next((entry.address for entries in psutil.net_if_addrs().values() for entry in entries
                    if entry.family == socket.AF_INET and not entry.address.startswith("127.")), None)
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))
    server.listen(16)
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield address, server.getsockname()[1]
    stop.set()
    thread.join(5)
    server.close()


def pod_request(receiver, name, command):
    return PodRequest(name=name, image="local", args=command, gpu_id="cpu", gpu_count=0, cloud="SECURE",
                      disk_gb=0, volume_gb=0,
                      env={**receiver.env(), "SAGAN_KEEP_ALIVE_MINUTES": "0", "SAGAN_POD_NAME": name})


def probe_command(targets) -> str:
    encoded = base64.b64encode(PROBE.encode()).decode()
    return (f"python3 -c 'import base64; exec(base64.b64decode(\"{encoded}\"))' "
            f"'{json.dumps(targets)}'")


def run_probe(backend, receiver, name, targets) -> dict:
    pod = backend.create(pod_request(receiver, name, probe_command(targets)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and backend.get(pod.id).status == "RUNNING":
        time.sleep(0.1)
    log = backend.log_tail(pod.id)
    line = next((line for line in log.splitlines() if line.startswith("PROBE ")), None)
    assert line, log
    return json.loads(line[len("PROBE "):])


def reachable_from_here(host, port) -> bool:
    try:
        socket.create_connection((host, port), timeout=3).close()
        return True
    except OSError:
        return False


def test_a_pod_reaches_nothing_of_the_host_but_its_pod_api(app, backend, live_server, host_listener):
    """From inside a real local pod: are Redis, PostgreSQL, the web server and a port on the
    host's own interface address refused at once (connection refused, not a hang), while the
    pod API it is told to post to still answers?"""
    redis_url = urlsplit(app.config["REDIS_URL"])
    database_url = urlsplit(app.config["SQLALCHEMY_DATABASE_URI"])
    web = urlsplit(live_server.url)
    interface_address, interface_port = host_listener
    targets = [["redis", redis_url.hostname, redis_url.port or 6379],
               ["postgresql", database_url.hostname, database_url.port or 5432],
               ["web server", web.hostname, web.port],
               ["host interface", interface_address, interface_port],
               ["redis via 0.0.0.0", "0.0.0.0", redis_url.port or 6379]]
    if reachable_from_here("::1", redis_url.port or 6379):
        targets.append(["redis on ::1", "::1", redis_url.port or 6379])
    for _name, host, port in targets:
        assert reachable_from_here(host, port), f"{host}:{port} does not answer even outside a pod"

    with PodReceiver() as receiver:
        api = urlsplit(receiver.url)
        report = run_probe(backend, receiver, "sagan-net-aaaaaaaa-0-1",
                           [*targets, ["pod api", api.hostname, api.port]])
        assert report.pop("pod api")[0] == "connected"
        assert receiver.progress, "the bootstrap's own posts to the pod API arrive"
    for name, (outcome, seconds) in report.items():
        assert outcome == "ConnectionRefusedError", (name, outcome)
        assert seconds < 2, (name, seconds)


def test_the_filter_follows_the_pod_user_not_the_host(app, backend):
    """Is only the pod user filtered: does Sagan itself (this test process) still reach the
    services the pod cannot, once the filter is in place?"""
    with PodReceiver() as receiver:
        run_probe(backend, receiver, "sagan-net-bbbbbbbb-0-1", [])
    listed = subprocess.run([local_network.nft_path(), "list", "table", "inet", local_network.TABLE],
                            capture_output=True, text=True, check=True).stdout
    assert str(backend.user.pw_uid) in listed and "fib daddr type" in listed
    redis_url = urlsplit(app.config["REDIS_URL"])
    assert reachable_from_here(redis_url.hostname, redis_url.port or 6379)


def test_a_pod_that_cannot_be_isolated_is_refused_not_started(pods_dir, monkeypatch):
    """Without nft, or when the pod would run as Sagan's own user (nothing to filter on), is
    the pod refused with what to do, and started only when the owner opted in?"""
    with PodReceiver() as receiver:
        as_root = LocalBackend(pods_dir / "as-root", run_as=None, stop_grace_seconds=2)
        with pytest.raises(BackendError) as caught:
            as_root.create(pod_request(receiver, "sagan-net-cccccccc-0-1", "true"))
        assert "SAGAN_LOCAL_PODS_UNISOLATED" in caught.value.message and "root" in caught.value.message
        assert not (pods_dir / "as-root" / "sagan-net-cccccccc-0-1").exists()

        monkeypatch.setattr(local_network, "nft_path", lambda: None)
        without_nft = LocalBackend(pods_dir / "no-nft", stop_grace_seconds=2)
        with pytest.raises(BackendError) as caught:
            without_nft.create(pod_request(receiver, "sagan-net-dddddddd-0-1", "true"))
        assert "apt-get install nftables" in caught.value.message

        opted_in = LocalBackend(pods_dir / "opted-in", stop_grace_seconds=2, unisolated=True)
        pod = opted_in.create(pod_request(receiver, "sagan-net-eeeeeeee-0-1", "true"))
        try:
            assert pod.status in ("RUNNING", "EXITED")
        finally:
            opted_in.terminate(pod.id)
