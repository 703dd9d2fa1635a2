"""The worker forks a work horse only while its scheduler thread is between ticks.

`os.fork()` copies one thread — the one that forks — and every lock in the process as it was,
including locks other threads held at that instant; nothing in the child will ever release
them. The launcher's scheduler thread ticks beside the forking worker (workers.launcher), and
a tick holds such locks while it works, so a horse forked mid-tick inherits them:

- SQLite keeps its file locks' bookkeeping in process memory. A horse forked while the tick
  is inside a transaction inherits "a connection of this process holds the write lock", without
  the lock: its first BEGIN IMMEDIATE waits the 30 s busy timeout and fails with "database is
  locked" however fresh its connection — disposing the engine cannot undo SQLite's own state
  (about one dispatch job in ten once a few pods are watched).
- SQLAlchemy configures the mappers on first use under a process-wide mutex. A horse forked
  while the first tick configured them waits on that mutex forever: the journey's planner job
  that had not run after 90 s on a busy machine.

So the scheduler holds `busy()` around each tick, and the worker forks inside `quiet_for_fork()`,
which waits for the tick to end and holds the next one back until the fork is done. A fork
waits for at most one tick; ticks are short (the scheduler's work is a few queries and
provider calls with their own timeouts).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager

log = logging.getLogger(__name__)

# Past this a tick is not going to end soon (a provider hanging past its timeouts): fork anyway,
# loudly, rather than stall every job behind it.
LONGEST_WAIT_SECONDS = 60.0


class ForkGuard:
    """Sections of work that must not be cut by a fork, and the forks waiting for them."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        # A fresh state: at start, and in a forked child, whose inherited condition may be held
        # by a thread that is not there.
        self._condition = threading.Condition()
        self._busy = 0
        self._forks_waiting = 0

    @contextmanager
    def busy(self):
        """A section (a scheduler tick) that no fork may cut. It waits while a fork is waiting
        or under way, so a scheduler that ticks back to back cannot starve the worker."""
        condition = self._condition
        with condition:
            condition.wait_for(lambda: not self._forks_waiting)
            self._busy += 1
        try:
            yield
        finally:
            with condition:
                if self._condition is condition:  # not in a child, whose state starts afresh
                    self._busy -= 1
                    condition.notify_all()

    @contextmanager
    def quiet_for_fork(self):
        """Hold this around `os.fork()`: it enters once no busy section runs, and none starts
        until it exits."""
        condition = self._condition  # in the child, `_reset` swaps it before this exits
        with condition:
            self._forks_waiting += 1
            try:
                if self._busy:
                    log.info("fork waits for the scheduler's tick to end")
                started = time.monotonic()
                if not condition.wait_for(lambda: not self._busy, timeout=LONGEST_WAIT_SECONDS):
                    log.error("forking in the middle of a scheduler tick after %.0f s; the job may find "
                              "a lock it cannot get", time.monotonic() - started)
                yield
            finally:
                if self._condition is condition:
                    self._forks_waiting -= 1
                    condition.notify_all()


guard = ForkGuard()
# The child must not wait on the parent's condition or count the parent's sections.
os.register_at_fork(after_in_child=guard._reset)
