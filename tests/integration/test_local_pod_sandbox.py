"""Local pods cannot reach each other or Sagan's data. Each attack below
worked before local pods ran in their own bubblewrap sandbox as a dedicated user:

- a pod read another pod's `/proc/<pid>/environ` and so its `spt_` progress token;
- a pod read the instance folder's SQLite database (and its WAL) and the secret key;
- a pod read another pod's working directory.

Now each pod has a private /proc (its own pid namespace) and sees only its own folder at
/workspace; it keeps the network (it installs packages)."""
from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from services.code import system_users
from services.dispatch.backends import BackendError, PodRequest
from services.dispatch.backends.local import LocalBackend
from tests.fakes.pod_receiver import PodReceiver

VICTIM_TOKEN = "spt_victim_pod_token_7d1c0ffee0000"


@pytest.fixture
def instance():
    """An instance folder laid out like the default: database, WAL, secret key, and local-pods inside."""
    root = Path(tempfile.mkdtemp(prefix="sagan-instance-"))
    root.chmod(0o711)
    (root / "sagan.db").write_bytes(b"SQLite format 3\x00 owner password hash here")
    (root / "sagan.db-wal").write_bytes(b"wal with a session row")
    (root / "secret_key").write_text("the-instance-secret-key")
    for name in ("sagan.db", "sagan.db-wal", "secret_key"):
        (root / name).chmod(0o644)  # even if a umask left them readable, the pod must not see them
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def backend(instance):
    local = LocalBackend(instance / "local-pods", stop_grace_seconds=2)
    yield local
    for pod in local.list_all(prefix=""):
        local.terminate(pod.id)


def request(receiver, name, args, **env):
    return PodRequest(name=name, image="local", args=args, gpu_id="cpu", gpu_count=0, cloud="SECURE", disk_gb=0,
                      volume_gb=0, env={**receiver.env(), "SAGAN_KEEP_ALIVE_MINUTES": "0", "SAGAN_POD_NAME": name,
                                        **env})


def finished(local, pod_id, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = local.get(pod_id)
        if pod is not None and pod.status != "RUNNING":
            return pod
        time.sleep(0.05)
    raise AssertionError(local.log_tail(pod_id))


def uploaded(receiver, name) -> str:
    return next(a["body"].decode() for a in receiver.artifacts if a["name"] == name)


def test_a_pod_cannot_read_another_pods_environment_or_folder(backend, instance):
    """The attack: the victim pod runs with its token in its environment; the attacker scans every
    /proc/<pid>/environ it can see, tries the victim's host pid directly, and reads its folder."""
    with PodReceiver() as victim_receiver, PodReceiver() as receiver:
        victim = backend.create(request(victim_receiver, "sagan-7-aaaaaaaa-0-1",
                                        "echo private-notes > /workspace/notes.txt; sleep 60",
                                        SAGAN_POD_PROGRESS_TOKEN=VICTIM_TOKEN))
        victim_dir = instance / "local-pods" / victim.id
        deadline = time.monotonic() + 15
        while not (victim_dir / "work" / "notes.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        leader = int((victim_dir / "pid").read_text())
        with open(f"/proc/{leader}/environ", "rb") as handle:  # the host (root) sees it: it is there
            assert VICTIM_TOKEN.encode() in handle.read()
        script = (f"cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' > /workspace/sagan-artifacts/seen.txt; "
                  f"cat /proc/{leader}/environ >> /workspace/sagan-artifacts/seen.txt 2>&1; "
                  f"cat {victim_dir}/work/notes.txt >> /workspace/sagan-artifacts/seen.txt 2>&1; "
                  f"ls /proc | grep -c '^[0-9]' > /workspace/sagan-artifacts/pids.txt")
        attacker = backend.create(request(receiver, "sagan-8-bbbbbbbb-0-1", script))
        assert finished(backend, attacker.id).exit_code == 0, backend.log_tail(attacker.id)
        seen = uploaded(receiver, "seen.txt")
        assert VICTIM_TOKEN not in seen and "private-notes" not in seen
        assert "SAGAN_POD_NAME=sagan-8-bbbbbbbb-0-1" in seen  # it did read its own environment
        assert int(uploaded(receiver, "pids.txt")) < 10  # its own few processes, not the host's
        assert VICTIM_TOKEN not in backend.log_tail(attacker.id)


def test_a_pod_cannot_read_the_instance_database_or_secret_key(backend, instance):
    """The attack: read the SQLite database, its WAL and the secret key by their host paths."""
    with PodReceiver() as receiver:
        script = "; ".join(f"cat {instance / name} >> /workspace/sagan-artifacts/loot.txt 2>&1"
                           for name in ("sagan.db", "sagan.db-wal", "secret_key"))
        script += f"; ls {instance} >> /workspace/sagan-artifacts/loot.txt 2>&1; true"
        pod = backend.create(request(receiver, "sagan-9-cccccccc-0-1", script))
        assert finished(backend, pod.id).exit_code == 0, backend.log_tail(pod.id)
        loot = uploaded(receiver, "loot.txt")
        assert "owner password hash" not in loot and "session row" not in loot
        assert "the-instance-secret-key" not in loot and "No such file or directory" in loot


def test_pods_keep_the_network_and_their_own_workspace(backend):
    """What a pod may do: reach a server over the network (here Sagan's receiver on loopback) and
    `cd /workspace`, which is its own folder on the host."""
    with PodReceiver() as receiver:
        pod = backend.create(request(receiver, "sagan-10-dddddddd-0-1",
                                     "cd /workspace && pwd > sagan-artifacts/where.txt && id -un >> sagan-artifacts/where.txt"))
        assert finished(backend, pod.id).exit_code == 0
        lines = uploaded(receiver, "where.txt").split()
        assert lines[0] == "/workspace"
        assert lines[1] == ("sagan-pod" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name)


@pytest.mark.skipif(os.geteuid() != 0, reason="separate users need root")
def test_pods_and_sandboxed_code_never_share_a_user(instance):
    """The pod user and the code sandbox's user are two accounts; naming the same one is refused."""
    with pytest.raises(BackendError) as caught:
        LocalBackend(instance / "local-pods", run_as="sagan-sandbox", sandbox_user="sagan-sandbox")
    assert "different users" in caught.value.message
    pod_user, sandbox_user = system_users.ensure_user("sagan-pod"), system_users.ensure_user("sagan-sandbox")
    assert pod_user.pw_uid != sandbox_user.pw_uid and 0 not in (pod_user.pw_uid, sandbox_user.pw_uid)
