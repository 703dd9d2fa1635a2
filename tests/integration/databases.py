"""A PostgreSQL database of a test's own, for migrations run from nothing."""
from __future__ import annotations

import contextlib
import uuid

import sqlalchemy as sa

import config as sagan_config


@contextlib.contextmanager
def scratch_postgres_url(prefix: str):
    """The URL of a new, empty database beside the test database; dropped afterwards."""
    base = sa.engine.make_url(sagan_config.TestConfig.SQLALCHEMY_DATABASE_URI)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
