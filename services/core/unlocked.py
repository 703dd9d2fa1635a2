"""Rendering outside text with no database transaction open.

On SQLite every transaction takes the write lock when it begins (app.py: BEGIN IMMEDIATE),
so a request that has read anything holds the lock until it commits. Rendering a 200 KB
plan under it once stalled the worker, the scheduler and every other writer. Services
render (markdown, sanitizing) through `outside_transaction()` before their first write: a
transaction that has only read is ended first — the checks it made are plain reads, and
what must not change between check and write is re-read under a row lock afterwards — and
the render runs with nothing held. The next query opens a fresh transaction.

A transaction that has already written cannot be ended on the caller's behalf; there the
render runs in place and a warning is logged, so a call path that renders after a write
is visible (tests/integration/test_render_unlocked.py drives every request path).
"""
from __future__ import annotations

from flask import current_app
from sqlalchemy import event
from sqlalchemy.orm import Session

from models import db

_WROTE = "sagan_wrote"


@event.listens_for(Session, "after_flush")
def _flushed(session, _context):
    session.info[_WROTE] = True


@event.listens_for(Session, "do_orm_execute")
def _executed(state):
    if not state.is_select:
        state.session.info[_WROTE] = True


@event.listens_for(Session, "after_transaction_end")
def _ended(session, transaction):
    if transaction.parent is None:
        session.info.pop(_WROTE, None)


def has_written() -> bool:
    """Has the session's open transaction written (or does it hold unflushed changes)?"""
    session = db.session()
    return bool(session.info.get(_WROTE) or session.new or session.dirty or session.deleted
                or session.in_nested_transaction())


def release_reads() -> bool:
    """End the session's transaction if it has only read; True when none is open after."""
    session = db.session()
    if not session.in_transaction():
        return True
    if has_written():
        return False
    session.commit()
    return True


def outside_transaction(render, *args, **kwargs):
    """`render(*args, **kwargs)` — a pure function of text — with no transaction open."""
    if not release_reads():
        current_app.logger.warning("Rendering %s inside a transaction that has written; SQLite's "
                                   "write lock is held meanwhile.", getattr(render, "__name__", render))
    return render(*args, **kwargs)
