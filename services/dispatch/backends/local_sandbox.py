"""The bubblewrap sandbox each local pod runs in.

A local pod is the owner's code, but it runs on the Sagan host next to the instance folder
(database, secret key, Redis socket), other pods' folders and the code sandbox's worktrees.
Without a sandbox a pod could read another pod's `/proc/<pid>/environ` (its progress token)
or Sagan's SQLite database. Each pod therefore gets:

- its own pid, IPC and UTS namespaces and a private `/proc`: it sees its own processes only;
- a filesystem of system directories read-only (`/usr`, `/bin`, `/lib…`, a few `/etc`
  files for DNS, TLS and pip), its own directory at `/workspace` (so `cd /workspace/<repo>`
  works as on RunPod), its state folder at `/run/sagan-state`, a private `/tmp`, and
  nothing else — no instance folder, no other pod, no worktree;
- a `/etc/passwd` naming only its own user;
- the network of the host: pods install packages and clone repositories. Nothing of the host
  itself is reachable: a packet filter on the pod user rejects every address of this host
  but the pod API (local_network.py).

When Sagan runs as root, bwrap is started as the dedicated pod user (SAGAN_LOCAL_POD_USER,
created if missing), never the code sandbox's user; otherwise it runs as Sagan's own user,
still confined by the namespaces above but without the separation of users. Processes stay
in bwrap's process group (no --new-session), so stop() reaches them with one killpg; with
its own pid namespace, nothing in the pod outlives the namespace's first process.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from services.code import sandbox as code_sandbox

WORKSPACE = "/workspace"
STATE = "/run/sagan-state"
BOOTSTRAP = "/run/sagan/pod_bootstrap.sh"
# What a pod needs of /etc besides the libraries': names, DNS, TLS roots, pip's own settings.
_ETC = ("resolv.conf", "hosts", "nsswitch.conf", "host.conf", "gai.conf", "services", "protocols",
        "ssl", "ca-certificates", "ca-certificates.conf", "pip.conf", "localtime", "ld.so.cache",
        "ld.so.conf", "ld.so.conf.d", "alternatives", "mime.types")


class SandboxMissing(Exception):
    """bubblewrap is not installed: local pods do not run unsandboxed."""


def bwrap_path() -> str:
    found = shutil.which("bwrap")
    if not found:
        raise SandboxMissing("Local pods run inside bubblewrap, which is not installed "
                             "(Debian/Ubuntu: apt-get install bubblewrap).")
    return found


def passwd_text(name: str, uid: int, gid: int) -> tuple[str, str]:
    """/etc/passwd and /etc/group for the pod: its own user only, home at /workspace."""
    return (f"{name}:x:{uid}:{gid}:{name}:{WORKSPACE}:/bin/bash\n", f"{name}:x:{gid}:\n")


def command(bwrap: str, pod_dir: Path, *, passwd_fd: int, group_fd: int, readonly: list[str]) -> list[str]:
    """bwrap's argv for the pod in `pod_dir` (work/ → /workspace, state/ → /run/sagan-state)."""
    args = [bwrap, "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sagan-pod",
            *code_sandbox.system_filesystem(_ETC, passwd_fd=passwd_fd, group_fd=group_fd),
            "--tmpfs", "/tmp"]
    for path in readonly:
        args += ["--ro-bind", path, path]
    args += ["--bind", str(pod_dir / "work"), WORKSPACE,
             "--bind", str(pod_dir / "state"), STATE,
             "--ro-bind", str(pod_dir / "pod_bootstrap.sh"), BOOTSTRAP,
             "--chdir", WORKSPACE, "--", "bash", BOOTSTRAP]
    return args


def repository_paths(repo_url: str) -> list[str]:
    """A research repository on this host's filesystem (a path or file:// URL) is bound
    read-only at the same path, so the pod can clone it; anything else is fetched over the network."""
    if not repo_url:
        return []
    path = repo_url[len("file://"):] if repo_url.startswith("file://") else repo_url
    if not path.startswith("/"):
        return []
    path = os.path.realpath(path)
    return [path] if os.path.isdir(path) else []
