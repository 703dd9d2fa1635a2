"""The production web server: granian (an HTTP server written in Rust) running the Flask
app through its WSGI interface.

Why not gunicorn, which served Sagan until 2026-12-01: its sync worker parses HTTP in
Python, closes the connection after every request (so every htmx poll and every pod post
paid a new TCP connection), and cost about 0.3 ms of CPU a request before the app ran;
granian costs about 0.04 ms, keeps connections alive, and reads request bodies as the app
asks for them (a refused upload is not buffered first). On this 2-core machine that took
the pods' progress posts from 855–1,030/s to about 1,400/s (docs/performance.md).

Every way Sagan starts its web server goes through `command()`: `make run`
(scripts/run_embedded.py), the deployment units (`python -m serve`, docs/deploy.md), the
benches and the tests that start a real server.

    python -m serve [--host 127.0.0.1] [--port 8000] [--workers N] [--threads T]

Environment: PORT, WEB_CONCURRENCY (workers), SAGAN_WEB_THREADS (threads per worker),
SAGAN_WEB_STATEMENT_TIMEOUT_SECONDS (PostgreSQL's limit on one statement of a request).
"""
from __future__ import annotations

import argparse
import gc
import importlib.metadata
import os
import shutil
import sys
from pathlib import Path

from flask import Flask

from front import gate

ROOT = Path(__file__).resolve().parent

DEFAULT_WORKERS = 2
# Threads per worker process that run the app's code (front/gate.py's app slots). The app's
# work is short (a poll, a form, a post) and partly waits on PostgreSQL, so a second thread
# keeps a process busy; more only queue on the GIL (8 threads gave 20% fewer posts/s than 2
# on the bench).
DEFAULT_THREADS = 2
# Threads of a worker beyond the app slots and the body readers: whatever waits on slow
# uploads, a request without a body always finds one of these.
SPARE_THREADS = 4
# Connections a worker holds open at once. granian takes one permit per connection for its
# whole life, idle keep-alive time included, and accepts nothing past the limit: at 4 (the
# old setting) a laptop's and a phone's browsers kept every permit and new requests waited
# 20-30 s for an idle connection to time out. An idle connection costs a few KB in granian,
# nothing in Python.
CONNECTIONS_PER_WORKER = 512
GRACEFUL_SECONDS = 10

# Keys of a request's environ that describe the request itself: never dropped by
# _WithoutProcessEnvironment even when the process environment has the same name and value.
_REQUEST_KEYS = frozenset({
    "REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "RAW_URI", "REQUEST_URI", "CONTENT_TYPE",
    "CONTENT_LENGTH", "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "SERVER_SOFTWARE", "REMOTE_ADDR",
    "REMOTE_PORT", "GATEWAY_INTERFACE", "HTTPS",
})


def command(*, host: str, port: int, workers: int = DEFAULT_WORKERS, threads: int = DEFAULT_THREADS,
            log_level: str = "info", target: str = "serve:wsgi_app") -> list[str]:
    """The argv that serves Sagan on host:port: granian, WSGI, `target` an app factory
    (this module's, or the benches' timing app) imported from the project's root.

    `threads` are each worker's app slots; granian's blocking threads are those plus the
    body readers (SAGAN_WEB_BODY_READERS) and SPARE_THREADS. The workers learn the slot
    count from SAGAN_WEB_THREADS, set here for them (`env`), whoever starts the server."""
    return [shutil.which("env") or "/usr/bin/env", f"SAGAN_WEB_THREADS={threads}",
            sys.executable, "-m", "granian", "--interface", "wsgi", "--factory", target,
            "--working-dir", str(ROOT), "--host", host, "--port", str(port), "--workers", str(workers),
            "--blocking-threads", str(threads + body_readers() + SPARE_THREADS),
            "--backpressure", str(CONNECTIONS_PER_WORKER),
            # A worker that dies (out of memory, a segfault in a C extension) is replaced.
            "--respawn-failed-workers", "--workers-kill-timeout", str(GRACEFUL_SECONDS),
            # htmx polls and plain HTTP only: no websockets.
            "--no-ws", "--log-level", log_level]


def body_readers() -> int:
    """SAGAN_WEB_BODY_READERS as the app reads it (front/gate.py)."""
    from config import Config  # here for the same reason as create_app in wsgi_app
    return Config.WEB_BODY_READERS


def granian_version() -> str:
    return importlib.metadata.version("granian")


