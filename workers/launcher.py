"""`python -m workers.launcher`: one RQ worker with the scheduler beside it in a thread.

Serves agents, dispatch and default; adds `local` with --local or SAGAN_LOCAL_PODS=1 (only
one host should serve `local`). `--queues artifacts` is the artifact worker: large uploads'
redaction and sanitizing, in a process of its own (`artifacts` is never served beside
another queue, so an agent job never waits behind an artifact; `make run` and the
deployment docs start one of each). SIGTERM or Ctrl-C: warm shutdown (the running job
finishes); a second one: cold shutdown (the running job is killed).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time

import redis

from app import create_app
from services.core import redis_store
from services.core.instance_security import local_queue_warnings, open_redis_problem
from services.dispatch.accounts import check_runpod_accounts
from workers import queues
from workers.runtime import SaganWorker, set_app
from workers.scheduler import Scheduler

log = logging.getLogger("workers.launcher")

# Waiting for Redis: the first retry after a second, doubling to at most half a minute.
REDIS_RETRY_FIRST_SECONDS = 1.0
REDIS_RETRY_MAX_SECONDS = 30.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.launcher", description=__doc__.splitlines()[0])
    parser.add_argument("--queues", default=",".join(queues.SHARED_QUEUES),
                        help="comma-separated queues, in priority order (default: %(default)s)")
    parser.add_argument("--local", action="store_true", default=None,
                        help="also serve the `local` queue (default: when SAGAN_LOCAL_PODS is on)")
    parser.add_argument("--no-local", dest="local", action="store_false",
                        help="never add the `local` queue (`make run` as root serves it in a root worker of its own)")
    parser.add_argument("--no-scheduler", action="store_true",
                        help="do not run the scheduler thread in this process")
    parser.add_argument("--burst", action="store_true", help="quit when the queues are empty")
    parser.add_argument("--name", default=None, help="worker name (default: random)")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def queue_names(args: argparse.Namespace, config) -> list[str]:
    """The queues this process serves, validated, in priority order."""
    names = [n.strip() for n in args.queues.split(",") if n.strip()]
    unknown = [n for n in names if n not in queues.ALL_QUEUES]
    if unknown or not names:
        raise SystemExit(f"Unknown queue(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(queues.ALL_QUEUES)}.")
    if queues.ARTIFACTS in names:
        # One worker runs one job at a time: beside any other queue, an agent or dispatch job
        # would wait behind a large upload's processing.
        if len(names) > 1 or args.local:
            raise SystemExit(f"The {queues.ARTIFACTS} queue runs in a worker of its own: start it apart, with "
                             f"--queues {queues.ARTIFACTS} (and the other queues in another process).")
        return names
    serve_local = config["SAGAN_LOCAL_PODS"] if args.local is None else args.local
    if serve_local and queues.LOCAL not in names:
        names.append(queues.LOCAL)
    return names


def build_worker(worker_queues: list, app, name: str | None = None, **options) -> SaganWorker:
    """The RQ worker on its own Redis client (redis_store.worker_connection says why)."""
    with app.app_context():
        connection = redis_store.worker_connection()
    return SaganWorker(worker_queues, connection=connection, name=name, **options)


def wait_for_redis(connection, url: str, *, sleep=time.sleep) -> None:
    """Return once Redis answers, saying at each try that it does not yet.

    A worker that starts before Redis (a host booting, Redis restarting) waits for it instead
    of exiting: exiting left the queues unserved until a supervisor noticed, and under
    `make run` nothing restarts a worker. Each wait is logged, so a wrong REDIS_URL is seen.
    """
    delay = REDIS_RETRY_FIRST_SECONDS
    while True:
        try:
            connection.ping()
            return
        except redis.exceptions.ConnectionError as exc:
            log.warning("Redis at %s does not answer (%s); trying again in %.0f s", url, exc, delay)
            sleep(delay)
            delay = min(delay * 2, REDIS_RETRY_MAX_SECONDS)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    app = create_app()
    set_app(app)
    logging.getLogger().setLevel(args.log_level.upper())
    with app.app_context():
        names = queue_names(args, app.config)
        wait_for_redis(redis_store.connection(), app.config.get("REDIS_URL") or "(REDIS_URL unset)")
        worker_queues = [queues.get_queue(name) for name in names]
        if queues.LOCAL in names:
            # Also when --local serves the queue while SAGAN_LOCAL_PODS is off (create_app checked only that).
            problem = open_redis_problem(app.config.get("REDIS_URL") or "")
            if problem:
                log.error(problem.replace("Local pods are on (SAGAN_LOCAL_PODS)", "This worker serves the local queue"))
                return 2
            for warning in local_queue_warnings(app.config.get("SQLALCHEMY_DATABASE_URI") or ""):
                log.warning(warning)
        if "dispatch" in names:
            check_runpod_accounts(app.config)  # one list call per account: the scope, said at start-up
    worker = build_worker(worker_queues, app, name=args.name)

    scheduler = None if args.no_scheduler else Scheduler(app)
    if scheduler:
        scheduler.start()
    try:
        worker.work(burst=args.burst, logging_level=args.log_level.upper())
    finally:
        if scheduler:
            scheduler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
