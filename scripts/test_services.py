"""Get the test services ready before `make test` runs pytest.

    python scripts/test_services.py [--no-chromium]

- Redis at TEST_REDIS_URL (default redis://127.0.0.1:6379/15) and PostgreSQL at
  TEST_DATABASE_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test): when one is
  on this machine, not running, and its server is installed, start it; otherwise fail and say
  what to install.
- The test database: created when the server answers but the database does not exist.
- Chromium for the browser tests (SAGAN_CHROMIUM, default /usr/bin/chromium): installed with
  apt-get when missing and we are root on a Debian-like system; otherwise a warning — and a
  failure under CI=true, where nothing the suite needs may be missing.
- bubblewrap (`bwrap`) for the code-agent sandbox tests: installed the same way when missing;
  otherwise a warning (a failure under CI=true). Sagan refuses to run agent-written code
  without it, so those tests cannot pass without it either.
- nftables (`nft`) for the local pods' network filter: installed the same way when missing
  (and we are root); otherwise a warning (a failure under CI=true). Sagan refuses to start a
  local pod it cannot keep off the host's own services, so those tests need it.

Exit status 0 when pytest can run, 1 with a message otherwise. The suite itself builds its
schema through the migrations.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from urllib.parse import urlsplit

import redis
import sqlalchemy as sa
from sqlalchemy.engine import make_url

DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}
CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
START_WAIT = 30.0


def say(message: str) -> None:
    print(f"[make test] {message}", flush=True)


def fail(message: str) -> None:
    print(f"[make test] ERROR: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def run(argv: list[str], timeout: float = 120) -> bool:
    say("$ " + " ".join(argv))
    try:
        return subprocess.run(argv, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"  failed: {exc}")
        return False


def wait_for(check, what: str) -> str | None:
    """Call `check` until it returns None (ready) or START_WAIT passes; the last error otherwise."""
    deadline = time.monotonic() + START_WAIT
    error = check()
    while error is not None and time.monotonic() < deadline:
        time.sleep(0.5)
        error = check()
    if error is None:
        say(f"{what} is up.")
    return error


# --- Redis ---------------------------------------------------------------------------

def redis_error(url: str) -> str | None:
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
        return None
    except redis.RedisError as exc:
        return str(exc)


def ensure_redis() -> None:
    url = os.environ.get("TEST_REDIS_URL") or DEFAULT_REDIS_URL
    error = redis_error(url)
    if error is None:
        return
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "") or (parts.hostname or "") not in LOCAL_HOSTS:
        fail(f"Redis at {url} does not answer ({error}). Start it, or point TEST_REDIS_URL at one that runs.")
    server = shutil.which("redis-server")
    if server is None:
        fail(f"Redis at {url} does not answer ({error}) and no redis-server is installed. Install Redis "
             "(Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`) or set "
             "TEST_REDIS_URL to a Redis you have.")
    port = str(parts.port or 6379)
    say(f"Redis is not running on port {port}; starting it.")
    run([server, "--daemonize", "yes", "--bind", "127.0.0.1", "--port", port,
         "--save", "", "--appendonly", "no"])
    error = wait_for(lambda: redis_error(url), f"Redis on port {port}")
    if error is not None:
        fail(f"Started redis-server but {url} still does not answer ({error}).")


# --- PostgreSQL ----------------------------------------------------------------------

def pg_error(url) -> str | None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return None
    except sa.exc.OperationalError as exc:
        return str(exc.orig).strip()
    finally:
        engine.dispose()


def start_postgres() -> str | None:
    """Start the local cluster(s) with Debian's wrapper; None when started, else why not."""
    clusters = sorted(glob.glob("/etc/postgresql/*/main"))
    if not shutil.which("pg_ctlcluster") or not clusters:
        return "no local server is installed"
    started = False
    for cluster in clusters:
        version = cluster.split("/")[3]
        started |= run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"])
    # pg_ctlcluster fails on a cluster that already runs: then it runs on another port.
    return None if started else "the local cluster did not start (already running on another port?)"


