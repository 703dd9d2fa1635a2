"""How a job meets the app: every job runs inside an application context, and only Sagan's jobs run.

Whoever can write to Redis can put a job on a queue. So a job is read as JSON (never
unpickled: that alone would run a writer's code), its function must be one of
services.workflow.jobs.JOB_FUNCTIONS (checked before the name is imported) — on the `local`
queue, whose worker may run as root, one of the shorter LOCAL_JOB_FUNCTIONS — it must carry Sagan's
signature of its function, arguments and id (an HMAC under SECRET_KEY, services.workflow.jobs.put),
and it may carry no callbacks (RQ would import and call those by name too). Anything else
fails without running.

The worker process builds the app once, before any fork, without opening a database
connection. Each work horse (the forked child that runs one job) first drops whatever
pooled connections it inherited — without closing them, they belong to the parent — so
every connection a job uses is created inside the horse (STYLE §12). And it forks only
between two ticks of the scheduler thread beside it, so a horse never inherits a lock that
thread held (workers/fork_guard.py).

Production can use these classes with plain RQ too:
    rq worker -w workers.runtime.SaganWorker -u "$REDIS_URL" agents dispatch default
"""
from __future__ import annotations

import hmac
import importlib
import logging
import signal

from flask import Flask, current_app, has_app_context
from rq import Worker
from rq.job import Job
from sqlalchemy.orm import configure_mappers

from app import create_app
from models import db
from services.workflow import jobs
from services.workflow.jobs import AGENTS, LOCAL
from workers.agents import STOP_KEY
from workers.fork_guard import guard as fork_guard

log = logging.getLogger(__name__)

_app: Flask | None = None

# Imported once by a worker that runs agents (code agents run on `local`), before it forks,
# so every horse inherits them instead of importing them again: the Anthropic SDK alone took
# 5-8 s per agent job on a busy machine.
PRELOADED_MODULES = ("anthropic",)
AGENT_QUEUES = (AGENTS, LOCAL)


def set_app(app: Flask | None) -> None:
    """Use `app` for jobs run by this process (the launcher and tests call this; None forgets it)."""
    global _app
    _app = app


def job_app() -> Flask:
    """The app jobs run in; built from the environment on first use."""
    global _app
    if _app is None:
        _app = create_app()
    return _app


class ForeignJob(Exception):
    """A job naming a function (or callback) that is not one of Sagan's: refused, never imported."""


class AppContextJob(Job):
    """A job whose function runs inside an app context, with the session removed after.

    Always JSON, whatever serializer a caller passes: a worker built by plain `rq worker`
    must not fall back to pickle."""

    def __init__(self, *args, **kwargs):
        kwargs["serializer"] = jobs.SERIALIZER
        super().__init__(*args, **kwargs)

    # Sagan's jobs have no callbacks; one named in Redis is never imported.
    @property
    def success_callback(self):
        return None

    @property
    def failure_callback(self):
        return None

    @property
    def stopped_callback(self):
        return None

    def perform(self):
        if self.func_name not in jobs.JOB_FUNCTIONS or self.instance is not None:
            raise ForeignJob(f"Refused job {self.id}: {self.func_name!r} is not one of Sagan's job functions "
                             "(services/workflow/jobs.py), so it was not run.")
        if self.origin == LOCAL and self.func_name not in jobs.LOCAL_JOB_FUNCTIONS:
            raise ForeignJob(f"Refused job {self.id}: {self.func_name!r} does not run on the {LOCAL} queue, whose "
                             "worker may be root (services.workflow.jobs.LOCAL_JOB_FUNCTIONS), so it was not run.")
        secret = (current_app if has_app_context() else job_app()).config["SECRET_KEY"]
        expected = jobs.signature(self.func_name, self.args, self.id, secret)
        given = (self.meta or {}).get("signature")
        if self.kwargs or not isinstance(given, str) or not hmac.compare_digest(given, expected):
            raise ForeignJob(f"Refused job {self.id}: it does not carry Sagan's signature (it was not put on the "
                             "queue by this instance, or SECRET_KEY differs between web and worker), so it was "
                             "not run.")
        if has_app_context():
            # In-process runs (tests' SimpleWorker) already stand inside the right app.
            return super().perform()
        with job_app().app_context():
            try:
                return super().perform()
            finally:
                db.session.remove()


def forget_inherited_connections(app: Flask) -> None:
    """After fork: abandon the parent's pooled DB connections so the child opens its own."""
    with app.app_context():
        for engine in db.engines.values():
            engine.dispose(close=False)


class SaganWorker(Worker):
    """RQ's forking worker, with the app built up front and a clean pool in every horse."""

    job_class = AppContextJob

    def __init__(self, *args, **kwargs):
        # `rq worker` passes its own default (rq.job.Job); jobs here always need the app.
        given = kwargs.get("job_class")
        if not (isinstance(given, type) and issubclass(given, AppContextJob)):
            kwargs["job_class"] = AppContextJob
        kwargs["serializer"] = jobs.SERIALIZER  # never pickle (see the module's docstring)
        super().__init__(*args, **kwargs)
        job_app()  # build (or reuse) the app in the parent: imports once, no connections
        # One-time set-up done here, before any fork, not lazily by whichever thread is first.
        configure_mappers()

    def bootstrap(self, *args, **kwargs):
        super().bootstrap(*args, **kwargs)
        # After registering, so the worker is seen as up while it imports (seconds when busy).
        if any(name in AGENT_QUEUES for name in self.queue_names()):
            self._preload()

    def _preload(self) -> None:
        """Import what every job needs, once. RQ installs its signal handlers only after
        bootstrap, so a stop that arrives during the import is noted here and honoured by
        the work loop (which checks `_stop_requested` first) instead of killing the worker."""
        asked = []
        previous = {sig: signal.signal(sig, lambda signum, _frame: asked.append(signum))
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for module in PRELOADED_MODULES:
                importlib.import_module(module)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if asked:
            self.log.info("Worker %s: stop requested while starting; stopping", self.name)
            self._stop_requested = True

    def request_stop(self, signum, frame):
        """Warm shutdown: tell the running agent loop (in the work horse) to park its run
        after the current step, so another worker picks it up (SPEC §7)."""
        try:
            self.connection.set(STOP_KEY.format(name=self.name), "1", ex=3600)
        except Exception:  # noqa: BLE001 - never let signalling stop the shutdown itself
            log.exception("could not flag the shutdown for the running job")
        super().request_stop(signum, frame)

    def fork_work_horse(self, job, queue):
        with fork_guard.quiet_for_fork():
            super().fork_work_horse(job, queue)

    def main_work_horse(self, job, queue):
        forget_inherited_connections(job_app())
        super().main_work_horse(job, queue)
