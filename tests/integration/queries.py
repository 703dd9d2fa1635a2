"""Counting the SQL a request runs, for the tests that hold a page or a poll to a constant
number of queries (the board, the run page, the experiment page's poll, the fault tests)."""
from __future__ import annotations

from contextlib import contextmanager

import sqlalchemy as sa


@contextmanager
def counting_queries():
    """The SQL statements run while the block runs, on every engine: the quiet polls read on
    a connection of their own (services/core/lean_reads.py), which must be counted too."""
    statements: list[str] = []

    def record(_conn, _cursor, statement, *_args):
        statements.append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", record)