def ensure_postgres() -> None:
    url = make_url(os.environ.get("TEST_DATABASE_URL") or DEFAULT_DATABASE_URL)
    shown = url.render_as_string(hide_password=True)
    if url.get_backend_name() != "postgresql":
        fail(f"TEST_DATABASE_URL must be a PostgreSQL URL (the suite tests PostgreSQL behaviour); got {shown}.")
    server = url.set(database="postgres")
    error = pg_error(server)
    if error is not None and (url.host or "") in LOCAL_HOSTS:
        say(f"PostgreSQL does not answer ({error.splitlines()[0]}); starting it.")
        problem = start_postgres()
        if problem:
            fail(f"PostgreSQL at {shown} does not answer and {problem}. Install PostgreSQL "
                 "(Debian/Ubuntu: `apt-get install postgresql`; macOS: `brew install postgresql@16`), "
                 "start it, or set TEST_DATABASE_URL to a server you have.")
        error = wait_for(lambda: pg_error(server), "PostgreSQL")
    if error is not None:
        fail(f"PostgreSQL at {shown} does not answer: {error}")

    if pg_error(url) is None:
        return
    name = url.database
    engine = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :name"),
                                  {"name": name}).scalar()
            if not exists:
                say(f"Creating the test database {name!r}.")
                quoted = conn.dialect.identifier_preparer.quote(name)
                conn.execute(sa.text(f"CREATE DATABASE {quoted}"))
    finally:
        engine.dispose()
    error = pg_error(url)
    if error is not None:
        fail(f"Cannot connect to the test database {shown}: {error}")


# --- Chromium ------------------------------------------------------------------------

def ensure_chromium() -> None:
    path = os.environ.get("SAGAN_CHROMIUM", "/usr/bin/chromium")
    if os.path.exists(path):
        return
    default_path = path == "/usr/bin/chromium"
    if default_path and os.geteuid() == 0 and shutil.which("apt-get"):
        say("Chromium is missing; installing Debian's chromium package for the browser tests.")
        env_prefix = ["env", "DEBIAN_FRONTEND=noninteractive"]
        run(env_prefix + ["apt-get", "update"], timeout=600)
        run(env_prefix + ["apt-get", "install", "-y", "chromium"], timeout=1200)
        if os.path.exists(path):
            return
    message = (f"Chromium is not at {path}; the browser tests need it. Install it (Debian/Ubuntu: "
               "`apt-get install chromium`), or set SAGAN_CHROMIUM to a Chromium binary.")
    if CI:
        fail(message)
    say(f"WARNING: {message} To run everything else: make test PYTEST_ARGS='-m \"not browser\"'")


def ensure_bubblewrap() -> None:
    """bwrap sandboxes agent-written code and tests (services/code/sandbox.py); prlimit limits them."""
    if shutil.which("bwrap") and shutil.which("prlimit"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        say("bubblewrap is missing; installing Debian's bubblewrap package for the sandbox tests.")
        env_prefix = ["env", "DEBIAN_FRONTEND=noninteractive"]
        if not run(env_prefix + ["apt-get", "install", "-y", "bubblewrap", "util-linux"], timeout=600):
            run(env_prefix + ["apt-get", "update"], timeout=600)
            run(env_prefix + ["apt-get", "install", "-y", "bubblewrap", "util-linux"], timeout=600)
        if shutil.which("bwrap") and shutil.which("prlimit"):
            return
    message = ("bubblewrap (bwrap) or prlimit is not installed; the code-agent sandbox tests need them. Install "
               "them (Debian/Ubuntu: `apt-get install bubblewrap util-linux`; Fedora: `dnf install bubblewrap`).")
    if CI:
        fail(message)
    say(f"WARNING: {message}")


def ensure_nftables() -> None:
    """nft installs the filter that keeps local pods off this host's services
    (services/dispatch/backends/local_network.py); the kernel side is built into Linux."""
    if shutil.which("nft"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        say("nft is missing; installing Debian's nftables package for the local pod tests.")
        env_prefix = ["env", "DEBIAN_FRONTEND=noninteractive"]
        if not run(env_prefix + ["apt-get", "install", "-y", "nftables"], timeout=600):
            run(env_prefix + ["apt-get", "update"], timeout=600)
            run(env_prefix + ["apt-get", "install", "-y", "nftables"], timeout=600)
        if shutil.which("nft"):
            return
    message = ("nft is not installed; the local pod tests need it (Sagan refuses local pods it cannot keep off "
               "this host). Install it (Debian/Ubuntu: `apt-get install nftables`).")
    if CI:
        fail(message)
    say(f"WARNING: {message}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-chromium", action="store_true", help="skip the Chromium check")
    args = parser.parse_args(argv)
    ensure_redis()
    ensure_postgres()
    ensure_bubblewrap()
    ensure_nftables()
    if not args.no_chromium:
        ensure_chromium()
    return 0


if __name__ == "__main__":
    sys.exit(main())
