"""0024_weekly_review, on PostgreSQL and on SQLite: agent runs made before it read `pending`
(unclassified), share links made before it keep working beside a new weekly-review link, and
the downgrade gives the old schema back, dropping only the links the old CHECK cannot hold."""
from __future__ import annotations

import uuid

import flask_migrate
import pytest
import sqlalchemy as sa

from models import db
from services.core.clock import utcnow
from tests.integration.test_metric_chunks_migration import MIGRATIONS, _scratch_app, scratch_url  # noqa: F401

BEFORE = "0023_literature_search"


def _sql(statement: str, **params):
    """Raw SQL with ids and times bound as their types (SQLite's driver takes neither as is)."""
    typed = [sa.bindparam(name, type_=sa.Uuid() if isinstance(value, uuid.UUID) else sa.DateTime(timezone=True))
             for name, value in params.items() if isinstance(value, (uuid.UUID,)) or hasattr(value, "tzinfo")]
    return db.session.execute(sa.text(statement).bindparams(*typed), params)


def _insert_old_rows() -> tuple[uuid.UUID, uuid.UUID]:
    """An agent run and an "all promoted results" link as 0023 holds them."""
    run_id, link_id, now = uuid.uuid4(), uuid.uuid4(), utcnow()
    _sql("INSERT INTO agent_runs (id, kind, agent, provider, status, request, scope_kind, approval_required, "
        "input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens, cost_usd, turns, "
        "last_seq, created_at, updated_at) VALUES (:id, 'apply', 'analyzer', 'anthropic', 'completed', 'Old.', "
        "'experiment', false, 0, 0, 0, 0, 1.5, 1, 0, :now, :now)", **{"id": run_id, "now": now})
    _sql("INSERT INTO share_links (id, token_hash, scope, label, include_comments, use_count, created_at, updated_at) "
        "VALUES (:id, :hash, 'all_promoted', 'Old link', false, 0, :now, :now)", **{"id": link_id, "hash": "a" * 64, "now": now})
    db.session.commit()
    return run_id, link_id


def test_runs_and_links_survive_up_and_down(scratch_url):  # noqa: F811 - the fixture
    app = _scratch_app(scratch_url)
    with app.app_context():
        flask_migrate.upgrade(directory=MIGRATIONS, revision=BEFORE)
        run_id, _old_link = _insert_old_rows()
        db.session.remove()

        flask_migrate.upgrade(directory=MIGRATIONS)
        assert _sql("SELECT classification, classification_by FROM agent_runs WHERE id = :id",
                    id=run_id).one() == ("pending", None)
        now, review_id = utcnow(), uuid.uuid4()
        _sql("INSERT INTO weekly_reviews (id, week_end, time_zone, summary, drafted_at, drafted_by, created_at, "
            "updated_at) VALUES (:id, '2026-12-06', 'UTC', '{}', :now, 'owner', :now, :now)", **{"id": review_id, "now": now})
        _sql("INSERT INTO share_links (id, token_hash, scope, weekly_review_id, label, include_comments, use_count, "
            "created_at, updated_at) VALUES (:id, :hash, 'weekly_review', :review, 'Mentor', false, 0, :now, :now)", **{"id": uuid.uuid4(), "hash": "b" * 64, "review": review_id, "now": now})
        db.session.commit()
        with pytest.raises(sa.exc.IntegrityError):  # a second review of the same week
            _sql("INSERT INTO weekly_reviews (id, week_end, time_zone, summary, drafted_at, drafted_by, created_at, "
                "updated_at) VALUES (:id, '2026-12-06', 'UTC', '{}', :now, 'owner', :now, :now)", **{"id": uuid.uuid4(), "now": now})
        db.session.rollback()
        with pytest.raises(sa.exc.IntegrityError):
            _sql("UPDATE agent_runs SET classification = 'great' WHERE id = :id", **{"id": run_id})
        db.session.rollback()
        db.session.remove()

        flask_migrate.downgrade(directory=MIGRATIONS, revision=BEFORE)
        tables = sa.inspect(db.engine).get_table_names()
        assert "weekly_reviews" not in tables and "weekly_review_versions" not in tables
        assert "classification" not in {c["name"] for c in sa.inspect(db.engine).get_columns("agent_runs")}
        assert db.session.execute(sa.text("SELECT label FROM share_links")).scalars().all() == ["Old link"]
        db.session.remove()
        flask_migrate.upgrade(directory=MIGRATIONS)  # and up again
        db.session.remove()
