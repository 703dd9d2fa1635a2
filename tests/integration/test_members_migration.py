"""0027_members, on PostgreSQL and on SQLite: the account that existed becomes the owner
(the role's default, so no one's access changes), members and invitations can be stored,
the role CHECK refuses an unknown role, members' comments and events are allowed; the
downgrade removes the members' accounts with their tokens and comments, gives their
timeline events to the system, and keeps the owner's and the experiments they proposed."""
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
STAMPS = {"created_at": NOW, "updated_at": NOW}


def _users():
    return sa.table("users", *(sa.column(c) for c in ("email", "password_hash", "display_name", "role")),
                    sa.column("id", sa.Uuid()), sa.column("session_version", sa.Integer()),
                    sa.column("created_at", sa.DateTime(timezone=True)),
                    sa.column("updated_at", sa.DateTime(timezone=True)))


def _tokens():
    return sa.table("api_tokens", *(sa.column(c) for c in ("name", "prefix", "secret_hash")),
                    sa.column("scopes", sa.JSON()), sa.column("id", sa.Uuid()), sa.column("user_id", sa.Uuid()),
                    sa.column("created_at", sa.DateTime(timezone=True)),
                    sa.column("updated_at", sa.DateTime(timezone=True)))


def test_the_owner_stays_the_owner_up_and_down(scratch_url):  # noqa: F811 - the fixture
    app = _scratch_app(scratch_url)
    owner_id, member_id = uuid.uuid4(), uuid.uuid4()
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS, revision=BEFORE)
            users = sa.table("users", *(sa.column(c) for c in ("email", "password_hash", "display_name")),
                             sa.column("id", sa.Uuid()), sa.column("session_version", sa.Integer()),
                             sa.column("created_at", sa.DateTime(timezone=True)),
                             sa.column("updated_at", sa.DateTime(timezone=True)))
            db.session.execute(sa.insert(users).values(id=owner_id, email="o@example.org", password_hash="h",
                                                       display_name="O", session_version=1, **STAMPS))
            db.session.commit()
            db.session.remove()

            flask_migrate.upgrade(directory=MIGRATIONS, revision="0027_members")
            assert db.session.scalar(sa.text("SELECT role FROM users")) == "owner"
            db.session.execute(sa.insert(_users()).values(id=member_id, email="m@example.org", password_hash="h",
                                                          display_name="M", role="collaborator", session_version=1,
                                                          **STAMPS))
            db.session.execute(sa.insert(_tokens()), [
                {"id": uuid.uuid4(), "user_id": holder, "name": "t", "prefix": f"sk_{i}", "secret_hash": f"h{i}",
                 "scopes": ["read"], **STAMPS} for i, holder in enumerate((owner_id, member_id))])
            db.session.commit()
            with pytest.raises(sa.exc.IntegrityError):
                db.session.execute(sa.insert(_users()).values(id=uuid.uuid4(), email="x@example.org",
                                                              password_hash="h", display_name="X", role="admin",
                                                              session_version=1, **STAMPS))
                db.session.commit()
            db.session.rollback()
            tables = set(sa.inspect(db.session.connection()).get_table_names())
            assert {"member_projects", "invitations"} <= tables
            # What a member wrote: a comment and a timeline event, on an experiment they proposed.
            experiment_id = uuid.uuid4()
            experiments = sa.table("experiments", *(sa.column(c) for c in (
                "title", "status", "kind", "priority", "assignee_kind", "pod_account")),
                sa.column("id", sa.Uuid()), sa.column("proposed_by_member_id", sa.Uuid()),
                sa.column("number", sa.Integer()), sa.column("tags", sa.JSON()),
                *(sa.column(c, sa.Boolean()) for c in ("has_clean_result", "auto_approve_plan", "proposed_by_agent")),
                sa.column("created_at", sa.DateTime(timezone=True)), sa.column("updated_at", sa.DateTime(timezone=True)))
            db.session.execute(sa.insert(experiments).values(
                id=experiment_id, number=1, title="Proposed", status="proposed", kind="experiment", priority="normal",
                assignee_kind="agent", pod_account="local", tags=[], has_clean_result=False, auto_approve_plan=False,
                proposed_by_agent=False, proposed_by_member_id=member_id, **STAMPS))
            comments = sa.table("comments", *(sa.column(c) for c in ("entity_kind", "author_kind", "author_name",
                                                                      "body_md", "body_html")),
                                sa.column("id", sa.Uuid()), sa.column("entity_id", sa.Uuid()),
                                sa.column("created_at", sa.DateTime(timezone=True)),
                                sa.column("updated_at", sa.DateTime(timezone=True)))
            db.session.execute(sa.insert(comments), [
                {"id": uuid.uuid4(), "entity_kind": "experiment", "entity_id": experiment_id, "author_kind": kind,
                 "author_name": kind, "body_md": "b", "body_html": "<p>b</p>", **STAMPS}
                for kind in ("member", "owner")])
            events = sa.table("workflow_events", *(sa.column(c) for c in ("entity_kind", "event_type", "actor_kind",
                                                                          "actor_id")),
                              sa.column("id", sa.Uuid()), sa.column("entity_id", sa.Uuid()),
                              sa.column("experiment_id", sa.Uuid()),
                              sa.column("created_at", sa.DateTime(timezone=True)),
                              sa.column("updated_at", sa.DateTime(timezone=True)))
            db.session.execute(sa.insert(events).values(
                id=uuid.uuid4(), entity_kind="experiment", entity_id=experiment_id, experiment_id=experiment_id,
                event_type="comment", actor_kind="member", actor_id=str(member_id), **STAMPS))
            db.session.commit()
            db.session.remove()

            flask_migrate.downgrade(directory=MIGRATIONS, revision=BEFORE)
            assert db.session.execute(sa.text("SELECT email FROM users")).scalars().all() == ["o@example.org"]
            assert db.session.scalar(sa.text("SELECT count(*) FROM api_tokens")) == 1
            assert db.session.execute(sa.text("SELECT author_kind FROM comments")).scalars().all() == ["owner"]
            assert db.session.execute(sa.text("SELECT actor_kind, actor_id FROM workflow_events")).all() == \
                [("system", None)]
            assert db.session.scalar(sa.text("SELECT title FROM experiments")) == "Proposed"
            for table in ("experiments", "todos"):
                assert "proposed_by_member_id" not in {
                    c["name"] for c in sa.inspect(db.session.connection()).get_columns(table)}
            columns = {c["name"] for c in sa.inspect(db.session.connection()).get_columns("users")}
            assert "role" not in columns and "removed_at" not in columns
            tables = set(sa.inspect(db.session.connection()).get_table_names())
            assert not {"member_projects", "invitations"} & tables
            db.session.remove()
    finally:
        with app.app_context():
            db.session.remove()
