"""The schema comes from the migrations, the same on PostgreSQL and SQLite, and the
database's status constraint comes from the one registry (SPEC §2.1 lesson)."""
from __future__ import annotations

import re
from pathlib import Path

import flask_migrate
import pytest
import sqlalchemy as sa

import config as sagan_config
from app import create_app
from models import db
from services.core import registry
from tests.integration.databases import scratch_postgres_url

MIGRATIONS = str(Path(__file__).resolve().parents[2] / "migrations")


def check_values(app, constraint: str, table: str = "experiments") -> list[str]:
    """The quoted values of a CHECK constraint, as PostgreSQL's catalog prints it."""
    with app.app_context():
        definition = db.session.scalar(sa.text(
            "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c "
            "JOIN pg_class t ON t.oid = c.conrelid "
            "WHERE c.conname = :name AND t.relname = :table"), {"name": constraint, "table": table})
    assert definition, f"no constraint {constraint} on {table}"
    return re.findall(r"'([^']*)'", definition)


def test_status_check_constraint_lists_exactly_the_registry(app):
    """Does PostgreSQL's CHECK on experiments.status list exactly the registry's statuses?"""
    assert check_values(app, "ck_experiments_status") == registry.STATUS_NAMES


def test_status_before_block_constraint_lists_the_registry(app):
    """Is status_before_block limited to the registry's statuses too?"""
    assert check_values(app, "ck_experiments_status_before_block") == registry.STATUS_NAMES


def test_failure_reason_constraint_lists_exactly_the_registry(app):
    """Do the migrations' failure reasons (output_limit, model_refusal, … included) match the registry's?"""
    assert check_values(app, "ck_agent_runs_failure_reason", "agent_runs") == list(registry.FAILURE_REASONS)


def test_database_refuses_a_status_outside_the_registry(app, make_experiment):
    """Does writing an unknown status straight to the table fail at the database?"""
    number = make_experiment("Constraint probe")
    with app.app_context():
        with pytest.raises(sa.exc.IntegrityError):
            db.session.execute(sa.text("UPDATE experiments SET status = 'running_ish' WHERE number = :n"),
                               {"n": number})
        db.session.rollback()


def _scratch_app(url: str):
    class ScratchConfig(sagan_config.TestConfig):
        SQLALCHEMY_DATABASE_URI = url
        SQLALCHEMY_ENGINE_OPTIONS: dict = {}
    return create_app(ScratchConfig)


# Full-text search is built differently on each backend (migrations 0020_literature and
# 0023_literature_search): a stored tsvector column with its GIN index on PostgreSQL, an FTS5
# table and its shadow tables on SQLite.
BACKEND_SEARCH_INDEXES = {"ix_literature_items_search"}
BACKEND_SEARCH_TABLE_PREFIX = "literature_fts"
BACKEND_SEARCH_COLUMNS = {("literature_items", "search_vector")}


def _schema(app) -> dict:
    """Tables → columns, index names and unique-constraint names, as reflected."""
    with app.app_context():
        inspector = sa.inspect(db.engine)
        schema = {}
        for table in inspector.get_table_names():
            if table == "alembic_version" or table.startswith(BACKEND_SEARCH_TABLE_PREFIX):
                continue
            indexes = {i["name"] for i in inspector.get_indexes(table)
                       if not i.get("duplicates_constraint") and i["name"] not in BACKEND_SEARCH_INDEXES}
            uniques = {u["name"] for u in inspector.get_unique_constraints(table)}
            schema[table] = {
                "columns": sorted(c["name"] for c in inspector.get_columns(table)
                                  if (table, c["name"]) not in BACKEND_SEARCH_COLUMNS),
                "indexes": sorted(indexes),
                "uniques": sorted(uniques),
            }
        return schema


def _tables(app) -> list[str]:
    with app.app_context():
        return sorted(sa.inspect(db.engine).get_table_names())


@pytest.fixture
def scratch_postgres():
    """An empty PostgreSQL database of our own, dropped afterwards."""
    with scratch_postgres_url("sagan_migrations") as url:
        yield url


