"""One read-only statement for a poll, on a connection that skips the per-request ceremony.

A page's poll (the experiment page's `live`, the run page's events) answers "nothing
changed" many times a minute per open tab. Through the request's ORM session, that one
read cost five round trips to PostgreSQL — the pool's pre-ping, BEGIN, the statement,
and the ROLLBACK at the end of the request — and the ROLLBACK also dropped psycopg's
prepared statements, so PostgreSQL planned the statement afresh on every poll
(docs/performance.md, "The experiment page's poll").

Here the statement runs on a second engine, one per process, in autocommit mode and
without pre-ping: one round trip, and after a few polls psycopg has prepared it on that
connection. The answer is read from the database on every call; nothing is cached but
the statement's text.

Without pre-ping, a connection PostgreSQL dropped (a restart) is found by the statement
itself; SQLAlchemy then invalidates the pool, and the statement — a read, safe to repeat —
runs once more on a fresh connection. If that fails too the error propagates and the
request answers 503 like any other (blueprints/errors.py).

SQLite (the embedded default) has no network round trip to save: there the statement
runs on the request's session, as before.
"""
from __future__ import annotations

import os
import threading

import sqlalchemy as sa
from flask import current_app

from models import db

_EXTENSION_KEY = "sagan_lean_reads"
_lock = threading.Lock()


def first_row(statement: sa.Executable, params: dict) -> sa.Row | None:
    """The first row of a read-only `statement`, or None."""
    engine = _engine()
    if engine is None:
        return db.session.execute(statement, params).first()
    for attempt in (1, 2):
        try:
            with engine.connect() as connection:
                return connection.execute(statement, params).first()
        except sa.exc.DBAPIError as exc:
            # A connection the server dropped: the pool is invalidated; retry the read once.
            if attempt == 2 or not exc.connection_invalidated:
                raise
    return None  # not reached: the loop returns or raises


def _engine() -> sa.Engine | None:
    """This process's poll engine for the app's database (None on SQLite). Made on first
    use, so a forked server worker makes its own and never shares a parent's sockets."""
    main = db.engine
    if main.dialect.name == "sqlite":
        return None
    extensions = current_app.extensions
    held = extensions.get(_EXTENSION_KEY)
    if held is not None and held[0] == os.getpid():
        return held[1]
    with _lock:
        held = extensions.get(_EXTENSION_KEY)
        if held is None or held[0] != os.getpid():
            # pool_size: a sync worker serves one request at a time; a threaded server
            # overflows to more connections and keeps two.
            engine = sa.create_engine(main.url, isolation_level="AUTOCOMMIT", pool_pre_ping=False,
                                      pool_size=2, max_overflow=8)
            held = (os.getpid(), engine)
            extensions[_EXTENSION_KEY] = held
    return held[1]
