"""Parking and waking runs: the heartbeat a working run keeps, and the checks that put a
waiting run back on its queue when what it waits for is done (its sub-agents ended, its
dispatch ended, its deadline passed).

It sits below both the agent loop and the dispatch saga, which both park and wake runs:
it knows runs and queues, nothing of agents or pods.
"""
from __future__ import annotations

import logging
import threading
import uuid

import sqlalchemy as sa

from models import AgentRun, db
from services.core import registry
from services.core.clock import utcnow
from services.workflow import jobs, runs

log = logging.getLogger(__name__)
ACTIVE = registry.RUN_ACTIVE_STATUSES


class Heartbeat:
    """A thread that records the run's heartbeat every `interval` seconds until stopped."""

    def __init__(self, app, run_id, interval: float):
        self.app, self.run_id, self.interval = app, run_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{str(run_id)[:8]}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.is_set():
            try:
                with self.app.app_context():
                    runs.heartbeat(self.run_id)
                    db.session.remove()
            except Exception:  # noqa: BLE001 - a missed beat is logged; the next one retries
                log.exception("heartbeat for run %s failed", self.run_id)
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)


def merge(parks: list[dict]) -> dict | None:
    """One wait for everything the tool calls of one turn wait on: every sub-agent they
    started (a parent that starts two waits for both), the dispatch, the earliest deadline.
    None when nothing waits."""
    parks = [p for p in parks if p]
    if not parks:
        return None
    merged: dict = {}
    for park in parks:
        for key, value in park.items():
            if key == "children":
                merged["children"] = list(dict.fromkeys(merged.get("children", []) + list(value)))
            elif key == "until":
                merged["until"] = min(merged.get("until", value), value)
            else:
                merged.setdefault(key, value)  # one live dispatch per experiment: the same id
    return merged


def open_children(ids) -> int:
    """How many of these runs are still working (or waiting for the owner's approval)."""
    return db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(
        AgentRun.id.in_([uuid.UUID(str(c)) for c in ids]), AgentRun.status.in_(ACTIVE + ("awaiting_approval",))))


def ready_to_wake(run: AgentRun) -> bool:
    """Is a waiting run's condition met? Every part of it: all the sub-agents ended and the
    dispatch ended, or the deadline passed."""
    park = run.waiting_for or {}
    if run.wake_at is not None and run.wake_at <= utcnow():
        return True
    met = []
    if "pods" in park:
        dispatch = db.session.get(AgentRun, uuid.UUID(park["pods"]))
        met.append(dispatch is None or dispatch.terminal)
    if "children" in park:
        met.append(open_children(park["children"]) == 0)
    return bool(met) and all(met)


def wake_parent_if_ready(parent_id) -> None:
    parent = db.session.get(AgentRun, parent_id)
    if parent is not None and parent.status == "waiting" and ready_to_wake(parent):
        jobs.enqueue_run(parent.id)


def wake_ready_runs(limit: int = 50) -> list:
    """Scheduler: enqueue waiting runs whose deadline passed or whose children finished."""
    now = utcnow()
    candidates = list(db.session.scalars(
        sa.select(AgentRun).where(AgentRun.status == "waiting")
        .where(sa.or_(AgentRun.wake_at <= now, AgentRun.wake_at.is_(None)))
        .order_by(AgentRun.wake_at.nulls_last()).limit(limit)))
    woken = []
    for run in candidates:
        if ready_to_wake(run):
            jobs.enqueue_run(run.id)
            woken.append(run.id)
    return woken
