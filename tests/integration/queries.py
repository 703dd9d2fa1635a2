"""Counting the SQL a request runs, for the tests that hold a page or a poll to a constant
number of queries (the board, the run page, the experiment page's poll, the fault tests)."""
from __future__ import annotations

from contextlib import contextmanager

import sqlalchemy as sa

from models import db


@contextmanager
def counting_queries(app):
    """The SQL statements run while the block runs, on any connection of the app's engine."""
    statements: list[str] = []

    def record(_conn, _cursor, statement, *_args):
        statements.append(statement)

    with app.app_context():
        engine = db.engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
