"""Forking beside SQLite: the worker forks only while no SQLite transaction of its own is open.

SQLite keeps the bookkeeping of its file locks in process memory, one record per database file
shared by every connection of the process. A work horse forked while another thread of the
worker (the scheduler) is inside a transaction inherits a record saying "a connection of this
process holds the write lock" — but not the lock, and not the thread that would release it.
Every connection the horse then opens, however fresh, is refused the lock by its own process's
record and gives up after busy_timeout with "database is locked" (about one dispatch job in ten
once the scheduler watches a few pods, issue 19). Disposing the engine in the horse cannot
undo it: the record is SQLite's, not the pool's. So the parent waits, before it forks, until
none of its SQLite connections is inside a transaction, and no transaction begins meanwhile.

PostgreSQL needs none of this (a forked horse only has to drop the parent's sockets, see
workers.runtime); nothing registers here then and `quiet_for_fork` returns at once.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager

log = logging.getLogger(__name__)

# Past this, a transaction is not going to end (a bug elsewhere): fork anyway, loudly, rather
# than stall every job. SQLite's own busy_timeout (app.py) is 30 s; waiting longer gains nothing.
LONGEST_WAIT_SECONDS = 30.0
_RECHECK_SECONDS = 0.02


class ForkGuard:
    """The SQLite connections of this process, and the transactions starting on them."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        # A fresh state: at start, and in a forked child (whose inherited connections belong
        # to the parent and whose inherited lock may be held by a thread that is not there).
        self._condition = threading.Condition()
        self._connections: dict[int, sqlite3.Connection] = {}
        self._beginning = 0
        self._forks_waiting = 0

    def track(self, dbapi_connection: sqlite3.Connection) -> None:
        """Watch a new SQLite connection (the engine's "connect" event)."""
        with self._condition:
            self._connections[id(dbapi_connection)] = dbapi_connection

    def forget(self, dbapi_connection: sqlite3.Connection) -> None:
        """Stop watching a closed connection (the pool's "close" events)."""
        with self._condition:
            self._connections.pop(id(dbapi_connection), None)

    @contextmanager
    def beginning(self):
        """Wrap the statement that opens a transaction: it waits while a fork is waiting or under
        way (else a busy scheduler could starve the fork), and a fork waits until it has either
        run (the connection is then in a transaction) or not."""
        with self._condition:
            self._condition.wait_for(lambda: not self._forks_waiting)
            self._beginning += 1
        try:
            yield
        finally:
            with self._condition:
                self._beginning -= 1
                self._condition.notify_all()

    def _open_transactions(self) -> int:
        count = 0
        for key, connection in list(self._connections.items()):
            try:
                count += bool(connection.in_transaction)
            except sqlite3.ProgrammingError:  # closed without the pool telling us
                self._connections.pop(key, None)
        return count + self._beginning

    @contextmanager
    def quiet_for_fork(self):
        """Hold this around `os.fork()`: it enters once no transaction is open, and no new one
        can begin until it exits."""
        condition = self._condition  # in the child, `_reset` swaps it before this exits
        condition.acquire()
        self._forks_waiting += 1
        try:
            deadline = time.monotonic() + LONGEST_WAIT_SECONDS
            open_now = self._open_transactions()
            if open_now:
                log.info("fork waits for %d open SQLite transaction(s) to end", open_now)
            while open_now and time.monotonic() < deadline:
                # Commit ends a transaction without notifying us: look again shortly.
                condition.wait(_RECHECK_SECONDS)
                open_now = self._open_transactions()
            if open_now:
                log.error("forking with %d SQLite transaction(s) still open after %.0f s; the job "
                          "will find the database locked", open_now, LONGEST_WAIT_SECONDS)
            yield
        finally:
            if self._condition is condition:  # not in a child, whose state starts afresh
                self._forks_waiting -= 1
                condition.notify_all()
            condition.release()


guard = ForkGuard()
# The child must not wait on the parent's lock or connections (see `_reset`).
os.register_at_fork(after_in_child=guard._reset)
