"""Pods as subprocesses on this host (SPEC §6.9): CPU-only work, and the embedded default.

Each pod gets a directory `<root>/<pod name>/`:

    pod.json, pid, started_at   written here, by the server (owned by the server's user)
    stopped                     written by stop(): the pod was stopped on purpose
    output.log                  the pod's stdout and stderr
    pod_bootstrap.sh            the bootstrap as it was when the pod started
    state/exit_code             written by the bootstrap (SAGAN_POD_STATE_DIR)
    work/                       the pod's working directory and HOME

The web and the worker are different processes, so everything `get()` needs is on disk.
Each pod runs in its own bubblewrap sandbox (local_sandbox.py): `work/` is its /workspace,
`state/` its /run/sagan-state, and nothing else of the host's folders is visible. When the
server runs as root the pod runs as a dedicated user (SAGAN_LOCAL_POD_USER, `sagan-pod`,
created if missing; never the code sandbox's user), and only `state/` and `work/` are
writable by it: a pod cannot rewrite its own `pid` file to make stop() signal some other
process group. stop() also checks that the pid still belongs to the process it started
(its start time), so a recycled pid is never signalled.

The pod keeps outbound network but reaches nothing of this host (loopback, the host's own
addresses) except its pod API: an nftables filter on the pod user (local_network.py). A pod
that cannot be kept off the host is refused, unless SAGAN_LOCAL_PODS_UNISOLATED says otherwise.

The pod's environment is built from an allowlist plus the request's env; nothing else of
the server's environment (SECRET_KEY, DATABASE_URL, RUNPOD_/ANTHROPIC_ keys) reaches it.
Limits: pods of one host share the pod user (the sandbox keeps them apart, the user does
not), and a pod that leaves its process group on purpose (setsid) escapes stop() until
its pid namespace ends; this backend is for the owner's own code.
"""
from __future__ import annotations

import json
import logging
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import psutil

from services.code import system_users
from services.core.redact import SECRET_ENV_SUFFIXES
from services.dispatch.backends import local_network, local_sandbox
from config import INSTANCE_DIR
from services.core.pod_accounts import PodAccount
from services.dispatch.backends.base import (
    BackendError,
    LogLine,
    PodRequest,
    ProviderPod,
    registers_backend,
    setting,
)

BOOTSTRAP = Path(__file__).resolve().parents[3] / "scripts" / "pod_bootstrap.sh"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_ALLOWED_ENV = ("PATH", "LANG", "LANGUAGE", "TZ")
_ALLOWED_PREFIXES = ("LC_", "PYTHON")
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
log = logging.getLogger(__name__)
# Pods this process started, by directory, so their exits are collected here (a long-lived
# worker would otherwise keep zombies, which look alive to a pid check).
_CHILDREN: dict[str, subprocess.Popen] = {}


def pod_environment(parent: dict[str, str], request_env: dict[str, str], workdir: Path | str) -> dict[str, str]:
    """The allowlisted part of the server's environment, then the request's env on top.

    PATH is the sandbox's system path: the server's may name folders the pod cannot see."""
    env = {}
    for name, value in parent.items():
        allowed = name in _ALLOWED_ENV or name.startswith(_ALLOWED_PREFIXES)
        if allowed and not name.endswith(SECRET_ENV_SUFFIXES):
            env[name] = value
    env["PATH"] = _DEFAULT_PATH
    env["HOME"] = str(workdir)
    env["TMPDIR"] = "/tmp"
    env.update({str(k): str(v) for k, v in request_env.items()})
    return env


