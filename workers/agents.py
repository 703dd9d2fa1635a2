"""RQ entry point for agent runs: takes an id, calls the service (STYLE §11)."""
from __future__ import annotations

from rq import get_current_job

from services.agents.loop import execute
from services.core import redis_store

STOP_KEY = "sagan:worker-stopping:{name}"


def _worker_stopping() -> bool:
    """Has the worker running this job been asked to shut down (warm shutdown)?"""
    job = get_current_job()
    if job is None or not job.worker_name:
        return False
    return bool(redis_store.connection().exists(STOP_KEY.format(name=job.worker_name)))


def run_agent(run_id: str) -> str:
    """Run or resume one agent run until it ends, parks, or the worker stops."""
    return execute(run_id, should_stop=_worker_stopping).status
