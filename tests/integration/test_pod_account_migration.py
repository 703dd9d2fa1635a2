"""0019_pod_account, on PostgreSQL and on SQLite: `runpod_account` becomes `pod_account` on
experiments, approval requests and agent runs with every row keeping its account, the CHECK
listing the accounts goes (the services check the pod-accounts table), and the downgrade
gives the old columns and the CHECK back."""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

import flask_migrate
import pytest
import sqlalchemy as sa

from models import db
from tests.integration.old_rows import old_experiment
from tests.integration.test_metric_chunks_migration import MIGRATIONS, _scratch_app, scratch_url  # noqa: F401

BEFORE = "0018_research_record"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def _seed_request_and_run(experiment_id: uuid.UUID) -> None:
    """An approval request made for `team` and an agent run on `personal`, as 0018 holds them."""
    requests = sa.table("approval_requests", sa.column("id", sa.Uuid()), sa.column("experiment_id", sa.Uuid()),
                        *(sa.column(c) for c in ("kind", "title", "status", "requested_state", "approved_state",
                                                 "rejected_state", "runpod_account")),
                        sa.column("checklist", sa.JSON()), sa.column("answers", sa.JSON()),
                        sa.column("created_at", sa.DateTime(timezone=True)),
                        sa.column("updated_at", sa.DateTime(timezone=True)))
    db.session.execute(sa.insert(requests).values(
        id=uuid.uuid4(), experiment_id=experiment_id, kind="experiment_plan", title="Plan", status="pending",
        requested_state="plan_pending", approved_state="approved", rejected_state="planning",
        runpod_account="team", checklist={}, answers={}, created_at=NOW, updated_at=NOW))
    runs = sa.table("agent_runs", sa.column("id", sa.Uuid()), sa.column("scope_id", sa.Uuid()),
                    *(sa.column(c) for c in ("kind", "agent", "provider", "request", "scope_kind", "status",
                                             "runpod_account")),
                    sa.column("approval_required", sa.Boolean()),
                    *(sa.column(c, sa.Integer()) for c in ("input_tokens", "output_tokens", "turns", "last_seq")),
                    sa.column("created_at", sa.DateTime(timezone=True)),
                    sa.column("updated_at", sa.DateTime(timezone=True)))
    db.session.execute(sa.insert(runs).values(
        id=uuid.uuid4(), scope_id=experiment_id, kind="experiment", agent="provisioner", provider="anthropic",
        request="dispatch", scope_kind="experiment", status="waiting", runpod_account="personal",
        approval_required=False, input_tokens=0, output_tokens=0, turns=0, last_seq=0, created_at=NOW,
        updated_at=NOW))


def _accounts(column: str) -> dict[str, str]:
    """Each table's account, read through `column`."""
    return {table: db.session.scalar(sa.text(f"SELECT {column} FROM {table}"))
            for table in ("experiments", "approval_requests", "agent_runs")}


def test_every_row_keeps_its_account_up_and_down(scratch_url):  # noqa: F811 - the fixture
    """Does each experiment, approval request and agent run keep its account through the
    upgrade (as `pod_account`) and the downgrade (as `runpod_account` again)?"""
    app = _scratch_app(scratch_url)
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS, revision=BEFORE)
            experiment_id = old_experiment(1, "Personal run", status="running", account="personal")
            _seed_request_and_run(experiment_id)
            db.session.commit()
            db.session.remove()

            flask_migrate.upgrade(directory=MIGRATIONS)
            assert _accounts("pod_account") == {
                "experiments": "personal", "approval_requests": "team", "agent_runs": "personal"}
            for table in ("experiments", "approval_requests", "agent_runs"):
                columns = {c["name"] for c in sa.inspect(db.session.connection()).get_columns(table)}
                assert "pod_account" in columns and "runpod_account" not in columns, table
            db.session.remove()

            flask_migrate.downgrade(directory=MIGRATIONS, revision=BEFORE)
            assert _accounts("runpod_account") == {
                "experiments": "personal", "approval_requests": "team", "agent_runs": "personal"}
            db.session.remove()
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()


def test_an_account_the_old_check_never_listed_is_stored_after_the_upgrade(scratch_url):  # noqa: F811
    """Is the database's list of accounts gone after 0019 (a new provider needs no migration),
    and back after the downgrade?"""
    app = _scratch_app(scratch_url)
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS, revision=BEFORE)
            old_experiment(1, "Before")
            db.session.commit()
            with pytest.raises(sa.exc.IntegrityError):
                db.session.execute(sa.text("UPDATE experiments SET runpod_account = 'toycloud'"))
            db.session.rollback()
            db.session.remove()

            flask_migrate.upgrade(directory=MIGRATIONS)
            db.session.execute(sa.text("UPDATE experiments SET pod_account = 'toycloud'"))
            db.session.commit()
            assert db.session.scalar(sa.text("SELECT pod_account FROM experiments")) == "toycloud"
            db.session.execute(sa.text("UPDATE experiments SET pod_account = 'local'"))
            db.session.commit()
            db.session.remove()

            flask_migrate.downgrade(directory=MIGRATIONS, revision=BEFORE)
            with pytest.raises(sa.exc.IntegrityError):
                db.session.execute(sa.text("UPDATE experiments SET runpod_account = 'toycloud'"))
            db.session.rollback()
            db.session.remove()
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()
