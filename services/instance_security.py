"""What a host serving the `local` queue must keep from its pods.

Local pods run in a sandbox that shows them no host folder, but they keep the host's
network (they install packages and clone repositories), so anything listening on loopback
is within their reach. Two things follow:

- PostgreSQL and Redis must require passwords on such a host: `local_queue_warnings` says
  so at start-up when the configured URLs carry none (a Redis on a unix socket is fine: the
  sandbox does not show the socket's folder);
- the instance folder's files (database, WAL, secret key, Redis files) are private to
  Sagan's user (`make_instance_private`), and the folder itself may only be passed through,
  so a pod that escaped its sandbox still could not read or list them.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

PRIVATE_FILES = ("sagan.db", "sagan.db-wal", "sagan.db-shm", "sagan.db-journal", "secret_key",
                 "redis.conf", "redis.log", "redis.rdb", "redis.sock")


def local_queue_warnings(database_url: str, redis_url: str) -> list[str]:
    """Start-up warnings for a worker serving the `local` queue, one per service left open."""
    warnings = []
    db = urlsplit(database_url or "")
    if db.scheme.startswith("postgres") and not db.password:
        warnings.append("This worker serves the local queue, and local pods share this host's network: "
                        "PostgreSQL must require a password (DATABASE_URL has none). See docs/pods.md (Local pods).")
    redis = urlsplit(redis_url or "")
    if redis.scheme in ("redis", "rediss") and not redis.password:
        warnings.append("This worker serves the local queue, and local pods share this host's network: "
                        "Redis must require a password (REDIS_URL has none), or listen on a unix socket "
                        "only, as the embedded Redis does. See docs/pods.md (Local pods).")
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