def test_migrations_build_the_same_schema_on_postgres_and_sqlite(scratch_postgres, tmp_path):
    """Do PostgreSQL and SQLite migrate to the same schema, and downgrade to nothing but alembic_version?"""
    pg_app = _scratch_app(scratch_postgres)
    lite_app = _scratch_app(f"sqlite:///{tmp_path / 'sagan.db'}")
    try:
        for app in (pg_app, lite_app):
            with app.app_context():
                flask_migrate.upgrade(directory=MIGRATIONS)

        pg_schema, lite_schema = _schema(pg_app), _schema(lite_app)
        assert sorted(pg_schema) == sorted(lite_schema)
        assert {t.name for t in db.metadata.sorted_tables} == set(pg_schema)
        for table in pg_schema:
            assert pg_schema[table] == lite_schema[table], table
        assert "uq_experiments_number" in pg_schema["experiments"]["uniques"]

        for app in (pg_app, lite_app):
            with app.app_context():
                flask_migrate.downgrade(directory=MIGRATIONS, revision="base")
            assert _tables(app) == ["alembic_version"]
    finally:
        for app in (pg_app, lite_app):
            with app.app_context():
                db.session.remove()
                db.engine.dispose()


def test_migrated_schema_matches_the_models(app):
    """Does Alembic autogenerate find nothing to change between the models and the migrated DB?"""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with app.app_context():
        with db.engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, db.metadata)
    # The search index and column exist on PostgreSQL only; the models cannot declare them for both backends.
    diff = [change for change in diff
            if not (change[0] == "remove_index" and change[1].name in BACKEND_SEARCH_INDEXES)
            and not (change[0] == "remove_column" and (change[2], change[3].name) in BACKEND_SEARCH_COLUMNS)]
    assert diff == []



def test_sqlite_migrations_keep_the_rows_that_point_at_a_rebuilt_table(tmp_path):
    """Batch mode rebuilds a SQLite table (copy, drop, rename); with foreign keys on, the drop
    set every pod's run to NULL and deleted what hangs off a pod. Does a pod keep its run and
    its progress post through every migration since 0007, up and down?"""
    app = _scratch_app(f"sqlite:///{tmp_path / 'sagan.db'}")
    with app.app_context():
        flask_migrate.upgrade(directory=MIGRATIONS, revision="0007_run_cache_tokens")
        ids = {name: f"{n:032x}" for n, name in enumerate(("experiment", "run", "pod", "post"), start=1)}
        for statement in (
            "INSERT INTO experiments (id, number, title, status, kind, priority, assignee_kind, tags, has_clean_result, "
            "auto_approve_plan, runpod_account, created_at, updated_at) VALUES (:experiment, 1, 'Kept', 'running', "
            "'experiment', 'normal', 'agent', '[]', 0, 0, 'local', '2026-12-01', '2026-12-01')",
            "INSERT INTO agent_runs (id, kind, agent, provider, request, scope_id, scope_kind, status, "
            "approval_required, input_tokens, output_tokens, turns, last_seq, created_at, updated_at) VALUES (:run, "
            "'experiment', 'provisioner', 'anthropic', 'd', :experiment, 'experiment', 'waiting', 0, 0, 0, 0, 0, "
            "'2026-12-01', '2026-12-01')",
            "INSERT INTO pods (id, agent_run_id, experiment_id, account, name, status, run_index, attempt, gpu_count, "
            "retry_count, max_retries, bootstrap_count, uptime_seconds, created_at, updated_at) VALUES (:pod, :run, "
            ":experiment, 'local', 'kept-0', 'running', 0, 1, 1, 0, 3, 0, 0, '2026-12-01', '2026-12-01')",
            "INSERT INTO pod_progress_posts (id, pod_id, progress_pct, message, created_at) "
            "VALUES (:post, :pod, 5.0, 'hello', '2026-12-01')",
        ):
            db.session.execute(sa.text(statement), ids)
        db.session.commit()
        db.session.remove()

        def kept() -> tuple:
            with db.engine.connect() as conn:
                return (conn.scalar(sa.text("SELECT agent_run_id FROM pods")),
                        conn.scalar(sa.text("SELECT count(*) FROM pod_progress_posts")))

        flask_migrate.upgrade(directory=MIGRATIONS)
        assert kept() == (ids["run"], 1)
        flask_migrate.downgrade(directory=MIGRATIONS, revision="0007_run_cache_tokens")
        assert kept() == (ids["run"], 1)
        with db.engine.connect() as conn:  # the app's own connections enforce foreign keys again
            assert conn.scalar(sa.text("PRAGMA foreign_keys")) == 1
    with app.app_context():
        db.engine.dispose()