def wsgi_app() -> Flask:
    """granian's factory: the app, without the process environment in each request's environ."""
    # Imported here, in the server's workers only: `make run`, the benches and the tests
    # import this module for command(), and must not build the app's imports for it.
    from app import create_app
    app = create_app(web_config())
    app.wsgi_app = without_process_environment(app.wsgi_app)
    return ready_to_serve(app)


def ready_to_serve(app: Flask) -> Flask:
    """The last step of a worker's start-up: everything loaded so far (modules, the app,
    its templates as they compile) lives as long as the process, so it is moved out of the
    garbage collector's sight (gc.freeze). Without it every full collection walked those
    hundreds of thousands of objects in the middle of some request: the board's p95 at
    2,000 experiments was 2.5 times its p50 (docs/performance.md)."""
    gc.collect()
    gc.freeze()
    return app


def web_config():
    """The app's configuration for serving requests: from the environment, with PostgreSQL's
    statement timeout (SAGAN_WEB_STATEMENT_TIMEOUT_SECONDS, default 30 s; 0 for none).
    granian has no per-request timeout, so this is what frees a request thread held by a
    statement that would never end; the request answers 503."""
    from config import Config  # here for the same reason as create_app above
    config = Config()
    config.STATEMENT_TIMEOUT_SECONDS = config.WEB_STATEMENT_TIMEOUT_SECONDS
    config.WEB_APP_SLOTS = int(os.environ.get("SAGAN_WEB_THREADS") or DEFAULT_THREADS)
    return config


def environment_problem() -> str | None:
    """What is wrong with the environment each worker reads as it builds the app
    (web_config), or None: `python -m serve` and `make run` refuse it before anything
    starts, rather than as a traceback in every worker."""
    timeout = os.environ.get("SAGAN_WEB_STATEMENT_TIMEOUT_SECONDS", "").strip()
    if timeout and not timeout.isdigit():
        return (f"SAGAN_WEB_STATEMENT_TIMEOUT_SECONDS must be a whole number of seconds (0: no limit), "
                f"not {timeout!r}")
    counts = {}
    for name in ("SAGAN_WEB_BODY_READERS", "SAGAN_WEB_BODY_READERS_PER_CLIENT"):
        raw = os.environ.get(name, "").strip()
        if raw and not raw.isdigit():
            return f"{name} must be a whole number, not {raw!r}"
        counts[name] = int(raw) if raw else 1
    return gate.settings_problem(*counts.values())


def without_process_environment(wsgi_app):
    """`wsgi_app` behind the layer that drops the process environment from each environ."""
    return _WithoutProcessEnvironment(wsgi_app)


class _WithoutProcessEnvironment:
    """granian builds each WSGI environ from a copy of os.environ (CGI style), so every
    request would carry SECRET_KEY, DATABASE_URL and the API keys, where an error report
    or a debug dump could show them; and an HTTP_PROXY variable would read as a `Proxy:`
    request header (the "httpoxy" problem). This layer, outside every other, drops each
    key whose name and value are the process environment's at start-up. A request header
    whose value equals a same-named variable is dropped with it, which for `Proxy` is what
    the httpoxy advice asks anyway."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app
        self.inherited = tuple((name, value) for name, value in os.environ.items() if name not in _REQUEST_KEYS)

    def __call__(self, environ, start_response):
        for name, value in self.inherited:
            if environ.get(name) == value:
                del environ[name]
        return self.wsgi_app(environ, start_response)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m serve", description="Serve Sagan's web app (granian).")
    # String defaults from the environment pass through `type` too, so a bad PORT is refused
    # like a bad --port. (No HOST variable: some shells set it to the machine's name.)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=os.environ.get("PORT", "8000"), help="also PORT; default 8000")
    parser.add_argument("--workers", type=int, default=os.environ.get("WEB_CONCURRENCY", str(DEFAULT_WORKERS)),
                        help=f"worker processes (also WEB_CONCURRENCY; default {DEFAULT_WORKERS}, about one per core)")
    parser.add_argument("--threads", type=int, default=os.environ.get("SAGAN_WEB_THREADS", str(DEFAULT_THREADS)),
                        help=f"threads per worker (also SAGAN_WEB_THREADS; default {DEFAULT_THREADS})")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.threads < 1:
        parser.error("--workers and --threads must be at least 1")
    problem = environment_problem()
    if problem:
        parser.error(problem)
    argv_ = command(host=args.host, port=args.port, workers=args.workers, threads=args.threads,
                    log_level=args.log_level)
    # Replace this process, so a service manager's signals reach granian itself.
    os.execv(argv_[0], argv_)


if __name__ == "__main__":
    main()