class LocalBackend:
    """Runs each pod's command through scripts/pod_bootstrap.sh as a local process group."""

    def __init__(self, root_dir, *, run_as: str | None = "sagan-pod", stop_grace_seconds: float = 10.0,
                 bootstrap: Path | str = BOOTSTRAP, sandbox_user: str | None = None, unisolated: bool = False,
                 name: str = "local"):
        self.name = name  # the pod account it serves
        self.root = Path(root_dir)
        # The owner's explicit opt-in (SAGAN_LOCAL_PODS_UNISOLATED) to pods that can reach this
        # host's services when the filter keeping them off cannot be set up (local_network.py).
        self.unisolated = unisolated
        self.stop_grace_seconds = stop_grace_seconds
        self.bootstrap = Path(bootstrap)
        # Drop privileges only when we have them; otherwise the pod runs as us (in its sandbox).
        self.user = None
        if run_as and os.geteuid() == 0:
            if sandbox_user and run_as == sandbox_user:
                raise BackendError("spec_invalid", f"Local pods and sandboxed code must run as different users, "
                                                   f"but both are {run_as!r}: change SAGAN_LOCAL_POD_USER.")
            try:
                self.user = system_users.ensure_user(run_as)
            except system_users.UserUnavailable as exc:
                raise BackendError("provider_error", f"Local pods should run as {run_as!r}: {exc}") from None

    # --- the interface ---------------------------------------------------------------
    def create(self, request: PodRequest) -> ProviderPod:
        """Start the pod's bootstrap in its own directory, session and (unprivileged) user."""
        if not _NAME.match(request.name):
            raise BackendError("spec_invalid", f"Local pod name {request.name!r} is not a safe directory name.")
        try:
            bwrap = local_sandbox.bwrap_path()
        except local_sandbox.SandboxMissing as exc:
            raise BackendError("provider_error", str(exc)) from None
        self._isolate_network(request)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)  # the pod user may pass through to its own folder, never list the others
        pod_dir = self.root / request.name
        try:
            pod_dir.mkdir(mode=0o711)
        except FileExistsError:
            raise BackendError("provider_error", f"A local pod named {request.name} already exists.",
                               status=409) from None
        pod_dir.chmod(0o711)  # a private umask must not make it unreachable for the pod's user
        state_dir, workdir = pod_dir / "state", pod_dir / "work"
        for path, mode in ((state_dir, 0o755), (workdir, 0o700), (workdir / "tmp", 0o700)):
            path.mkdir()
            path.chmod(mode)
            if self.user:
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        bootstrap = pod_dir / "pod_bootstrap.sh"
        shutil.copyfile(self.bootstrap, bootstrap)
        bootstrap.chmod(0o755)
        if self.user:
            self._check_reachable(pod_dir)

        # Paths as the pod sees them inside its sandbox: the same layout as a RunPod pod.
        env = pod_environment(dict(os.environ), request.env, local_sandbox.WORKSPACE)
        name = self.user.pw_name if self.user else pwd.getpwuid(os.geteuid()).pw_name
        env.update(USER=name, LOGNAME=name)
        env.setdefault("SAGAN_ARTIFACT_DIR", f"{local_sandbox.WORKSPACE}/sagan-artifacts")
        env.update(SAGAN_DOCKER_ARGS=request.args, SAGAN_WORKDIR=local_sandbox.WORKSPACE,
                   SAGAN_POD_STATE_DIR=local_sandbox.STATE)
        uid = self.user.pw_uid if self.user else os.geteuid()
        gid = self.user.pw_gid if self.user else os.getegid()
        passwd, group = local_sandbox.passwd_text(name, uid, gid)
        passwd_fd, group_fd = _data_pipe(passwd), _data_pipe(group)
        argv = local_sandbox.command(bwrap, pod_dir, passwd_fd=passwd_fd, group_fd=group_fd,
                                     readonly=local_sandbox.repository_paths(env.get("SAGAN_REPO_URL", "")))

        metadata = {"name": request.name, "image": request.image, "gpu_id": request.gpu_id,
                    "gpu_count": request.gpu_count, "cloud": request.cloud,
                    "user": self.user.pw_name if self.user else None}
        log = open(pod_dir / "output.log", "ab")
        try:
            # user=/group=/extra_groups= drop privileges between fork and exec without running
            # Python in the child (a preexec_fn is unsafe once the worker has threads).
            process = subprocess.Popen(
                argv, cwd="/", env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                pass_fds=(passwd_fd, group_fd),
                **({"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
                   if self.user else {}))
        except OSError as exc:
            shutil.rmtree(pod_dir, ignore_errors=True)
            raise BackendError("provider_error", f"Could not start local pod {request.name}: {exc}") from None
        finally:
            log.close()
            os.close(passwd_fd)
            os.close(group_fd)
        _CHILDREN[str(pod_dir)] = process
        identity = _proc_stat(process.pid)
        (pod_dir / "pid").write_text(f"{process.pid}\n")
        (pod_dir / "started_at").write_text(f"{time.time()}\n")
        # Written last: a pod is known (get, list) once everything get() reads is on disk.
        # No env in it: the env holds the pod's token and named secrets.
        _write_atomic(pod_dir / "pod.json", json.dumps(
            {**metadata, "start_ticks": identity[1] if identity else None}))
        return self.get(request.name) or ProviderPod(request.name, request.name, "RUNNING")

    def get(self, pod_id: str) -> ProviderPod | None:
        """The pod from its directory: RUNNING while its process lives, then EXITED (or
        TERMINATED when it died without an exit code and nobody stopped it); None if unknown."""
        pod_dir = self._dir(pod_id)
        if pod_dir is None or not (pod_dir / "pod.json").exists():
            return None
        metadata = _read_json(pod_dir / "pod.json")
        started = _read_float(pod_dir / "started_at")
        exit_code = _read_int(pod_dir / "state" / "exit_code")
        process = self._process(pod_id, pod_dir, metadata)
        if process is not None:
            status, ended = "RUNNING", time.time()
        else:
            status = "EXITED" if exit_code is not None or (pod_dir / "stopped").exists() else "TERMINATED"
            ended = _last_mtime(pod_dir / "stopped", pod_dir / "state" / "exit_code", pod_dir / "output.log")
        uptime = int(max(ended - started, 0)) if started else 0
        return ProviderPod(
            id=pod_id, name=metadata.get("name", pod_id), status=status, cost_per_hr=0.0,
            uptime_seconds=uptime, gpu_id=metadata.get("gpu_id"), gpu_count=metadata.get("gpu_count") or 0,
            data_center_id="local", exit_code=exit_code)

    def list_by_name(self, name: str) -> list[ProviderPod]:
        """The pod of that name, if this host has it (the pod id is its name)."""
        pod = self.get(name)
        return [pod] if pod is not None else []

    def list_all(self, prefix: str = "sagan-") -> list[ProviderPod]:
        """Every local pod whose name starts with `prefix`."""
        if not self.root.is_dir():
            return []
        try:
            entries = sorted(self.root.iterdir())
        except PermissionError:
            # The folder is root's (0711: pods may pass, nobody else may list): a process of the
            # worker account cannot see which pods exist; the `local` worker can.
            raise BackendError("provider_error", f"{self.root} cannot be listed by this process: only this "
                                                 "host's local worker (root) sees its pods.", status=403) from None
        pods = (self.get(entry.name) for entry in entries if entry.is_dir() and entry.name.startswith(prefix))
        return [pod for pod in pods if pod is not None]

    def stop(self, pod_id: str) -> ProviderPod | None:
        """SIGTERM to the pod's process group, SIGKILL after the grace period; files are kept."""
        pod_dir = self._dir(pod_id)
        if pod_dir is None or not (pod_dir / "pod.json").exists():
            return None
        if not (pod_dir / "stopped").exists():
            (pod_dir / "stopped").write_text(f"{time.time()}\n")
        self._kill_group(pod_id, pod_dir)
        return self.get(pod_id)

    def stops_here(self, pod_id: str) -> bool:
        """Whether this process may stop (and remove) the pod: root may; otherwise only the user
        that started it, who owns its folder. A pod started by root runs as the pod user, whom
        only root can signal, in a folder only root can write: a process of the worker account
        (a `sagan-worker@` unit, the web) must leave its stop to the `local` queue's worker.
        A pod this host does not have is nothing to stop, here as anywhere."""
        if os.geteuid() == 0:
            return True
        pod_dir = self._dir(pod_id)
        if pod_dir is None:
            return True
        try:
            return pod_dir.stat().st_uid == os.geteuid()
        except OSError:
            return True

    def terminate(self, pod_id: str) -> None:
        """Stop the pod and delete its directory."""
        pod_dir = self._dir(pod_id)
        if pod_dir is None:
            return
        if (pod_dir / "pod.json").exists():
            self.stop(pod_id)
        _remove_tree(pod_dir)
        _CHILDREN.pop(str(pod_dir), None)

    def log_tail(self, pod_id: str, max_bytes: int = 20_000) -> str:
        """The end of the pod's output (stdout and stderr), for pages and diagnostics."""
        pod_dir = self._dir(pod_id)
        path = pod_dir / "output.log" if pod_dir else None
        if path is None or not path.exists():
            return ""
        with open(path, "rb") as handle:
            handle.seek(max(path.stat().st_size - max_bytes, 0))
            return handle.read().decode("utf-8", "replace")

    def logs(self, pod_id: str, *, tail: int = 100, since: str | None = None,
             max_bytes: int = 2_000_000) -> list[LogLine] | None:
        """The last `tail` lines of output.log (None once the pod's directory is gone).

        A plain file has no time per line, so `since` cannot narrow it: the caller is told."""
        pod_dir = self._dir(pod_id)
        if pod_dir is None:
            return None
        text = self.log_tail(pod_id, max_bytes=max_bytes)
        lines = text.splitlines()
        if len(text.encode()) >= max_bytes and lines:
            lines = lines[1:]  # the first line was cut in the middle by the byte window
        return [LogLine(line) for line in lines[-tail:]] if tail > 0 else []

    # --- processes -------------------------------------------------------------------
    def _dir(self, pod_id: str) -> Path | None:
        return self.root / pod_id if _NAME.match(pod_id or "") and (self.root / pod_id).is_dir() else None

    def _process(self, pod_id: str, pod_dir: Path, metadata: dict) -> int | None:
        """The pod's leader pid if it still runs and is the process we started (not a zombie)."""
        if not self._reap(pod_dir):
            return None
        pid = _read_int(pod_dir / "pid")
        stat_ = _proc_stat(pid) if pid else None
        if stat_ is None or stat_[2] in ("Z", "X"):
            return None
        # A pid names our process only with the start time we recorded; otherwise it was recycled.
        return pid if stat_[1] == metadata.get("start_ticks") else None

    def _members(self, pgid: int, since_ticks: int) -> list[int]:
        """Live processes of the pod's process group started no earlier than the pod."""
        members = []
        for pid in psutil.pids():
            stat_ = _proc_stat(pid)
            if stat_ and stat_[0] == pgid and stat_[1] >= since_ticks and stat_[2] not in ("Z", "X"):
                members.append(pid)
        return members

    def _kill_group(self, pod_id: str, pod_dir: Path) -> None:
        """SIGTERM, grace, SIGKILL to the pod's group (start_new_session: group id = leader pid).

        Only a group that is provably ours is signalled: if a process holds the leader's pid
        with another start time the pid was recycled, and the group is someone else's. (While
        any member of our group lives, the kernel cannot hand its id to a new group.)
        """
        pgid = _read_int(pod_dir / "pid")
        since = _read_json(pod_dir / "pod.json").get("start_ticks")
        if pgid is None or pgid <= 1 or since is None:
            return
        leader = _proc_stat(pgid)
        if leader is not None and leader[1] != since:
            return
        if not self._members(pgid, since):
            return
        _killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_seconds
        while time.monotonic() < deadline:
            self._reap(pod_dir)
            if not self._members(pgid, since):
                return
            time.sleep(0.05)
        if self._members(pgid, since):
            _killpg(pgid, signal.SIGKILL)
            for _ in range(40):  # SIGKILL cannot be ignored; give the kernel a moment
                self._reap(pod_dir)
                if not self._members(pgid, since):
                    break
                time.sleep(0.05)
        self._reap(pod_dir)

    @staticmethod
    def _reap(pod_dir: Path) -> bool:
        """Collect the pod's exit if this process started it; False once it has ended."""
        child = _CHILDREN.get(str(pod_dir))
        if child is not None and child.poll() is not None:
            _CHILDREN.pop(str(pod_dir), None)
            return False
        return True

    def _isolate_network(self, request: PodRequest) -> None:
        """Keep the pod off this host's own services (local_network.py), or refuse to start it.

        The exceptions are the pod API's origin, from the URLs Sagan tells the pod (the
        provisioner sets them from SAGAN_BASE_URL after the plan's env, so a plan cannot
        point them at another local port), and the request's host_urls (the owner's research
        repository, from Settings)."""
        urls = [request.env.get("SAGAN_PROGRESS_URL", ""), request.env.get("SAGAN_ARTIFACT_URL", ""),
                *request.host_urls]
        try:
            local_network.check(self.user.pw_uid if self.user else None, urls)
        except local_network.NotIsolated as exc:
            if not self.unisolated:
                raise BackendError("provider_error", str(exc)) from None
            log.warning("Local pod %s starts WITHOUT network isolation (%s=1): it can reach every service on "
                        "this host. %s", request.name, local_network.OPT_IN, exc)

    def _check_reachable(self, pod_dir: Path) -> None:
        """Fail clearly when the unprivileged user cannot reach the pod's directory."""
        for parent in [pod_dir, *pod_dir.parents]:
            mode = parent.stat().st_mode
            if not (mode & stat.S_IXOTH):
                shutil.rmtree(pod_dir, ignore_errors=True)
                raise BackendError("provider_error", (
                    f"Local pods run as {self.user.pw_name}, who cannot enter {parent}: set "
                    f"SAGAN_LOCAL_PODS_DIR to a directory others may traverse (chmod o+x)."))


def _proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(process group, start time in clock ticks since boot, state) from /proc/<pid>/stat.

    Start ticks, unlike wall-clock start times, are exact and never shift with the clock,
    so they tell a recycled pid from ours across processes and restarts of Sagan.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        fields = data[data.rindex(b")") + 2:].split()
        return int(fields[2]), int(fields[19]), fields[0].decode()
    except (OSError, ValueError, IndexError):
        return None


def _data_pipe(text: str) -> int:
    """A pipe's read end holding `text` (small: it fits the pipe buffer), for --ro-bind-data."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, text.encode())
    os.close(write_fd)
    return read_fd


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _remove_tree(path: Path) -> None:
    """rmtree that also removes folders the pod made read-only for itself.

    Only needed (and only done) when pods run as our own user; root needs no permission.
    Symlinks are never chmod-ed: that would change their targets.
    """
    if os.geteuid() != 0:
        for folder, subfolders, _files in os.walk(path):
            for name in subfolders:
                child = os.path.join(folder, name)
                if not os.path.islink(child):
                    try:
                        os.chmod(child, 0o700)
                    except OSError:
                        pass
    shutil.rmtree(path, ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _read_float(path: Path) -> float | None:
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _last_mtime(*paths: Path) -> float:
    times = [p.stat().st_mtime for p in paths if p.exists()]
    return max(times) if times else time.time()


def local_pods_allowed(config) -> bool:
    """The local backend runs code on this host: only when SAGAN_LOCAL_PODS is on (the
    embedded `make run` turns it on) or under tests."""
    return bool(setting(config, "SAGAN_LOCAL_PODS", False) or setting(config, "TESTING", False))


@registers_backend("local")
def build(account: PodAccount, config) -> LocalBackend:
    """The local backend from Sagan's settings, when this server allows local pods."""
    if not local_pods_allowed(config):
        raise BackendError("spec_invalid", "The local pod backend is off on this server: it runs "
                                           "pod commands on the Sagan host. Set SAGAN_LOCAL_PODS=1 "
                                           "to enable it, or choose an account on a provider.")
    return LocalBackend(
        setting(config, "SAGAN_LOCAL_PODS_DIR", None) or INSTANCE_DIR / "local-pods",
        run_as=setting(config, "SAGAN_LOCAL_POD_USER", "sagan-pod") or "sagan-pod",
        stop_grace_seconds=float(setting(config, "SAGAN_LOCAL_POD_STOP_GRACE_SECONDS", 10)),
        sandbox_user=setting(config, "SAGAN_SANDBOX_USER", "sagan-sandbox") or "sagan-sandbox",
        unisolated=bool(setting(config, "SAGAN_LOCAL_PODS_UNISOLATED", False)),
        name=account.name,
    )
