"""The sandbox for code Sagan did not write (SPEC §5.7, §10).

Agent-written code and the research repository's tests run here, never in Sagan's own
process or environment. One command = one bubblewrap sandbox:

- **who**: when Sagan runs as root, bwrap itself is started as SAGAN_SANDBOX_USER (an
  unprivileged user), so even a sandbox escape lands in an account that owns nothing but
  the worktree; otherwise it runs as Sagan's own user, confined by the namespaces below.
  A sandbox that writes nothing of the host's (the analysis sandbox: `own_account`) runs as
  an account of its own instead, taken from a pool for the time it runs (below).
- **what it sees**: `/usr` (and the /bin, /lib… links into it) read-only, a few harmless
  files of `/etc` (the loader cache, time zone, a synthetic passwd), a fresh `/proc` and
  minimal `/dev`, a private size-capped `/tmp`, any SAGAN_SANDBOX_READONLY_PATHS, and the
  worktree at `/worktree` — writable only when the caller says so. Nothing else of the
  host: no home folders, no instance folder, no Sagan code or virtualenv, no sockets.
- **no network**: a new, empty network namespace (only a loopback that is down).
- **environment**: built from scratch (PATH, HOME=/tmp, locale); none of Sagan's or the
  providers' secrets, whatever the server's environment holds.
- **limits**: CPU time, address space, file size and process count per process (prlimit),
  a wall-clock timeout for the whole sandbox, an output cap, and a total of what one
  command may add to a writable worktree (SAGAN_SANDBOX_WORKTREE_WRITE_MB: the worktree's
  disk use is measured before the command and re-measured while it runs); past the
  timeout or either cap the whole sandbox is killed. The sandbox has its own pid namespace
  and bwrap runs with --die-with-parent, so no background process outlives it; and a run
  returns only once that namespace is gone (below).

Processes and accounts. RLIMIT_NPROC counts every process of the *account*, in every
sandbox at once, not those of one sandbox. Two things followed on one shared account: a fork
bomb in one sandbox made every sandbox started meanwhile fail ("bwrap: Creating new
namespace failed: Resource temporarily unavailable"), and even after it ended, the next
sandbox could start while the kernel was still killing its thousand leftovers (bwrap exits
as soon as the command does, before its pid namespace is torn down). So:

- each run learns its namespace's init from bwrap (--info-fd) and, at the end, kills it and
  waits on its pidfd: the kernel signals the init's exit only once every process in the
  namespace is gone and uncounted;
- sandboxes that write nothing of the host's (`own_account`: run_analysis) run as one of
  SAGAN_SANDBOX_ACCOUNTS accounts, `<SAGAN_SANDBOX_USER>-<n>`, held with a file lock for the
  time of the run, so each counts its processes alone. Worktree sandboxes stay on the one
  sandbox account that owns the worktrees;
- where Sagan is root and a pids cgroup controller is writable, every run (worktree or not)
  runs in a pids cgroup of its own holding PROCESS_LIMIT (services/code/pids_cgroup.py), and
  the account's RLIMIT_NPROC is raised to ACCOUNT_RUNS times that: a bomb in one worktree
  sandbox no longer crowds out another on the same account. Without one, it still can,
  until its timeout.

Limits of this design (say them, don't hide them): rlimits are per process, not a cgroup
total, so a command may use N × the memory limit with N processes (the process limit
bounds N); the worktree sandboxes share one account (a dedicated account, never the local
pods' one), and when Sagan is not root every sandbox runs as Sagan's own user, whose other
processes count towards the same process limit; `/usr` is readable; there is no seccomp filter beyond bubblewrap's defaults; the
worktree quota is a watchdog, not a file-system quota — it is checked a few times a second
(DISK_CHECK_SECONDS), so a command can pass it by what it writes in that interval (each file
is still capped by RLIMIT_FSIZE) before it is stopped, and what it wrote stays in the
worktree for the next command to see.

Where bubblewrap is missing, nothing runs: every call raises SandboxUnavailable with
what to install.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pwd
import select
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from flask import current_app

from services.code import pids_cgroup, system_users
from services.core.errors import SaganError

MOUNT_POINT = "/worktree"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A fork bomb stops here; a test suite with a worker pool does not (threads count too).
PROCESS_LIMIT = 1024
# With a pids cgroup per run holding PROCESS_LIMIT, the account's own limit lets this many
# full runs share it (the worktree sandboxes' one account), a backstop rather than the bound.
ACCOUNT_RUNS = 16
# How long the end of a run waits for the kernel to empty its pid namespace.
TEARDOWN_SECONDS = 10
# How often a run waiting for a free account of its own looks again.
ACCOUNT_WAIT_SECONDS = 0.2
# How often a running command's growth of the worktree is measured (at least; a measure
# that takes long, on a huge worktree, is spaced out to keep it under a fifth of the time).
DISK_CHECK_SECONDS = 0.25
INSTALL_HINT = ("bubblewrap (bwrap) is not installed, so Sagan will not run agent-written code or tests. "
                "Install it on the host that serves the `local` queue: Debian/Ubuntu `apt-get install "
                "bubblewrap`, Fedora `dnf install bubblewrap`.")
PRLIMIT_HINT = ("prlimit is not installed, so Sagan cannot limit sandboxed commands. Install util-linux "
                "(Debian/Ubuntu: `apt-get install util-linux`).")
# Top-level entries that are links into /usr on merged-/usr systems, or folders otherwise.
_SYSTEM_ROOTS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Harmless files of /etc that programs expect (dynamic loader, time zone, alternatives links).
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "mime.types")
_LOCALE_ENV = ("LANG", "LANGUAGE", "TZ")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Mount:
    """One more thing a sandbox sees: a host folder read-only at `dest`, or (source None)
    a private tmpfs of `size_mb` at `dest` — writable, and full at that size."""

    dest: str
    source: str | None = None
    size_mb: int = 0

    def args(self) -> list[str]:
        if self.source is None:
            return ["--size", str(self.size_mb * 1024 * 1024), "--tmpfs", self.dest]
        return ["--ro-bind", self.source, self.dest]


class SandboxUnavailable(SaganError):
    """bubblewrap (or prlimit) is missing: refuse rather than run code unconfined."""

    status_code = 503
    code = "sandbox_unavailable"


@dataclass(frozen=True)
class Limits:
    timeout: float
    cpu_seconds: int
    memory_mb: int
    output_bytes: int
    tmp_mb: int
    worktree_write_mb: int = 1024

    @classmethod
    def from_config(cls, config=None, **overrides) -> "Limits":
        config = current_app.config if config is None else config
        values = {"timeout": float(config["SAGAN_SANDBOX_TIMEOUT_SECONDS"]),
                  "cpu_seconds": int(config["SAGAN_SANDBOX_CPU_SECONDS"]),
                  "memory_mb": int(config["SAGAN_SANDBOX_MEMORY_MB"]),
                  "output_bytes": int(config["SAGAN_SANDBOX_OUTPUT_BYTES"]),
                  "tmp_mb": int(config["SAGAN_SANDBOX_TMP_MB"]),
                  "worktree_write_mb": int(config["SAGAN_SANDBOX_WORKTREE_WRITE_MB"])}
        values.update(overrides)
        return cls(**values)


@dataclass
class Outcome:
    """What a sandboxed command did: exit code, output (capped), and why it was stopped."""

    command: str
    exit_code: int | None
    output: str
    seconds: float
    timed_out: bool = False
    output_capped: bool = False
    limits: Limits | None = None
    disk_capped: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_capped and not self.disk_capped

    @property
    def stopped(self) -> bool:
        """Was the sandbox killed for passing a limit (rather than ending by itself)?"""
        return self.timed_out or self.output_capped or self.disk_capped

    def status_line(self) -> str:
        if self.timed_out:
            return f"[stopped: still running after the {self.limits.timeout:g} s timeout; the sandbox was killed]"
        if self.disk_capped:
            return (f"[stopped: the command wrote more than {self.limits.worktree_write_mb:,} MB into the worktree "
                    "(SAGAN_SANDBOX_WORKTREE_WRITE_MB); the sandbox was killed. What it wrote is still there: "
                    "remove it before running more]")
        if self.output_capped:
            return (f"[stopped: output passed the cap of {self.limits.output_bytes:,} bytes; the sandbox was "
                    "killed and the output is shown up to the cap]")
        signal_number = None
        if self.exit_code is not None and self.exit_code < 0:
            signal_number = -self.exit_code
        elif self.exit_code is not None and 128 < self.exit_code < 160:
            signal_number = self.exit_code - 128  # bwrap reports a signalled child as 128 + signal
        if signal_number:
            name = _signal_name(signal_number)
            hint = " (the CPU-time limit)" if name == "SIGXCPU" else ""
            return f"[exit {self.exit_code}: killed by {name}{hint} after {self.seconds:.1f} s]"
        return f"[exit {self.exit_code} after {self.seconds:.1f} s]"

    def describe(self) -> str:
        """The command, its output and how it ended, as a tool result or run event shows it."""
        body = self.output if self.output.endswith("\n") or not self.output else self.output + "\n"
        return f"$ {self.command}\n{body}{self.status_line()}"

    def tail(self, limit: int = 4000) -> str:
        text = self.output[-limit:]
        return ("…" + text) if len(self.output) > limit else text


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def bwrap_path() -> str | None:
    """The bubblewrap binary, or None when it is not installed."""
    return shutil.which("bwrap")


def prlimit_path() -> str | None:
    return shutil.which("prlimit")


def check_available() -> tuple[str, str]:
    """(bwrap, prlimit) paths; raises SandboxUnavailable saying what to install."""
    bwrap, prlimit = bwrap_path(), prlimit_path()
    if not bwrap:
        raise SandboxUnavailable(INSTALL_HINT)
    if not prlimit:
        raise SandboxUnavailable(PRLIMIT_HINT)
    return bwrap, prlimit


def sandbox_user(config=None) -> pwd.struct_passwd | None:
    """The account sandboxes run as: SAGAN_SANDBOX_USER when we are root, else None (ourselves)."""
    if os.geteuid() != 0:
        return None
    config = current_app.config if config is None else config
    name = config.get("SAGAN_SANDBOX_USER") or "sagan-sandbox"
    try:
        return system_users.ensure_user(name)  # a dedicated account, created if missing
    except system_users.UserUnavailable as exc:
        raise SandboxUnavailable(f"Sandboxed commands should run as {name!r}: {exc} "
                                 "Create it or set SAGAN_SANDBOX_USER.") from None


def _account_locks() -> Path:
    """The folder of the accounts' lock files: host-wide (the accounts are), root's alone."""
    folder = Path(tempfile.gettempdir()) / "sagan-sandbox-accounts"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError as exc:
        raise SandboxUnavailable(f"Could not make {folder} for the sandbox accounts' locks: {exc}") from None
    # Someone else's folder (made before us in a shared /tmp) could hand out a slot twice.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SandboxUnavailable(f"{folder} is not a folder of Sagan's own; remove it.")
    return folder


@contextlib.contextmanager
def _account(own: bool, wait_seconds: float) -> Iterator[pwd.struct_passwd | None]:
    """The account a run uses: the sandbox account (or None: ourselves, when not root), or with
    `own`, a free one of SAGAN_SANDBOX_ACCOUNTS, locked until the run is over. Waits up to
    `wait_seconds` for one to come free, then refuses."""
    shared = sandbox_user()
    if shared is None or not own:
        yield shared
        return
    count = max(1, int(current_app.config["SAGAN_SANDBOX_ACCOUNTS"]))
    folder = _account_locks()
    deadline = time.monotonic() + wait_seconds
    while True:
        for number in range(1, count + 1):
            name = f"{shared.pw_name}-{number}"
            lock = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(lock)
                continue  # another run has this one
            try:
                try:
                    account = system_users.ensure_user(name)
                except system_users.UserUnavailable as exc:
                    raise SandboxUnavailable(f"Sandboxed analyses run as {name!r}: {exc}") from None
                yield account
            finally:
                os.close(lock)  # the lock goes with the descriptor
            return
        if time.monotonic() >= deadline:
            raise SandboxUnavailable(f"All {count} sandbox accounts are busy (SAGAN_SANDBOX_ACCOUNTS); "
                                     "try again when a run has finished.")
        time.sleep(ACCOUNT_WAIT_SECONDS)


def environment(config=None) -> dict[str, str]:
    """The sandbox's whole environment: built from nothing, plus the locale of ours."""
    env = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "USER": "sandbox", "LOGNAME": "sandbox",
           "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1",
           "TERM": "dumb", "CI": "true"}
    for name, value in os.environ.items():
        if name in _LOCALE_ENV or name.startswith("LC_"):
            env[name] = value
    return env


