"""0025_ideation, on PostgreSQL and on SQLite: the two tables arrive, `ideation` becomes a
record kind a link may name (refused before), the other links survive the rebuilt
constraints both ways, and the downgrade removes the links that name a session."""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

import flask_migrate
import pytest
import sqlalchemy as sa

from models import db
from tests.integration.test_metric_chunks_migration import MIGRATIONS, _scratch_app, scratch_url  # noqa: F401

BEFORE = "0023_literature_search"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
LINKS = sa.table("record_links", *(sa.column(c) for c in ("source_kind", "target_kind", "kind", "note",
                                                          "actor_kind", "actor_label")),
                 sa.column("id", sa.Uuid()), sa.column("source_id", sa.Uuid()), sa.column("target_id", sa.Uuid()),
                 sa.column("created_at", sa.DateTime(timezone=True)),
                 sa.column("updated_at", sa.DateTime(timezone=True)))


def _link(source_kind: str) -> None:
    db.session.execute(sa.insert(LINKS).values(
        id=uuid.uuid4(), source_kind=source_kind, source_id=uuid.uuid4(), target_kind="belief",
        target_id=uuid.uuid4(), kind="derives_from", note="", actor_kind="owner", actor_label="",
        created_at=NOW, updated_at=NOW))
    db.session.commit()


def _kinds() -> list[str]:
    kinds = sorted(db.session.scalars(sa.text("SELECT source_kind FROM record_links")))
    db.session.commit()  # an open read holds a lock the next migration's ALTER TABLE would wait for
    return kinds


def test_ideation_is_a_record_kind_only_after_the_upgrade(scratch_url):  # noqa: F811 - the fixture
    app = _scratch_app(scratch_url)
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS, revision=BEFORE)
            _link("todo")
            with pytest.raises(sa.exc.IntegrityError):
                _link("ideation")
            db.session.rollback()
            flask_migrate.upgrade(directory=MIGRATIONS, revision="0025_ideation")
            _link("ideation")
            tables = sa.inspect(db.engine).get_table_names()
            assert {"ideation_sessions", "idea_cards"} <= set(tables)
            assert _kinds() == ["ideation", "todo"]
            flask_migrate.downgrade(directory=MIGRATIONS, revision=BEFORE)
            assert _kinds() == ["todo"]
            assert "ideation_sessions" not in sa.inspect(db.engine).get_table_names()
            with pytest.raises(sa.exc.IntegrityError):
                _link("ideation")
            db.session.rollback()
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()
