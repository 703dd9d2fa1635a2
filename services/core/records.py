"""Finding rows by id, the same way everywhere: a malformed id is simply not found; many
ids at once as one parameter."""
from __future__ import annotations

import uuid

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import insert as pg_insert

from models import Counter, db
from services.core.errors import NotFound


def get_by_id(model, raw_id, message: str):
    """The `model` row whose id is `raw_id`, else NotFound(message) — also for an id that is not a UUID."""
    try:
        row = db.session.get(model, uuid.UUID(str(raw_id)))
    except ValueError:
        row = None
    if row is None:
        raise NotFound(message)
    return row


def among(column, ids) -> sa.ColumnElement:
    """`column IN ids`. On PostgreSQL as `column = ANY(:array)`, one parameter: an IN list
    of the board's 274 ids was 274 bind parameters for SQLAlchemy to render and psycopg to
    parse, with no statement cache for the text (its length changes with the count) —
    about 3 ms of Python per query. SQLite (the embedded default) keeps the IN list."""
    ids = list(ids)
    if db.engine.dialect.name != "postgresql":
        return column.in_(ids)
    if ids and all(isinstance(value, uuid.UUID) for value in ids):
        # UUIDs travel as one array literal that PostgreSQL casts: psycopg dumps a list
        # element by element, with a quoting check on each (0.7 ms for the board's 256
        # ids, three times per board). A UUID's text is hex and dashes: nothing to quote.
        literal = "{" + ",".join(map(str, ids)) + "}"
        return column == sa.any_(sa.cast(sa.bindparam(None, literal, type_=sa.Text), postgresql.ARRAY(column.type)))
    return column == sa.any_(sa.bindparam(None, ids, type_=postgresql.ARRAY(column.type)))


def next_number(counter: str, number_column) -> int:
    """The next number of a numbered record (B12, T4): one UPDATE … RETURNING on its own
    counter row, whose row lock makes concurrent creators take turns. A counter that does not
    exist yet starts after the highest number already in `number_column`."""
    bump = sa.update(Counter).where(Counter.name == counter).values(value=Counter.value + 1) \
        .returning(Counter.value)
    value = db.session.execute(bump).scalar()
    if value is None:
        highest = db.session.scalar(sa.select(sa.func.max(number_column))) or 0
        if db.engine.dialect.name == "postgresql":
            stmt = pg_insert(Counter).values(name=counter, value=highest).on_conflict_do_nothing()
        else:
            stmt = sa.insert(Counter).values(name=counter, value=highest).prefix_with("OR IGNORE")
        db.session.execute(stmt)
        value = db.session.execute(bump).scalar()
    return int(value)
