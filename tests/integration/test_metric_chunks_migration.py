"""0011_metric_chunks moves the points already stored (one row per point) into chunks (one
row per series per batch) and back on downgrade, on PostgreSQL and on SQLite."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

import flask_migrate
import pytest
import sqlalchemy as sa

import config as sagan_config
from app import create_app
from models import Pod, db
from services.dispatch import metrics
from services.workflow import experiments
from tests.integration.databases import scratch_postgres_url
from tests.integration.old_rows import old_experiment

MIGRATIONS = str(Path(__file__).resolve().parents[2] / "migrations")

# (seq, position, name, step, value, wall_time) as 0010 stored them: two batches, the
# first with two metrics interleaved, the second with wall times.
OLD_POINTS = [
    (1, 0, "loss", 0, 2.0, None), (1, 1, "acc [%]", 0, 10.0, None), (1, 2, "loss", 1, 1.5, None),
    (1, 3, "acc [%]", 1, 20.0, None), (1, 4, "loss", 2, 1.25, None),
    (2, 0, "loss", 3, 1.0, 1.7e9), (2, 1, "loss", 4, 0.5, 1.7e9 + 1),
]


@pytest.fixture(params=["postgresql", "sqlite"])
def scratch_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sagan.db'}"
        return
    with scratch_postgres_url("sagan_chunks") as url:
        yield url


def _scratch_app(url: str):
    class ScratchConfig(sagan_config.TestConfig):
        SQLALCHEMY_DATABASE_URI = url
        SQLALCHEMY_ENGINE_OPTIONS: dict = {}
    return create_app(ScratchConfig)


def _seed_pod_0010(experiment_id) -> uuid.UUID:
    """A running pod in 0010's shape, written with plain SQL: the Pod model has columns added
    by later migrations."""
    pods = sa.table("pods", sa.column("id", sa.Uuid()), sa.column("experiment_id", sa.Uuid()),
                    *(sa.column(c) for c in ("account", "name", "status", "run_index", "attempt", "gpu_count",
                                             "retry_count", "max_retries", "bootstrap_count", "uptime_seconds")),
                    sa.column("created_at", sa.DateTime(timezone=True)),
                    sa.column("updated_at", sa.DateTime(timezone=True)))
    pod_id, now = uuid.uuid4(), datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    db.session.execute(sa.insert(pods).values(
        id=pod_id, experiment_id=experiment_id, account="local", name="migrated-0", status="running", run_index=0,
        attempt=1, gpu_count=1, retry_count=0, max_retries=3, bootstrap_count=0, uptime_seconds=0,
        created_at=now, updated_at=now))
    db.session.commit()
    return pod_id


def _seed_0010(pod_id, experiment_id) -> None:
    """Points and series in 0010's shape, written with plain SQL (the models are 0011's)."""
    points = sa.table("metric_points", sa.column("pod_id", sa.Uuid()), sa.column("experiment_id", sa.Uuid()),
                      *(sa.column(c) for c in ("seq", "position", "name", "step", "value", "wall_time")))
    db.session.execute(sa.insert(points), [
        {"pod_id": pod_id, "seq": seq, "position": position, "experiment_id": experiment_id, "name": name,
         "step": step, "value": value, "wall_time": wall} for seq, position, name, step, value, wall in OLD_POINTS])
    series = sa.table("metric_series", sa.column("pod_id", sa.Uuid()), sa.column("experiment_id", sa.Uuid()),
                      *(sa.column(c) for c in ("name", "points", "first_step", "last_step", "last_value",
                                               "min_value", "max_value")),
                      sa.column("updated_at", sa.DateTime(timezone=True)))
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    db.session.execute(sa.insert(series), [
        {"pod_id": pod_id, "name": "loss", "experiment_id": experiment_id, "points": 5, "first_step": 0,
         "last_step": 4, "last_value": 0.5, "min_value": 0.5, "max_value": 2.0, "updated_at": now},
        {"pod_id": pod_id, "name": "acc [%]", "experiment_id": experiment_id, "points": 2, "first_step": 0,
         "last_step": 1, "last_value": 20.0, "min_value": 10.0, "max_value": 20.0, "updated_at": now}])
    db.session.commit()


def _old_points(conn) -> list[tuple]:
    return sorted(tuple(row) for row in conn.execute(sa.text(
        "SELECT seq, name, step, value, wall_time FROM metric_points")))


def test_stored_points_move_into_chunks_and_back(scratch_url):
    """Upgrading keeps every point (in its batch's order, per metric), the summaries and the
    batch keys, and charts them; a batch already stored is still refused as a repeat;
    downgrading gives back the same points with distinct positions per batch."""
    app = _scratch_app(scratch_url)
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS, revision="0010_metrics")
            experiment_id, number = old_experiment(1, "Migrated metrics"), 1
            pod_id = _seed_pod_0010(experiment_id)
            _seed_0010(pod_id, experiment_id)
            db.session.remove()

            flask_migrate.upgrade(directory=MIGRATIONS)
            chunks = {(name, seq): (steps, values, walls) for name, seq, steps, values, walls in db.session.execute(
                sa.text("SELECT s.name, c.seq, c.steps, c.point_values, c.wall_times FROM metric_chunks c "
                        "JOIN metric_series s ON s.id = c.series_id"))}
            if db.engine.dialect.name == "sqlite":  # the arrays are JSON text there
                chunks = {key: tuple(None if part is None else json.loads(part) for part in chunk)
                          for key, chunk in chunks.items()}
            assert chunks == {
                ("loss", 1): ([0, 1, 2], [2.0, 1.5, 1.25], None),
                ("acc [%]", 1): ([0, 1], [10.0, 20.0], None),
                ("loss", 2): ([3, 4], [1.0, 0.5], [1.7e9, 1.7e9 + 1]),
            }
            batches = sorted(tuple(r) for r in db.session.execute(sa.text("SELECT seq, points FROM metric_batches")))
            assert batches == [(1, 5), (2, 2)]
            summary = metrics.summaries_for([experiment_id])[experiment_id]
            assert (summary["loss"].points, summary["loss"].last_value) == (5, 0.5)
            experiment = experiments.get_experiment(number)
            chart = metrics.chart_data(experiment, "loss")
            assert chart["series"][0]["y"] == [2.0, 1.5, 1.25, 1.0, 0.5]

            pod = db.session.get(Pod, pod_id)
            repeat = metrics.parse_batch({"seq": 1, "points": [{"step": 9, "name": "loss", "value": 9.0}]})
            assert metrics.record_batch(pod, repeat) is False
            db.session.rollback()
            db.session.remove()

            flask_migrate.downgrade(directory=MIGRATIONS, revision="0010_metrics")
            with db.engine.connect() as conn:
                assert _old_points(conn) == sorted((seq, name, step, value, wall)
                                                   for seq, _p, name, step, value, wall in OLD_POINTS)
                positions = list(conn.execute(sa.text("SELECT seq, position FROM metric_points")))
                assert len(set(positions)) == len(OLD_POINTS)
                series = sorted(tuple(r) for r in conn.execute(sa.text("SELECT name, points FROM metric_series")))
                assert series == [("acc [%]", 2), ("loss", 5)]
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()