def readonly_paths(config=None) -> list[str]:
    config = current_app.config if config is None else config
    raw = config.get("SAGAN_SANDBOX_READONLY_PATHS") or ""
    return [p.strip() for p in raw.split(",") if p.strip().startswith("/") and os.path.exists(p.strip())]


def system_filesystem(etc_names: tuple[str, ...], *, passwd_fd: int, group_fd: int) -> list[str]:
    """bwrap's arguments for the read-only system every sandbox sees (the code sandbox here,
    local pods in services/dispatch/backends/local_sandbox.py): /usr and the system roots
    (a root that is a link, as /bin is on merged-/usr systems, stays a link), the named
    /etc entries where they exist, its own /etc/passwd and /etc/group (read from the two
    descriptors), and a private /proc and /dev. Nothing of Sagan's is in it."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_ROOTS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in etc_names:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args + ["--perms", "0444", "--ro-bind-data", str(passwd_fd), "/etc/passwd",
                   "--perms", "0444", "--ro-bind-data", str(group_fd), "/etc/group",
                   "--proc", "/proc", "--dev", "/dev"]


def _bwrap_args(bwrap: str, worktree: Path, *, writable: bool, limits: Limits, extra_ro: list[str],
                passwd_fd: int, group_fd: int, mounts: tuple[Mount, ...] = ()) -> list[str]:
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--hostname", "sandbox",
            *system_filesystem(_ETC_FILES, passwd_fd=passwd_fd, group_fd=group_fd),
            "--size", str(limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    for path in extra_ro:
        args += ["--ro-bind", path, path]
    for mount in mounts:
        args += mount.args()
    args += ["--bind" if writable else "--ro-bind", str(worktree), MOUNT_POINT, "--chdir", MOUNT_POINT]
    return args


def _prlimit_args(prlimit: str, limits: Limits, processes: int) -> list[str]:
    memory = limits.memory_mb * 1024 * 1024
    fsize = limits.tmp_mb * 1024 * 1024
    # Soft CPU limit sends SIGXCPU; the hard one, a few seconds later, SIGKILL.
    return [prlimit, f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 5}", f"--as={memory}:{memory}",
            f"--fsize={fsize}:{fsize}", f"--nproc={processes}:{processes}", "--core=0:0", "--"]


def _data_pipe(text: str) -> int:
    """A pipe's read end holding `text` (small: it fits the pipe buffer), for --ro-bind-data."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, text.encode())
    os.close(write_fd)
    return read_fd


