"""Git worktrees for code-writing agents (SPEC §5.7, §6.11): one per experiment.

Layout on the host that serves the `local` queue (ARCHITECTURE §1: worktrees are local by
nature and only that host touches them):

    <SAGAN_WORKSPACES_DIR>/             0711, Sagan's user
      <repo key>/                       0711; the key is a hash of the repository URL
        repo.git/                       0700; a bare clone of the research repository
        experiment-<number>/            0700, owned by the sandbox user; the worktree,
                                        on branch `experiment-<number>`

The bare clone and each worktree's git metadata (`repo.git/worktrees/experiment-<n>`)
are Sagan's and never mounted in a sandbox; only the worktree's files are. Sagan's own
git commands therefore never trust anything the sandbox could have written: they name
the git dir and work tree explicitly (a rewritten `.git` file is ignored), run with no
system or global config, hooks pointed at /dev/null and fsmonitor off, never recurse into
submodules, and refuse to run at all while the worktree holds a nested `.git` (a planted
repository whose config could run commands as Sagan).

Only one code tool call works on a worktree at a time: `locked()` holds a Redis lock for
the call (the lock outlives the longest sandboxed command, and expires if the worker
dies). Fetches, pushes and worktree changes also take the clone's own lock, always after
the worktree's, so two experiments sharing one clone cannot deadlock.
"""
from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from flask import current_app

from models import Experiment
from services.code.sandbox import sandbox_user
from services.core import redis_store, settings
from services.core.errors import Conflict, SaganError

GIT_TIMEOUT = 300
AUTHOR_EMAIL = "sagan-agent@localhost"


class WorkspaceError(SaganError):
    """The worktree could not be prepared or a git operation on it failed."""

    status_code = 409
    code = "workspace_error"


@dataclass(frozen=True)
class Target:
    """The experiment a worktree belongs to, as plain values: usable after the session
    committed without reloading the row (which would open a transaction again)."""

    id: object
    number: int

    @classmethod
    def of(cls, experiment) -> "Target":
        return cls(experiment.id, experiment.number)


@dataclass(frozen=True)
class Workspace:
    experiment_id: object
    number: int
    path: Path        # the worktree (the sandbox's /worktree)
    gitdir: Path      # its git metadata inside the bare clone
    mirror: Path      # the bare clone
    branch: str
    base_branch: str  # the research repository's default branch
    repo_url: str

    @property
    def base_ref(self) -> str:
        return f"refs/remotes/origin/{self.base_branch}"


# --- where things are ---------------------------------------------------------------------

def root(config=None) -> Path:
    config = current_app.config if config is None else config
    return Path(config["SAGAN_WORKSPACES_DIR"])


def branch_name(experiment: Experiment | Target) -> str:
    return f"experiment-{experiment.number}"


def repo_settings() -> tuple[str, str]:
    """(url, default branch) of the configured research repository, or a clear error."""
    url = settings.get("research_repo_url")
    if not url:
        raise WorkspaceError("No research repository is configured, so there is no code to work on: the owner "
                             "sets it under Settings → Research repository.", code="no_research_repo")
    return url, settings.get("research_repo_branch") or "main"


def _repo_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:12]


def _local_path(url: str) -> str | None:
    """The filesystem path of a local repository URL (allowed only with SAGAN_ALLOW_LOCAL_REPO)."""
    if url.startswith("file://"):
        return url[len("file://"):]
    return url if url.startswith("/") else None


def _paths(experiment: Experiment | Target, url: str) -> tuple[Path, Path, Path]:
    base = root() / _repo_key(url)
    return base, base / "repo.git", base / f"experiment-{experiment.number}"


# --- locks --------------------------------------------------------------------------------

def _lock_ttl() -> int:
    return int(current_app.config["SAGAN_SANDBOX_TIMEOUT_SECONDS"]) + 600


@contextmanager
def locked(experiment: Experiment | Target, *, wait: float | None = None):
    """Hold the experiment's worktree for one code tool call (or the test step).

    Another call on the same worktree waits up to SAGAN_WORKSPACE_LOCK_WAIT_SECONDS, then
    gets a Conflict it can read; the lock's TTL outlives the longest sandboxed command, so
    a dead worker frees it without anyone's help.
    """
    wait = float(current_app.config["SAGAN_WORKSPACE_LOCK_WAIT_SECONDS"] if wait is None else wait)
    lock = redis_store.connection().lock(f"sagan:workspace:{experiment.id}", timeout=_lock_ttl(),
                                         sleep=0.1, blocking_timeout=wait)
    if not lock.acquire():
        raise Conflict(f"Another agent is using the worktree of #{experiment.number} right now; nothing was done. "
                       "Try again in a moment.", code="worktree_busy")
    try:
        yield
    finally:
        try:
            lock.release()
        except Exception:  # noqa: BLE001 - expired under us: nothing left to release
            pass


