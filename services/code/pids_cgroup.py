"""A process limit for one sandboxed run alone: a pids cgroup per run.

RLIMIT_NPROC counts every process of an *account*, so runs that share one (the worktree
sandboxes all run as SAGAN_SANDBOX_USER, who owns the worktrees) share one limit: a fork
bomb in one run left the next unable to start ("Creating new namespace failed"). A pids
cgroup counts only the processes inside it, so each run gets one of its own, `pids.max` =
sandbox.PROCESS_LIMIT, under `<pids hierarchy>/sagan-sandboxes/<run>`; the account's own
limit is then raised to a multiple of it, a backstop rather than the bound.

Only root can make cgroups, and only where a pids controller is mounted writable: cgroup v1's
`pids` hierarchy, or cgroup v2 where `pids` can be enabled for Sagan's subtree (a container
whose cgroup holds processes cannot). Elsewhere `RunCgroup.make` answers None and runs keep
the per-account limit alone (docs/security.md says so).

A process joins by writing its own pid to `cgroup.procs`, which cgroup v2 allows an
unprivileged process only within its own delegated subtree; so the run starts as root in a
one-line shell that joins and then execs `setpriv` to drop to the account (`joining_argv`):
no Python runs between fork and exec, as the sandbox requires.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

PARENT = "sagan-sandboxes"
# How long removing a run's cgroup waits for its last processes to be reaped.
REMOVE_SECONDS = 5.0
_JOIN = 'echo $$ > "$0" && exec "$@"'


def _mounts() -> list[tuple[str, str, list[str]]]:
    """(mount point, file system type, super options) of every cgroup mount we can see."""
    found = []
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                fields = line.split()
                if "-" not in fields:
                    continue
                separator = fields.index("-")
                fstype = fields[separator + 1]
                if fstype in ("cgroup", "cgroup2"):
                    found.append((fields[4], fstype, fields[separator + 3].split(",")))
    except OSError:
        pass
    return found


def _enable_pids(folder: Path) -> bool:
    """cgroup v2: let `folder`'s children use the pids controller."""
    try:
        if "pids" in (folder / "cgroup.subtree_control").read_text().split():
            return True
        (folder / "cgroup.subtree_control").write_text("+pids")
        return True
    except OSError:
        return False


def parent_folder() -> Path | None:
    """The folder runs' cgroups go under (made if missing), or None where Sagan cannot make
    pids cgroups (not root, no pids controller, a read-only or busy hierarchy, no setpriv)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    for mount_point, fstype, options in _mounts():
        root = Path(mount_point)
        if fstype == "cgroup" and "pids" not in options:
            continue
        if fstype == "cgroup2":
            try:
                if "pids" not in (root / "cgroup.controllers").read_text().split():
                    continue
            except OSError:
                continue
            if not _enable_pids(root):
                continue
        parent = root / PARENT
        try:
            parent.mkdir(mode=0o755, exist_ok=True)
        except OSError:
            continue
        if fstype == "cgroup2" and not _enable_pids(parent):
            continue
        return parent
    return None


class RunCgroup:
    """One run's pids cgroup: made before the run, removed after it."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def make(cls, process_limit: int) -> "RunCgroup | None":
        parent = parent_folder()
        if parent is None:
            return None
        path = parent / uuid.uuid4().hex
        try:
            path.mkdir(mode=0o755)
            (path / "pids.max").write_text(str(process_limit))
        except OSError as exc:
            log.warning("could not make a pids cgroup for a sandbox (%s); its account's limit alone applies", exc)
            try:
                path.rmdir()
            except OSError:
                pass
            return None
        return cls(path)

    def joining_argv(self, argv: list[str], uid: int | None, gid: int | None) -> list[str]:
        """`argv`, run by a shell that first joins this cgroup, then (with `uid`) drops to that
        account with setpriv: the whole run, bwrap and all it starts, counts here."""
        drop = [] if uid is None else [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={gid}",
                                       "--clear-groups", "--inh-caps=-all", "--"]
        return ["/bin/sh", "-c", _JOIN, str(self.path / "cgroup.procs"), *drop, *argv]

    def current(self) -> int:
        try:
            return int((self.path / "pids.current").read_text())
        except (OSError, ValueError):
            return 0

    def remove(self) -> None:
        """Kill anything left in it and remove it (a run normally leaves nothing)."""
        deadline = time.monotonic() + REMOVE_SECONDS
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    log.warning("a sandbox's pids cgroup %s is still busy; left in place", self.path)
                    return
            try:
                pids = (self.path / "cgroup.procs").read_text().split()
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            time.sleep(0.05)