def run(worktree: Path | str, argv: list[str], *, writable: bool = True, limits: Limits | None = None,
        shown_as: str | None = None, stdin: bytes | None = None, env: dict[str, str] | None = None,
        mounts: tuple[Mount, ...] = (), own_account: bool = False) -> Outcome:
    """Run `argv` in a fresh sandbox over `worktree` (mounted at /worktree) and wait for it,
    and for everything it started to be gone.

    `argv[0]` is looked up on the sandbox's PATH. The caller decides what may run (the
    allowlist lives with the code tools); this function decides how. `stdin` is fed to
    the command (else it reads nothing); `env` adds variables to the built-from-scratch
    environment (never Sagan's own); `mounts` adds read-only folders or size-capped scratch
    space (the analysis tool's inputs and output). `own_account` runs it as an account of its
    own, for sandboxes that need no file of the sandbox account (`writable` must be False).
    """
    bwrap, prlimit = check_available()
    limits = limits or Limits.from_config()
    worktree = Path(worktree).resolve()
    with _account(own_account and not writable, limits.timeout) as user:
        uid = user.pw_uid if user else os.geteuid()
        gid = user.pw_gid if user else os.getegid()
        passwd_fd = _data_pipe(f"sandbox:x:{uid}:{gid}:sandbox:/tmp:/usr/sbin/nologin\n")
        group_fd = _data_pipe(f"sandbox:x:{gid}:\n")
        info_read, info_write = os.pipe()
        # The run's own process limit where a pids cgroup can hold it; the account's limit is
        # then only a backstop, ACCOUNT_RUNS runs wide (pids_cgroup says why).
        cgroup = pids_cgroup.RunCgroup.make(PROCESS_LIMIT)
        command = [*_prlimit_args(prlimit, limits, PROCESS_LIMIT * ACCOUNT_RUNS if cgroup else PROCESS_LIMIT),
                   *_bwrap_args(bwrap, worktree, writable=writable, limits=limits, extra_ro=readonly_paths(),
                                passwd_fd=passwd_fd, group_fd=group_fd, mounts=mounts),
                   "--info-fd", str(info_write), "--", *argv]
        # user=/group= (or setpriv, after the shell that joins the cgroup) drop privileges
        # between fork and exec without running Python in the child (a preexec_fn is unsafe
        # once the worker has threads, e.g. the heartbeat).
        identity = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
        if cgroup:
            command = cgroup.joining_argv(command, user.pw_uid if user else None, user.pw_gid if user else None)
            identity = {}
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, env={**environment(), **(env or {})}, cwd="/", start_new_session=True,
                close_fds=True, pass_fds=(passwd_fd, group_fd, info_write), **identity)
        except OSError as exc:
            os.close(info_read)
            if cgroup:
                cgroup.remove()
            raise SandboxUnavailable(f"Could not start the sandbox: {exc}") from None
        finally:
            for fd in (passwd_fd, group_fd, info_write):
                os.close(fd)
        init = None
        try:
            if stdin is not None:
                # A thread, so a command that writes before it has read everything cannot deadlock us.
                threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True).start()
            init = _namespace_init(info_read, started + limits.timeout)
            quota = DiskQuota(worktree, limits.worktree_write_mb) if writable else None
            output, timed_out, capped, disk_capped = _collect(process, limits, started, quota)
        finally:
            if process.poll() is None:  # something above failed while the sandbox ran
                _kill(process)
            _end_namespace(init)
            if cgroup:
                cgroup.remove()
    return Outcome(command=shown_as or " ".join(argv), exit_code=process.returncode, output=output,
                   seconds=time.monotonic() - started, timed_out=timed_out, output_capped=capped, limits=limits,
                   disk_capped=disk_capped)


