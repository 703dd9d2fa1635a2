"""The periodic scheduler: one tick every SCHEDULER_TICK_SECONDS, on one process at a time.

Later issues fill `tick` (wake waiting runs, watch pods, reconcile queues with the
database). Any number of launchers may run the loop; a short Redis lease lets only one of
them tick, so there is exactly one scheduler however many worker hosts exist, and another
host takes over within a few ticks when the holder dies.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

import redis
from flask import Flask

from models import db
from services.core import redis_store
from services.day import daily_log, weekly_review
from services.dispatch import artifacts, watcher
from services.pipeline import sweeps
from services.planning import follow_ups
from services.research import feeds
from services.workflow import email_notify, parking
from workers.fork_guard import guard as fork_guard

log = logging.getLogger(__name__)

LEASE_KEY = "sagan:scheduler:leader"

# Take the lease if it is free, or extend it if we hold it; 1 when we hold it afterwards.
_ACQUIRE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


def tick(app: Flask) -> None:
    """One scheduler pass: watch pods, wake waiting runs, reconcile queued/stale runs, enforce
    cancels, bring results back from followups_running once their proposer has ended, and
    re-queue or fail artifacts whose processing job was lost or died, poll the literature
    feeds that are due, write yesterday's daily log entry once the owner's day has ended, and
    send the notification emails held by quiet hours or the owner-turn interval, and
    draft the week's review once its day and hour have come (SPEC §12.3).

    Each part is independent; one failing is logged and the others still run.
    """
    for part in (watcher.watch_now_and_then, parking.wake_ready_runs, sweeps.reconcile_runs, sweeps.hard_stop_cancelled,
                 follow_ups.return_when_done, _orphan_sweep_now_and_then, artifacts.reconcile, feeds.enqueue_due,
                 daily_log.write_due_days, email_notify.send_due,
                 weekly_review.draft_due):
        try:
            part()
        except Exception:  # noqa: BLE001 - the next tick retries
            db.session.rollback()
            log.exception("scheduler: %s failed", part.__name__)


ORPHAN_SWEEP_KEY = "sagan:scheduler:last-orphan-sweep"
ORPHAN_SWEEP_SECONDS = 600


def _orphan_sweep_now_and_then() -> None:
    """The orphan sweep lists every account's pods: every ten minutes is plenty."""
    if redis_store.connection().set(ORPHAN_SWEEP_KEY, "1", nx=True, ex=ORPHAN_SWEEP_SECONDS):
        watcher.orphan_sweep()


class Scheduler:
    """Runs `tick` every `interval` seconds while it holds the lease, until `stop()`."""

    def __init__(self, app: Flask, interval: float | None = None):
        self.app = app
        self.interval = float(interval if interval is not None else app.config["SCHEDULER_TICK_SECONDS"])
        self.identity = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def lease_ms(self) -> int:
        # Three missed ticks before another scheduler may take over.
        return max(int(self.interval * 3 * 1000), 1000)

    def hold_lease(self) -> bool:
        """Take or extend the scheduler lease; True when this process may tick."""
        with self.app.app_context():
            conn = redis_store.connection()
            return bool(conn.eval(_ACQUIRE, 1, LEASE_KEY, self.identity, self.lease_ms))

    def release_lease(self) -> None:
        with self.app.app_context():
            redis_store.connection().eval(_RELEASE, 1, LEASE_KEY, self.identity)

    def run_once(self) -> bool:
        """Tick once if we hold the lease; True when a tick ran. Errors are logged, not raised."""
        try:
            # The worker beside this thread forks only between ticks (workers/fork_guard.py).
            with fork_guard.busy():
                if not self.hold_lease():
                    return False
                with self.app.app_context():
                    try:
                        tick(self.app)
                    finally:
                        db.session.remove()
            return True
        except redis.exceptions.ConnectionError as exc:
            # Redis away (restarting, the host booting): said in one line, not a traceback a
            # tick, and the next tick tries again.
            log.warning("scheduler tick skipped: Redis does not answer (%s)", exc)
            return False
        except Exception:  # noqa: BLE001 - one bad tick must not end the loop
            log.exception("scheduler tick failed")
            return False

    def run(self) -> None:
        """The loop: tick, then wait `interval` (or until stopped)."""
        log.info("scheduler started (every %ss, lease %s)", self.interval, self.identity)
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.interval)
        try:
            self.release_lease()
        except Exception:  # noqa: BLE001 - Redis may already be gone at shutdown
            log.debug("could not release the scheduler lease", exc_info=True)
        log.info("scheduler stopped")

    def start(self) -> threading.Thread:
        """Run the loop in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="sagan-scheduler", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
