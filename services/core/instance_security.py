"""What a host serving the `local` queue must keep from its pods.

Local pods run in a sandbox that shows them no host folder, and a packet filter keeps them
off every address of the host (services/dispatch/backends/local_network.py). Behind that:

- a Redis reached over TCP without a password next to local pods is refused at start-up
  (`refuse_open_redis`): anyone who reaches it can queue work for Sagan's worker, and an
  owner may have opted in to unisolated pods (a Redis on a unix socket is fine: the sandbox
  does not show the socket's folder);
- PostgreSQL should require a password on such a host: `local_queue_warnings` says so at
  start-up when DATABASE_URL carries none;
- the instance folder's files (database, WAL, secret key, Redis files) are private to
  Sagan's user (`make_instance_private`), and the folder itself may only be passed through,
  so a pod that escaped its sandbox still could not read or list them; when `make run`
  starts as root, that user is the workers' unprivileged account (`hand_instance_to`).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

PRIVATE_FILES = ("sagan.db", "sagan.db-wal", "sagan.db-shm", "sagan.db-journal", "secret_key",
                 "redis.conf", "redis.log", "redis.rdb", "redis.sock")


class UnsafeConfiguration(ValueError):
    """A setting Sagan refuses to start with; the message says what to set."""


def open_redis_problem(redis_url: str) -> str | None:
    """Why a Redis at `redis_url` must not sit next to local pods, or None when it may:
    a TCP Redis (redis://, rediss://) whose URL carries no password."""
    parts = urlsplit(redis_url or "")
    if parts.scheme not in ("redis", "rediss") or parts.password:
        return None
    return ("Local pods are on (SAGAN_LOCAL_PODS), and REDIS_URL points at a Redis over TCP without a password: "
            "anything that reaches it can put jobs on Sagan's queues. Give Redis a password (requirepass) and "
            "put it in REDIS_URL (redis://:PASSWORD@host:6379/0), or use a unix socket (unix:///path/redis.sock), "
            "or turn local pods off (SAGAN_LOCAL_PODS=0).")


def refuse_open_redis(config) -> None:
    """Stop start-up (UnsafeConfiguration) when local pods are on beside a password-less TCP Redis."""
    if config.get("SAGAN_LOCAL_PODS") and not config.get("TESTING"):
        problem = open_redis_problem(config.get("REDIS_URL") or "")
        if problem:
            raise UnsafeConfiguration(problem)


def local_queue_warnings(database_url: str) -> list[str]:
    """Start-up warnings for a worker serving the `local` queue (a password-less Redis is
    refused instead: `open_redis_problem`)."""
    warnings = []
    db = urlsplit(database_url or "")
    if db.scheme.startswith("postgres") and not db.password:
        warnings.append("This worker serves the local queue: PostgreSQL should require a password (DATABASE_URL "
                        "has none), so that a pod run without network isolation could not use it. See "
                        "docs/pods.md (Local pods).")
    return warnings


def make_instance_private(instance_dir: Path | str) -> None:
    """The instance folder: others may pass through it (to reach local-pods/), never list it;
    its data files are readable by Sagan's user only. SQLite gives a new WAL the database's
    mode, so the database's 0600 covers the WAL written later."""
    root = Path(instance_dir)
    if not root.is_dir():
        return
    os.chmod(root, 0o711)
    for name in PRIVATE_FILES:
        path = root / name
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISREG(mode) or stat.S_ISSOCK(mode):
            os.chmod(path, 0o600 if stat.S_ISREG(mode) else 0o700)


# Folders root's own work makes in the instance folder (the local backend's pods, the code
# agents' worktrees). Made at hand-over, so that the workers' account cannot put a link of
# its own in their place before root first uses them.
ROOT_FOLDERS = ("local-pods", "workspaces")
# The instance folder when its files belong to the workers' account: root's, writable by that
# account's group so SQLite can make its WAL and journal beside the database, sticky so that
# the account cannot rename or delete what is not its own (root's folders above), and
# passable by others (local pods reach local-pods/), as make_instance_private has it.
SHARED_INSTANCE_MODE = 0o1771


def hand_instance_to(instance_dir: Path | str, uid: int, gid: int) -> None:
    """Give the instance folder's data files to the account Sagan's unprivileged workers run
    as when `make run` starts as root (scripts/run_embedded.py): they write the SQLite
    database, its WAL and Redis's files, and read the key. Their modes stay as
    make_instance_private set them (private to that account); root, which runs the web
    server and the local worker, reaches them regardless (SQLite run by root gives a
    journal it creates the database's owner). The folder itself stays root's
    (SHARED_INSTANCE_MODE says why)."""
    root = Path(instance_dir)
    if not root.is_dir():
        return
    for name in ROOT_FOLDERS:
        folder = root / name
        if not folder.is_symlink() and not folder.exists():
            folder.mkdir(mode=0o711)
    os.chown(root, 0, gid)
    os.chmod(root, SHARED_INSTANCE_MODE)
    for name in PRIVATE_FILES:
        try:
            os.chown(root / name, uid, gid, follow_symlinks=False)
        except FileNotFoundError:
            continue