def _namespace_init(info_fd: int, deadline: float) -> int | None:
    """A pidfd of the sandbox's pid-namespace init, from what bwrap reports on --info-fd as
    soon as the namespace exists; None when bwrap ended without reporting (it could not
    make the sandbox) or the kernel has no pidfds (before Linux 5.3)."""
    data = b""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(info_fd, selectors.EVENT_READ)
            while (remaining := deadline - time.monotonic()) > 0 and selector.select(remaining):
                chunk = os.read(info_fd, 4096)
                if not chunk:
                    break
                data += chunk
    finally:
        os.close(info_fd)
    try:
        info = json.loads(data)
        pid, namespace = int(info["child-pid"]), int(info["pid-namespace"])
    except (ValueError, KeyError, TypeError):
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    # A pid is only a number: signal it only if it still names the init of this very
    # namespace (a pid reused by another process would be in another one).
    try:
        same = os.stat(f"/proc/{pid}/ns/pid").st_ino == namespace
    except OSError:
        same = False
    if not same:
        os.close(pidfd)
        return None
    return pidfd


def _end_namespace(pidfd: int | None) -> None:
    """Kill what the run left in its pid namespace and wait until the kernel has torn it down.
    The init's exit is signalled (its pidfd turns readable) only after every other process
    of the namespace has been killed and reaped, so none counts against the account's
    process limit any more when the next run starts."""
    if pidfd is None:
        return
    try:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it has exited already; the wait below returns at once
        ready, _, _ = select.select([pidfd], [], [], TEARDOWN_SECONDS)
        if not ready:
            log.warning("a sandbox's pid namespace was still being torn down after %s s", TEARDOWN_SECONDS)
    except OSError as exc:
        log.warning("could not end a sandbox's pid namespace: %s", exc)
    finally:
        os.close(pidfd)


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, ValueError):
        pass  # the command stopped reading (or was killed): nothing to do
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def disk_usage(path: Path) -> int:
    """Bytes of disk the tree at `path` occupies (allocated blocks; hard links counted once).

    fwalk without following links: the tree belongs to the sandbox, which may swap a folder
    for a link to somewhere large while we count.
    """
    total = 0
    seen: set[tuple[int, int]] = set()
    for _folder, dirs, files, folder_fd in os.fwalk(path, follow_symlinks=False, onerror=lambda _exc: None):
        for name in dirs + files:
            try:
                info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            except OSError:
                continue  # removed meanwhile
            if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
    return total


