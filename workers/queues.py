"""Queue names and their limits: the one place that decides where a job runs and for how long."""
from __future__ import annotations

from flask import current_app
from rq import Queue

from services import redis_store

AGENTS = "agents"        # agent conversations (long: many model calls per job)
DISPATCH = "dispatch"    # pod provisioning sagas and watchers
DEFAULT = "default"      # short housekeeping jobs
LOCAL = "local"          # work tied to one host (local pods, code worktrees): one host serves it

SHARED_QUEUES = (AGENTS, DISPATCH, DEFAULT)
ALL_QUEUES = SHARED_QUEUES + (LOCAL,)

# Each queue's job timeout comes from config; it must exceed the job's own client retries so
# a slow-but-alive job is not killed mid-retry (STYLE §12). `local` runs agent-like work
# (code worktrees, local pods) so it borrows the agents limit unless JOB_TIMEOUT_LOCAL is set.
_TIMEOUT_SETTINGS = {
    AGENTS: ("JOB_TIMEOUT_AGENTS",),
    DISPATCH: ("JOB_TIMEOUT_DISPATCH",),
    DEFAULT: ("JOB_TIMEOUT_DEFAULT",),
    LOCAL: ("JOB_TIMEOUT_LOCAL", "JOB_TIMEOUT_AGENTS"),
}

# Failed jobs stay inspectable (`rq info`, the RQ registries) for a week; the run row in
# the database is the real record of what happened.
FAILURE_TTL = 7 * 24 * 3600
RESULT_TTL = 24 * 3600


def job_timeout(name: str, config=None) -> int:
    """Seconds a job on queue `name` may run before the worker kills it."""
    if name not in _TIMEOUT_SETTINGS:
        raise ValueError(f"Unknown queue {name!r}; Sagan's queues are {', '.join(ALL_QUEUES)}.")
    config = current_app.config if config is None else config
    for setting in _TIMEOUT_SETTINGS[name]:
        if config.get(setting):
            return int(config[setting])
    raise KeyError(f"No job timeout configured for queue {name!r}.")


def get_queue(name: str) -> Queue:
    """The RQ queue `name` on the app's Redis, with its timeout and Sagan's job class."""
    from workers.runtime import AppContextJob
    return Queue(name, connection=redis_store.connection(), default_timeout=job_timeout(name),
                 job_class=AppContextJob)


def enqueue(name: str, func, *ids, job_id: str | None = None):
    """Enqueue `func(*ids)` on queue `name` with Sagan's TTLs; a fixed `job_id` dedupes."""
    return get_queue(name).enqueue(func, args=ids, job_id=job_id,
                                   failure_ttl=FAILURE_TTL, result_ttl=RESULT_TTL)