@contextmanager
def _mirror_locked(mirror: Path):
    lock = redis_store.connection().lock(f"sagan:workspace-mirror:{mirror}", timeout=GIT_TIMEOUT * 2,
                                         sleep=0.1, blocking_timeout=GIT_TIMEOUT)
    if not lock.acquire():
        raise Conflict("The research repository's clone is busy; try again in a moment.", code="worktree_busy")
    try:
        yield
    finally:
        try:
            lock.release()
        except Exception:  # noqa: BLE001
            pass


# --- running git ----------------------------------------------------------------------------

_HARDENING = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "safe.directory=*",
              "-c", "core.quotePath=false", "-c", "submodule.recurse=false", "-c", "diff.external=",
              "-c", "commit.gpgSign=false", "-c", "color.ui=false"]


def _local_env() -> dict[str, str]:
    """For git on the worktree: no system or global config, no prompts, our own HOME."""
    home = root() / ".home"
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0"}


def _remote_env(url: str) -> dict[str, str]:
    """For fetch and push: the operator's git config (credentials, ssh) still applies.

    A local repository (tests, SAGAN_ALLOW_LOCAL_REPO) owned by another account would trip
    git's ownership check inside the receiving process; that one path, and only it, is
    trusted through a config file that also includes the operator's own.

    Over https, the deploy token the owner named for the pods (Settings → Research
    repository, `research_repo_token_env`) is offered too, as the pods' bootstrap does: git
    asks a helper that holds only the variable's name and prints its value, so the token is
    in no file and no URL. Sagan reads what its pods clone (the dispatch preflight checks the
    commit before any pod is made).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    token_env = settings.get("research_repo_token_env")
    if url.startswith(("https://", "http://")) and token_env and os.environ.get(token_env) \
            and re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", token_env):
        env["GIT_ASKPASS"] = str(_askpass(token_env))
    local = _local_path(url)
    if local:
        config = root() / ".gitconfig-local-repo"
        config.write_text("[include]\n\tpath = ~/.gitconfig\n[safe]\n\tdirectory = "
                          + local.rstrip("/") + "\n")
        env["GIT_CONFIG_GLOBAL"] = str(config)
    return env


def _askpass(token_env: str) -> Path:
    """A helper git runs for https credentials: the user `x-access-token`, the password from
    `token_env` (GitHub's convention for deploy tokens). It holds the name, never the value."""
    home = root() / ".home"
    home.mkdir(parents=True, exist_ok=True)
    helper = home / f"askpass-{token_env}"
    script = f'#!/bin/sh\ncase "$1" in Username*) echo x-access-token ;; *) printenv {token_env} ;; esac\n'
    if not helper.exists() or helper.read_text() != script:
        partial = home / f".askpass-{token_env}.{os.getpid()}"
        partial.write_text(script)
        partial.chmod(0o700)
        partial.replace(helper)  # whole or not at all: another process's git may be running it
    return helper


def _run(args: list[str], *, env: dict, cwd: Path | None = None, input: str | None = None,
         check: bool = True, what: str = "git") -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(args, cwd=cwd or root(), env=env, input=input, capture_output=True, text=True,
                                timeout=GIT_TIMEOUT, errors="replace")
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"{what} took longer than {GIT_TIMEOUT} s and was stopped.") from None
    except OSError as exc:
        raise WorkspaceError(f"Could not run git ({exc}); is git installed on this host?") from None
    if check and result.returncode != 0:
        raise WorkspaceError(f"{what} failed: {(result.stderr or result.stdout).strip()[-2000:]}")
    return result


def git(ws: Workspace, *args: str, check: bool = True, input: str | None = None,
        what: str | None = None) -> subprocess.CompletedProcess:
    """git on the worktree, with its git dir named explicitly and the hardening above."""
    return _run(["git", f"--git-dir={ws.gitdir}", f"--work-tree={ws.path}", *_HARDENING, *args],
                env=_local_env(), cwd=ws.path, input=input, check=check, what=what or f"git {args[0]}")