class DiskQuota:
    """What one command may add to the worktree, measured from before it started."""

    def __init__(self, worktree: Path, megabytes: int):
        self.worktree = worktree
        self.allowed = megabytes * 1024 * 1024
        self.baseline = disk_usage(worktree)
        self.next_check = 0.0

    def exceeded(self, now: float) -> bool:
        """True once the worktree grew past the quota; measures at most every DISK_CHECK_SECONDS."""
        if now < self.next_check:
            return False
        measuring = time.monotonic()
        grown = disk_usage(self.worktree) - self.baseline
        took = time.monotonic() - measuring
        self.next_check = time.monotonic() + max(DISK_CHECK_SECONDS, 4 * took)
        return grown > self.allowed


def _collect(process: subprocess.Popen, limits: Limits, started: float,
             quota: DiskQuota | None = None) -> tuple[str, bool, bool, bool]:
    """Read the merged output until EOF, the timeout, the output cap or the worktree quota;
    kill the sandbox on the last three."""
    deadline = started + limits.timeout
    chunks: list[bytes] = []
    size = 0
    timed_out = capped = disk_capped = False
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    fd = process.stdout.fileno()
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if quota is not None and quota.exceeded(time.monotonic()):
                disk_capped = True
                break
            if not selector.select(min(remaining, DISK_CHECK_SECONDS)):
                continue
            data = os.read(fd, 65536)
            if not data:
                break
            room = limits.output_bytes - size
            chunks.append(data[:max(room, 0)])
            size += len(data)
            if size > limits.output_bytes:
                capped = True
                break
        # Output closed: the command is ending, or closed its stdout and carries on writing.
        while not (timed_out or capped or disk_capped) and process.poll() is None:
            if time.monotonic() >= deadline:
                timed_out = True
            elif quota is not None and quota.exceeded(time.monotonic()):
                disk_capped = True
            else:
                try:
                    process.wait(timeout=min(max(deadline - time.monotonic(), 0.01), DISK_CHECK_SECONDS))
                except subprocess.TimeoutExpired:
                    pass
    finally:
        selector.close()
        if timed_out or capped or disk_capped or process.poll() is None:
            _kill(process)
        process.stdout.close()
    return b"".join(chunks).decode("utf-8", errors="replace"), timed_out, capped, disk_capped


def _kill(process: subprocess.Popen) -> None:
    """SIGKILL bwrap's process group; the sandbox's pid namespace dies with it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
