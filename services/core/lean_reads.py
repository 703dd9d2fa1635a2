"""One read-only statement for a poll, on a connection that skips the per-request ceremony.

A page's poll (the experiment page's `live`, the run page's events) answers "nothing
changed" many times a minute per open tab. Through the request's ORM session, its reads
cost five round trips to PostgreSQL — the pool's pre-ping, BEGIN, the statements, and the
ROLLBACK at the end of the request — and the ROLLBACK also dropped psycopg's prepared
statements, so PostgreSQL planned the statement afresh on every poll; SQLAlchemy's
execution and result layers cost more Python than the statement's own round trip
(docs/performance.md, "The live polls").

Here the statement is compiled to SQL once, and runs on a PostgreSQL connection kept for
polls by this process, in autocommit: one round trip, and after a few polls psycopg has
prepared it on that connection. The answer is read from the database on every call;
nothing is cached but the statement's text.

The connections come from a second engine (one per process, made on first use, so a
forked server worker never shares its parent's sockets), without pre-ping: a connection
PostgreSQL dropped (a restart) is found by the statement itself, thrown away, and the
statement — a read, safe to repeat — runs once more on a fresh one. If that fails too,
the error propagates as SQLAlchemy's and the request answers 503 like any other
(blueprints/errors.py). Statement listeners (`before_cursor_execute`: the bench's query
count, the tests' counters) are told about each statement, as for any other.

SQLite (the embedded default) has no network round trip to save: there the statement
runs on the request's session, as before.
"""
from __future__ import annotations

import functools
import os
import threading

import sqlalchemy as sa
from flask import current_app

from models import db

_EXTENSION_KEY = "sagan_lean_reads"
_lock = threading.Lock()


class _Connections:
    """This process's poll engine and its idle connections (a thread takes one, uses it
    for one statement and gives it back, so no two threads share one; list.pop and
    list.append are atomic)."""

    def __init__(self, url: sa.URL, connect_args: dict):
        self.pid = os.getpid()
        # No pool beneath: `idle` is the pool (a connection stays open between polls), as
        # large as the most polls this process has answered at once. The app's connect
        # arguments (its statement timeout) hold here too.
        self.engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool,
                                       connect_args=connect_args)
        self.idle: list = []

    def take(self, *, fresh: bool = False):
        if not fresh:
            try:
                return self.idle.pop()
            except IndexError:
                pass
        return self.engine.raw_connection()

    def drop_idle(self) -> None:
        """Close the idle connections: one was found dropped, and what dropped it (a
        restart, an admin ending backends) most likely dropped them all."""
        while self.idle:
            try:
                self.idle.pop().invalidate()
            except IndexError:
                break

    def give_back(self, connection) -> None:
        self.idle.append(connection)


def first_row(statement: sa.Executable, params: dict, repeatable: bool = True) -> tuple | None:
    """The first row of `statement` (as a tuple), or None.

    `repeatable=False` for a write (the lean progress ingest, front/lean_ingest.py):
    on a dropped connection it is not run again here, since the first attempt may have
    committed; the error propagates and the caller's fallback decides."""
    held = _connections()
    if held is None:
        row = db.session.execute(statement, params).first()
        return tuple(row) if row is not None else None
    sql, fixed = _compiled(statement, held.engine.dialect)
    values = {**fixed, **params}
    dbapi = held.engine.dialect.loaded_dbapi
    for attempt in (1, 2):
        # The retry after a dropped connection connects afresh: another idle connection
        # was most likely dropped by the same restart.
        connection = held.take(fresh=attempt == 2)
        try:
            if held.engine.dispatch.before_cursor_execute:
                held.engine.dispatch.before_cursor_execute(None, None, sql, values, None, False)
            row = connection.driver_connection.execute(sql, values).fetchone()
        except dbapi.Error as exc:
            broken = connection.driver_connection.broken or connection.driver_connection.closed
            if broken:
                connection.invalidate(exc)  # the pool forgets it; the next take connects afresh
                held.drop_idle()
            else:
                held.give_back(connection)  # autocommit: a failed statement leaves no transaction
            if broken and attempt == 1 and repeatable:
                continue
            raise sa.exc.DBAPIError.instance(sql, values, exc, dbapi.Error, connection_invalidated=broken,
                                             dialect=held.engine.dialect) from exc
        held.give_back(connection)
        return row
    return None  # not reached: the loop returns or raises


@functools.lru_cache(maxsize=32)
def _compiled(statement: sa.Executable, dialect) -> tuple[str, dict]:
    """The statement's SQL for this dialect and its fixed parameters, compiled once."""
    compiled = statement.compile(dialect=dialect)
    return str(compiled), dict(compiled.params)


def _connections() -> _Connections | None:
    """This process's poll connections for the app's database (None on SQLite)."""
    main = db.engine
    if main.dialect.name != "postgresql":
        return None
    extensions = current_app.extensions
    held = extensions.get(_EXTENSION_KEY)
    if held is not None and held.pid == os.getpid():
        return held
    with _lock:
        held = extensions.get(_EXTENSION_KEY)
        if held is None or held.pid != os.getpid():
            held = _Connections(main.url, current_app.config["SQLALCHEMY_ENGINE_OPTIONS"].get("connect_args") or {})
            extensions[_EXTENSION_KEY] = held
    return held


def available() -> bool:
    """Does the app's database have lean connections (PostgreSQL; not SQLite)?"""
    return _connections() is not None
