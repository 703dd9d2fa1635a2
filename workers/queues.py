"""The worker side of the queues: names and limits come from services.workflow.jobs (the one place
that decides where a job runs and for how long); this adds Sagan's job class."""
from __future__ import annotations

from rq import Queue

from services.core import redis_store
from services.workflow.jobs import (  # noqa: F401
    AGENTS,
    ALL_QUEUES,
    ARTIFACTS,
    DEFAULT,
    DISPATCH,
    FAILURE_TTL,
    LOCAL,
    RESULT_TTL,
    SERIALIZER,
    SHARED_QUEUES,
    job_timeout,
    put,
)
from workers.runtime import AppContextJob


def get_queue(name: str) -> Queue:
    """The RQ queue `name` on the app's Redis, with its timeout and Sagan's job class."""
    return Queue(name, connection=redis_store.connection(), default_timeout=job_timeout(name),
                 job_class=AppContextJob, serializer=SERIALIZER)


def enqueue(name: str, func: str, *ids, job_id: str | None = None):
    """Enqueue `func(*ids)` on queue `name`, signed, with Sagan's TTLs; a fixed `job_id` dedupes."""
    return put(name, func, ids, job_id=job_id)
