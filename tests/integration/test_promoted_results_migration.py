"""0014_promoted_results, on PostgreSQL and on SQLite: results shared or completed before it
keep what their links showed (a frozen copy each), the metric series' summary columns
take NULL (non-finite points) without losing a stored point — on SQLite the columns change
without rebuilding the table, whose drop would delete every chunk by cascade — and the
downgrade gives the old schema back, without the points it cannot hold."""
from __future__ import annotations

import uuid

import flask_migrate
import sqlalchemy as sa

from models import Figure, MetricSeries, Pod, db
from services.core.actors import Actor
from services.dispatch import metrics
from services.results import results
from services.workflow import experiments
from tests.integration.old_rows import old_experiment, old_share_link
from tests.integration.test_metric_chunks_migration import MIGRATIONS, _scratch_app, scratch_url  # noqa: F401

OWNER = Actor("owner", None, "Owner")


def _count(table: str) -> int:
    return db.session.scalar(sa.text(f"SELECT count(*) FROM {table}"))


def test_promotions_are_copied_and_points_kept_up_and_down(scratch_url):  # noqa: F811 - the fixture
    app = _scratch_app(scratch_url)
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS, revision="0013_pod_ended_at")
            numbers, ids = {}, {}
            for number, (status, body) in enumerate((("shared", "<p>Shared result.</p>"),
                                                     ("completed", "<p>Kept result.</p>"),
                                                     ("awaiting_promotion", "<p>Waiting result.</p>"),
                                                     ("shared", None)), start=1):
                # Written as 0011 left them: a status and a body, no promotion record.
                key = status if body else "empty"
                ids.setdefault(key, old_experiment(number, f"Old {status} (HIGH confidence)", status=status,
                                                   body=body))
                numbers.setdefault(key, number)
            db.session.add(Figure(id=uuid.uuid4(), experiment_id=ids["shared"], kind="svg", title="Old figure",
                                  content='<svg viewBox="0 0 1 1"></svg>', content_type="image/svg+xml"))
            pod = Pod(id=uuid.uuid4(), experiment_id=ids["shared"], account="local", name="old-0", status="running")
            db.session.add(pod)
            db.session.flush()
            for seq in (1, 2):
                points = [{"step": seq * 10 + i, "name": "loss", "value": 1.0 / (i + 1)} for i in range(5)]
                metrics.record_batch(pod, metrics.parse_batch({"seq": seq, "points": points}))
            token = old_share_link("all_promoted")
            db.session.commit()
            pod_id = pod.id
            db.session.remove()

            flask_migrate.upgrade(directory=MIGRATIONS)
            copies = {row.title: row for row in db.session.execute(sa.text(
                "SELECT e.title, p.promoted_to, p.body, p.figure_ids FROM promoted_results p "
                "JOIN experiments e ON e.id = p.experiment_id"))}
            assert set(copies) == {"Old shared (HIGH confidence)", "Old completed (HIGH confidence)"}
            assert copies["Old shared (HIGH confidence)"].promoted_to == "shared"
            assert copies["Old completed (HIGH confidence)"].promoted_to == "completed"
            migrated = experiments.get_experiment(numbers["shared"])
            assert not results.edited_since_promotion(migrated, results.promotion_of(migrated))
            assert _count("metric_chunks") == 2  # nothing deleted by the column change
            assert db.session.get(MetricSeries, 1).points == 10
            page = app.test_client().get(f"/s/{token}/{numbers['shared']}")
            assert page.status_code == 200 and "Shared result." in page.text and "Old figure" in page.text
            assert app.test_client().get(f"/s/{token}/{numbers['completed']}").status_code == 404

            pod = db.session.get(Pod, pod_id)
            metrics.record_batch(pod, metrics.parse_batch(
                {"seq": 3, "points": [{"step": 99, "name": "loss", "value": float("nan")}]}))
            db.session.commit()
            series = db.session.get(MetricSeries, 1)
            assert (series.points, series.last_value, series.min_value) == (11, None, 0.2)
            db.session.remove()

            flask_migrate.downgrade(directory=MIGRATIONS, revision="0013_pod_ended_at")
            assert "promoted_results" not in sa.inspect(db.engine).get_table_names()
            columns = {c["name"]: c for c in sa.inspect(db.engine).get_columns("metric_series")}
            assert not any(columns[name]["nullable"] for name in ("last_value", "min_value", "max_value"))
            assert _count("metric_chunks") == 2  # the NaN-only chunk went, the others stayed
            assert db.session.execute(sa.text("SELECT points, last_value FROM metric_series")).one() == (10, 0.0)
            db.session.remove()
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()