def _mirror_git(mirror: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["git", f"--git-dir={mirror}", *_HARDENING, *args], env=_local_env(), check=check,
                what=f"git {args[0]}")


def _check_remote(url: str) -> None:
    """The repository's host is re-checked before every fetch and push, not only when the
    owner saved it: its DNS may point somewhere private by now (services.workflow.notify)."""
    try:
        settings.check_repo_url(url)
    except SaganError as exc:
        raise WorkspaceError(f"The research repository is not reachable safely: {exc.message}",
                             code="repo_refused") from None


def _remote_git(mirror: Path, url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    _check_remote(url)
    return _run(["git", f"--git-dir={mirror}", "-c", "core.hooksPath=/dev/null", *args], env=_remote_env(url),
                check=check, what=f"git {args[0]}")


# --- ownership ------------------------------------------------------------------------------

def _sandbox_account() -> pwd.struct_passwd | None:
    return sandbox_user()


def sandbox_owner() -> tuple[int, int] | None:
    """(uid, gid) that files Sagan writes in a worktree are given to; None when not root."""
    user = _sandbox_account()
    return (user.pw_uid, user.pw_gid) if user else None


def _hand_over_tree(path: Path) -> None:
    user = _sandbox_account()
    if user is None:
        return
    os.chown(path, user.pw_uid, user.pw_gid)
    # fwalk, not walk: each folder is opened through its parent's descriptor without
    # following links, so a folder swapped for a link mid-walk cannot redirect a chown.
    for _folder, dirs, files, folder_fd in os.fwalk(path, follow_symlinks=False):
        for name in dirs + files:
            os.chown(name, user.pw_uid, user.pw_gid, dir_fd=folder_fd, follow_symlinks=False)


def check_reachable(path: Path) -> None:
    """The sandbox user must be able to walk down to the worktree to mount it (folders not
    made yet are made traversable when they are)."""
    if _sandbox_account() is None:
        return
    for parent in path.parents:
        if parent.exists() and not parent.stat().st_mode & stat.S_IXOTH:
            raise WorkspaceError(
                f"Sandboxed commands run as {current_app.config['SAGAN_SANDBOX_USER']}, who cannot enter {parent}: "
                "set SAGAN_WORKSPACES_DIR to a folder others may traverse (chmod o+x on it and its parents).")


def _mkdir(path: Path, mode: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)


# --- creating and removing --------------------------------------------------------------------

def current(experiment: Experiment | Target, repo: tuple[str, str] | None = None) -> Workspace | None:
    """The experiment's worktree if it exists on this host (no git calls).

    `repo` is (url, default branch) when the caller read the settings already (then no
    database access happens here)."""
    url, base_branch = repo or repo_settings()
    _, mirror, path = _paths(experiment, url)
    gitdir = mirror / "worktrees" / path.name
    if path.is_dir() and gitdir.is_dir():
        return Workspace(experiment.id, experiment.number, path, gitdir, mirror, branch_name(experiment),
                         base_branch, url)
    return None


def ensure(experiment: Experiment | Target, repo: tuple[str, str] | None = None) -> Workspace:
    """The experiment's worktree, created on first use; call while holding `locked()`.

    A new worktree continues the experiment's branch when the clone or the remote already
    has it (a restarted agent, another host picking the work up), else branches from the
    repository's default branch.
    """
    existing = current(experiment, repo)
    if existing is not None:
        return existing
    url, base_branch = repo or repo_settings()
    base, mirror, path = _paths(experiment, url)
    _mkdir(root(), 0o711)
    _mkdir(base, 0o711)
    check_reachable(path)
    branch = branch_name(experiment)
    with _mirror_locked(mirror):
        if not (mirror / "HEAD").exists():
            _clone(url, mirror)
        _remote_git(mirror, url, "fetch", "--prune", "--quiet", "origin")
        _mirror_git(mirror, "worktree", "prune")
        if path.exists():  # left over from a crash between mkdir and registration
            shutil.rmtree(path)
        if _has_ref(mirror, f"refs/heads/{branch}"):
            _mirror_git(mirror, "worktree", "add", "--quiet", str(path), branch)
        elif _has_ref(mirror, f"refs/remotes/origin/{branch}"):
            _mirror_git(mirror, "worktree", "add", "--quiet", "--no-track", "-b", branch, str(path),
                        f"refs/remotes/origin/{branch}")
        elif _has_ref(mirror, f"refs/remotes/origin/{base_branch}"):
            _mirror_git(mirror, "worktree", "add", "--quiet", "--no-track", "-b", branch, str(path),
                        f"refs/remotes/origin/{base_branch}")
        else:
            raise WorkspaceError(f"The research repository has no branch {base_branch!r} to start "
                                 f"{branch} from; check the default branch in Settings.")
    gitdir = mirror / "worktrees" / path.name
    if not gitdir.is_dir():
        raise WorkspaceError(f"git did not register the worktree at {gitdir}.")
    path.chmod(0o700)
    _hand_over_tree(path)
    return Workspace(experiment.id, experiment.number, path, gitdir, mirror, branch, base_branch, url)


def _clone(url: str, mirror: Path) -> None:
    partial = mirror.with_name(mirror.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    # --no-local: never hard-link objects owned by someone else into Sagan's clone; "--":
    # the URL is never read as an option, whatever it looks like.
    _check_remote(url)
    _run(["git", "-c", "core.hooksPath=/dev/null", "clone", "--bare", "--no-local", "--quiet", "--", url, str(partial)],
         env=_remote_env(url), what="git clone")
    _mirror_git(partial, "config", "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*")
    partial.chmod(0o700)
    partial.rename(mirror)


def _has_ref(mirror: Path, ref: str) -> bool:
    return _mirror_git(mirror, "rev-parse", "--verify", "--quiet", ref + "^{commit}", check=False).returncode == 0


def remove(experiment: Experiment) -> bool:
    """Delete the experiment's worktree (its branch stays in the clone and on the remote)."""
    try:
        ws = current(experiment)
    except WorkspaceError:
        return False
    if ws is None:
        return False
    with locked(experiment), _mirror_locked(ws.mirror):
        shutil.rmtree(ws.path, ignore_errors=True)
        _mirror_git(ws.mirror, "worktree", "prune", check=False)
    return True


# --- the clone, for read-only tools ------------------------------------------------------------

MIRROR_FETCH_INTERVAL = 60  # seconds between fetches of the clone for read-only tools


def mirror_for_reading(repo: tuple[str, str] | None = None, *, fresh: bool = False) -> Path:
    """Sagan's bare clone of the research repository, cloned on first use and fetched at
    most once a minute (a Redis key throttles it across processes), for tools that read
    git objects and never a working tree (services.agents.repo_tools). `fresh` fetches now
    whatever the throttle says: the dispatch preflight asks what the remote has this moment.

    On the host that serves the `local` queue this is the clone the worktrees share, so
    the experiment's branch includes commits not pushed yet; elsewhere, what was pushed.
    Either way `refs/remotes/origin/*` are the remote's branches as last fetched."""
    url, _ = repo or repo_settings()
    base, mirror, _ = _paths(Target(None, 0), url)
    _mkdir(root(), 0o711)
    _mkdir(base, 0o711)
    with _mirror_locked(mirror):
        if not (mirror / "HEAD").exists():
            _clone(url, mirror)
            fetch = True
        else:
            # Per host: each host that runs these tools has a clone of its own.
            key = f"sagan:workspace-mirror-fetched:{socket.gethostname()}:{mirror}"
            fetch = bool(redis_store.connection().set(key, "1", nx=True, ex=MIRROR_FETCH_INTERVAL)) or fresh
        if fetch:
            _remote_git(mirror, url, "fetch", "--prune", "--quiet", "origin")
    return mirror


def read_git(mirror: Path, *args: str, check: bool = True, timeout: float | None = None,
             input: str | None = None) -> subprocess.CompletedProcess:
    """A read-only git command on the clone: no config but ours, literal pathspecs."""
    env = {**_local_env(), "GIT_LITERAL_PATHSPECS": "1", "GIT_NO_REPLACE_OBJECTS": "1"}
    try:
        result = subprocess.run(["git", f"--git-dir={mirror}", *_HARDENING, *args], cwd=root(), env=env,
                                input=input, capture_output=True, text=True, errors="replace",
                                timeout=timeout or GIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"git {args[0]} took longer than {timeout or GIT_TIMEOUT:g} s and was stopped; "
                             "narrow it down.") from None
    if check and result.returncode != 0:
        raise WorkspaceError(f"git {args[0]} failed: {(result.stderr or result.stdout).strip()[-2000:]}")
    return result


# --- reading and writing git state --------------------------------------------------------------

def check_no_nested_git(ws: Workspace) -> None:
    """Refuse to run git while the worktree holds a `.git` other than its own pointer file."""
    found = []
    # fwalk: a folder swapped for a link mid-walk is not entered (os.walk would follow the swap).
    for folder, dirs, files, _folder_fd in os.fwalk(ws.path, follow_symlinks=False):
        for name in list(dirs) + files:
            if name == ".git" and not (Path(folder) == ws.path and name in files):
                found.append(os.path.relpath(os.path.join(folder, name), ws.path))
        dirs[:] = [d for d in dirs if d != ".git"]
        if len(found) >= 5:
            break
    if found:
        raise WorkspaceError("The worktree contains git metadata that Sagan did not put there ("
                             + ", ".join(found) + "); remove it before committing. Agents may not create "
                             "repositories or `.git` entries.", code="nested_git")


def head(ws: Workspace) -> str:
    return git(ws, "rev-parse", "HEAD").stdout.strip()


def base_commit(ws: Workspace) -> str:
    """Where the experiment's branch left the default branch."""
    result = git(ws, "merge-base", "HEAD", ws.base_ref, check=False)
    return result.stdout.strip() if result.returncode == 0 else head(ws)


def dirty_tracked(ws: Workspace) -> list[str]:
    """Tracked files changed but not committed (untracked files are not counted)."""
    out = git(ws, "status", "--porcelain=v1", "--untracked-files=no", "--ignore-submodules=all").stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def status(ws: Workspace) -> str:
    return git(ws, "status", "--short", "--branch", "--ignore-submodules=all").stdout


_DIFF_FLAGS = ("--no-color", "--no-ext-diff", "--no-textconv", "--ignore-submodules=all")


def diff(ws: Workspace, *revisions: str, paths: tuple[str, ...] = ()) -> str:
    return git(ws, "diff", *_DIFF_FLAGS, *revisions, "--", *paths).stdout


def diff_stats(ws: Workspace, old: str, new: str) -> tuple[int, int, int]:
    """(files changed, insertions, deletions) between two commits."""
    files = insertions = deletions = 0
    for line in git(ws, "diff", "--numstat", *_DIFF_FLAGS, old, new).stdout.splitlines():
        added, removed, _ = (line.split("\t", 2) + ["", ""])[:3]
        files += 1
        insertions += int(added) if added.isdigit() else 0
        deletions += int(removed) if removed.isdigit() else 0
    return files, insertions, deletions


def commit(ws: Workspace, message: str, *, author: str) -> str | None:
    """Stage everything and commit; the new sha, or None when nothing changed."""
    check_no_nested_git(ws)
    git(ws, "add", "--all")
    if git(ws, "diff", "--cached", "--quiet", "--ignore-submodules=all", check=False).returncode == 0:
        return None
    name = re.sub(r"[<>\n]", "", author)[:100] or "Sagan agent"
    git(ws, "-c", f"user.name={name}", "-c", f"user.email={AUTHOR_EMAIL}", "commit", "--quiet", "--no-verify",
        "-F", "-", input=message, what="git commit")
    return head(ws)


def push(ws: Workspace) -> str:
    """Push the experiment's branch to the research repository: fast-forward only, never forced."""
    check_no_nested_git(ws)
    refspec = f"refs/heads/{ws.branch}:refs/heads/{ws.branch}"  # no leading "+": git refuses to rewrite history
    with _mirror_locked(ws.mirror):
        result = _remote_git(ws.mirror, ws.repo_url, "push", "--porcelain", "origin", refspec, check=False)
    if result.returncode != 0:
        detail = (result.stderr + result.stdout).strip()[-1500:]
        if "non-fast-forward" in detail or "[rejected]" in detail or "fetch first" in detail:
            raise Conflict(f"The remote refused the push of {ws.branch}: its branch has commits this worktree "
                           f"does not. Sagan never force-pushes; ask the owner to reconcile the branch.\n{detail}",
                           code="push_rejected")
        raise WorkspaceError(f"Pushing {ws.branch} failed:\n{detail}", code="push_failed")
    return head(ws)
