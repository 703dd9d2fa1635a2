"""0029_member_assignments, on PostgreSQL and on SQLite: a todo that existed is assigned to no
one and a review that existed is shown to no mentor (members see nothing new after the
upgrade); the downgrade drops both columns and keeps the rows."""
from __future__ import annotations

import uuid
from datetime import date, datetime, timezone

import flask_migrate
import sqlalchemy as sa

from models import db
from tests.integration.test_metric_chunks_migration import MIGRATIONS, _scratch_app, scratch_url  # noqa: F401

BEFORE, AFTER = "0028_agent_logs_share", "0029_member_assignments"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
STAMPS = {"created_at": NOW, "updated_at": NOW}


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(db.session.connection()).get_columns(table)}


def test_nothing_is_assigned_or_shown_after_the_upgrade_and_the_downgrade_keeps_the_rows(scratch_url):  # noqa: F811
    app = _scratch_app(scratch_url)
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS, revision=BEFORE)
            todos = sa.table("todos", *(sa.column(c) for c in ("title", "body_md", "status", "intent", "priority",
                                                                 "assignee_kind")),
                             sa.column("id", sa.Uuid()), sa.column("number", sa.Integer()),
                             sa.column("created_at", sa.DateTime(timezone=True)),
                             sa.column("updated_at", sa.DateTime(timezone=True)))
            reviews = sa.table("weekly_reviews", sa.column("id", sa.Uuid()), sa.column("week_end", sa.Date()),
                               sa.column("time_zone"), sa.column("summary", sa.JSON()), sa.column("drafted_by"),
                               sa.column("drafted_at", sa.DateTime(timezone=True)),
                               sa.column("created_at", sa.DateTime(timezone=True)),
                               sa.column("updated_at", sa.DateTime(timezone=True)))
            db.session.execute(sa.insert(todos).values(id=uuid.uuid4(), number=1, title="Old errand", body_md="",
                                                       status="inbox", intent="exploratory", priority="normal",
                                                       assignee_kind="human", **STAMPS))
            db.session.execute(sa.insert(reviews).values(id=uuid.uuid4(), week_end=date(2026, 11, 29), time_zone="UTC",
                                                         summary={}, drafted_by="owner", drafted_at=NOW, **STAMPS))
            db.session.commit()
            db.session.remove()

            flask_migrate.upgrade(directory=MIGRATIONS, revision=AFTER)
            assert db.session.execute(sa.text("SELECT title, assigned_member_id FROM todos")).one() == ("Old errand", None)
            assert db.session.scalar(sa.text("SELECT shown_to_mentors FROM weekly_reviews")) in (False, 0)
            db.session.remove()

            flask_migrate.downgrade(directory=MIGRATIONS, revision=BEFORE)
            assert "assigned_member_id" not in _columns("todos")
            assert "shown_to_mentors" not in _columns("weekly_reviews")
            assert db.session.scalar(sa.text("SELECT title FROM todos")) == "Old errand"
            assert db.session.scalar(sa.text("SELECT count(*) FROM weekly_reviews")) == 1
            db.session.remove()
            flask_migrate.upgrade(directory=MIGRATIONS, revision=AFTER)  # and up again
            assert "assigned_member_id" in _columns("todos")
    finally:
        with app.app_context():
            db.session.remove()
