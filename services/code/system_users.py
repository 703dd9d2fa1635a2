"""The dedicated accounts Sagan runs other people's code as, created when missing.

Local pods run as SAGAN_LOCAL_POD_USER and sandboxed code (tests, agent commands) as
SAGAN_SANDBOX_USER: two different unprivileged users, so a pod can never read or signal
what a sandbox runs, or the reverse. Only root can create or switch to them; when Sagan is
not root, both run as Sagan's own user, confined by bubblewrap alone (docs/pods.md (Local pods)).
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess


class UserUnavailable(Exception):
    """The account is missing and could not be created."""


def ensure_user(name: str) -> pwd.struct_passwd | None:
    """The account `name` (created as a system user without a home or shell if missing), or
    None when we are not root and so cannot switch users at all."""
    if os.geteuid() != 0:
        return None
    if not name or name == "root":
        raise UserUnavailable(f"{name or '(empty)'} cannot run untrusted code: name an unprivileged account.")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or shutil.which("adduser")
    if useradd is None:
        raise UserUnavailable(f"There is no account {name!r} and no useradd to create it: create it by hand.")
    if os.path.basename(useradd) == "useradd":
        argv = [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                "--shell", "/usr/sbin/nologin", name]
    else:  # busybox adduser
        argv = [useradd, "-S", "-D", "-H", "-h", "/nonexistent", "-s", "/sbin/nologin", name]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise UserUnavailable(f"Could not create the account {name!r}: {done.stderr.strip() or done.returncode}") from None
