"""The read-only system both bubblewrap sandboxes build from one function
(services.code.sandbox.system_filesystem): the code sandbox and local pods. Pure argv checks;
that the sandboxes really confine is proven in tests/integration/test_sandbox.py and
test_local_pod_sandbox.py."""
from __future__ import annotations

from pathlib import Path

from services.code import sandbox
from services.dispatch.backends import local_sandbox

FS = sandbox.system_filesystem(("hosts", "ssl"), passwd_fd=7, group_fd=8)


def _contains(argv: list[str], part: list[str]) -> bool:
    return any(argv[i:i + len(part)] == part for i in range(len(argv) - len(part) + 1))


def test_the_system_is_read_only_and_the_identity_is_the_sandboxs_own():
    binds = [FS[i:i + 3] for i, arg in enumerate(FS) if arg in ("--bind", "--ro-bind", "--ro-bind-try")]
    assert ["--ro-bind", "/usr", "/usr"] in binds
    assert all(kind != "--bind" for kind, _, _ in binds)  # nothing writable
    assert ["--ro-bind-try", "/etc/hosts", "/etc/hosts"] in binds
    # --perms applies to the next operation only: each must stand right before its data bind.
    assert _contains(FS, ["--perms", "0444", "--ro-bind-data", "7", "/etc/passwd"])
    assert _contains(FS, ["--perms", "0444", "--ro-bind-data", "8", "/etc/group"])
    assert _contains(FS, ["--proc", "/proc", "--dev", "/dev"])
    assert "/etc" not in [b[1] for b in binds]  # never the host's whole /etc (its passwd, shadow)


def test_both_sandboxes_use_the_one_system_filesystem():
    limits = sandbox.Limits(timeout=1, cpu_seconds=1, memory_mb=64, output_bytes=1000, tmp_mb=16)
    code = sandbox._bwrap_args("bwrap", Path("/srv/wt"), writable=False, limits=limits, extra_ro=[],
                               passwd_fd=7, group_fd=8)
    pod = local_sandbox.command("bwrap", Path("/srv/pod"), passwd_fd=7, group_fd=8, readonly=[])
    assert _contains(code, sandbox.system_filesystem(sandbox._ETC_FILES, passwd_fd=7, group_fd=8))
    assert _contains(pod, sandbox.system_filesystem(local_sandbox._ETC, passwd_fd=7, group_fd=8))
    # The code sandbox's /tmp is size-capped; the --size must stand right before its tmpfs.
    assert _contains(code, ["--size", str(16 * 1024 * 1024), "--tmpfs", "/tmp"])
    assert _contains(pod, ["--tmpfs", "/tmp"])
