"""0015_artifact_budgets counts the artifacts already stored (per pod, per experiment) and hands
the large figures the old job had not sanitized yet to the artifacts queue, on PostgreSQL and
on SQLite, keeping every figure's link to its artifact; downgrading removes what it added."""
from __future__ import annotations

import uuid

import flask_migrate
import pytest
import sqlalchemy as sa

from models import Pod, db
from services.core import redis_store
from services.core.clock import utcnow
from services.dispatch import artifacts
from tests.integration.databases import scratch_postgres_url
from tests.integration.old_rows import old_experiment
from tests.integration.test_migrations import MIGRATIONS, _scratch_app

BEFORE = "0014_promoted_results"


@pytest.fixture(params=["postgresql", "sqlite"])
def scratch_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sagan.db'}"
        return
    with scratch_postgres_url("sagan_budgets") as url:
        yield url


def _seed(experiment_id, pods) -> dict:
    """Artifacts and figures in 0014's shape, with plain SQL (the models are 0015's): the first
    pod's text and its large SVG whose figure is still empty, the second pod's text, an
    analysis's image. Returns name → id."""
    table = sa.table("artifacts", *(sa.column(c) for c in ("name", "content_type", "size", "sha256")),
                     sa.column("id", sa.Uuid()), sa.column("pod_id", sa.Uuid()), sa.column("experiment_id", sa.Uuid()),
                     sa.column("content", sa.LargeBinary()), sa.column("created_at", sa.DateTime(timezone=True)),
                     sa.column("updated_at", sa.DateTime(timezone=True)))
    now = utcnow()
    rows = [("a.txt", "text/plain", 100, pods[0]), ("b.svg", "image/svg+xml", 70_000, pods[0]),
            ("c.txt", "text/plain", 50, pods[1]), ("analysis/x/d.png", "image/png", 10, None)]
    ids = {name: uuid.uuid4() for name, *_ in rows}
    db.session.execute(sa.insert(table), [
        {"id": ids[name], "name": name, "content_type": kind, "size": size, "sha256": f"{len(name):064d}",
         "pod_id": pod, "experiment_id": experiment_id, "content": b"x" * size, "created_at": now,
         "updated_at": now} for name, kind, size, pod in rows])
    figures = sa.table("figures", sa.column("id", sa.Uuid()), sa.column("experiment_id", sa.Uuid()),
                       sa.column("artifact_id", sa.Uuid()), sa.column("kind"), sa.column("title"),
                       sa.column("content"), sa.column("created_at", sa.DateTime(timezone=True)),
                       sa.column("updated_at", sa.DateTime(timezone=True)))
    db.session.execute(sa.insert(figures), [
        {"id": uuid.uuid4(), "experiment_id": experiment_id, "artifact_id": ids["b.svg"], "kind": "svg",
         "title": "b.svg", "content": None, "created_at": now, "updated_at": now},
        {"id": uuid.uuid4(), "experiment_id": experiment_id, "artifact_id": ids["analysis/x/d.png"],
         "kind": "image", "title": "d.png", "content": None, "created_at": now, "updated_at": now}])
    db.session.commit()
    return ids


def test_stored_artifacts_are_counted_and_waiting_figures_handed_over(scratch_url):
    """After upgrading, do the counters hold what each pod and the experiment stored, is the SVG
    whose figure was still empty `processing` (and queued by the sweep), the rest `ready`; and
    does downgrading drop the table and the columns?"""
    app = _scratch_app(scratch_url)
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS, revision=BEFORE)
            experiment_id = old_experiment(1, "Migrated artifacts")
            pods = [Pod(id=uuid.uuid4(), experiment_id=experiment_id, account="local", name=f"migrated-{i}",
                        status="running") for i in range(2)]
            db.session.add_all(pods)
            db.session.commit()
            pod_ids = [p.id for p in pods]
            ids = _seed(experiment_id, pod_ids)
            db.session.remove()

            flask_migrate.upgrade(directory=MIGRATIONS)
            usage = {row.scope_id: (row.scope, row.files, row.bytes) for row in db.session.execute(
                sa.text("SELECT scope_id, scope, files, bytes FROM artifact_usage"))}
            usage = {uuid.UUID(str(key)): value for key, value in usage.items()}
            assert usage == {experiment_id: ("experiment", 4, 70_160), pod_ids[0]: ("pod", 2, 70_100),
                             pod_ids[1]: ("pod", 1, 50)}
            # A batch (copy, drop, rename) on SQLite would have set these to NULL through the foreign key.
            linked = "SELECT count(*) FROM figures WHERE artifact_id IS NOT NULL"
            assert db.session.execute(sa.text(linked)).scalar() == 2
            statuses = dict(db.session.execute(sa.text("SELECT name, status FROM artifacts")).all())
            assert statuses == {"a.txt": "ready", "b.svg": "processing", "c.txt": "ready",
                                "analysis/x/d.png": "ready"}
            redis_store.connection().flushdb()
            assert artifacts.reconcile()["queued"] == [ids["b.svg"]]
            redis_store.connection().flushdb()
            db.session.remove()

            flask_migrate.downgrade(directory=MIGRATIONS, revision=BEFORE)
            inspector = sa.inspect(db.engine)
            assert "artifact_usage" not in inspector.get_table_names()
            assert {c["name"] for c in inspector.get_columns("artifacts")}.isdisjoint(
                {"status", "status_note", "pending_content"})
            with db.engine.connect() as conn:
                assert conn.execute(sa.text(linked)).scalar() == 2
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()
