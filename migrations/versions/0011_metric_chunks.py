"""metric points stored one row per series per batch (arrays), series keyed by a bigint id,
batches recorded once per pod and seq — ingest writes ~10 rows a batch instead of 1,000

Revision ID: 0011_metric_chunks
Revises: 0010_metrics
Create Date: 2026-12-01

The points already stored move over: each (pod, seq, name) of `metric_points` becomes one
chunk, its points in their old order; each (pod, seq) one batch row (its time: the series'
last update, the closest the old schema knew). Downgrade moves them back.
"""
import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0011_metric_chunks"
down_revision = "0010_metrics"
branch_labels = None
depends_on = None

STEPS_TYPE = sa.JSON().with_variant(ARRAY(sa.BigInteger()), "postgresql")
VALUES_TYPE = sa.JSON(none_as_null=True).with_variant(ARRAY(sa.Float()), "postgresql")
SERIES_ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

SERIES_COLUMNS = "pod_id, name, experiment_id, points, first_step, last_step, last_value, min_value, max_value, " \
                 "updated_at"


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _set_aside(table: str, indexes: list[str]) -> None:
    """Rename an old table out of the way; index and key names are schema-wide, so they go
    (indexes) or get the new suffix too (the primary key's index, on PostgreSQL)."""
    for index in indexes:
        op.drop_index(index, table_name=table)
    op.rename_table(table, f"{table}_old")
    if _postgres():
        op.execute(f"ALTER TABLE {table}_old RENAME CONSTRAINT pk_{table} TO pk_{table}_old")


def _old_points_table() -> None:
    op.create_table(
        "metric_points",
        sa.Column("pod_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("wall_time", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["pod_id"], ["pods.id"], name=op.f("fk_metric_points_pod_id_pods"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"],
                                name=op.f("fk_metric_points_experiment_id_experiments"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("pod_id", "seq", "position", name=op.f("pk_metric_points")),
    )
    op.create_index("ix_metric_points_series", "metric_points", ["experiment_id", "name", "pod_id", "step"],
                    postgresql_include=["value"])


def _series_table(with_id: bool) -> None:
    columns = [sa.Column("id", SERIES_ID_TYPE, autoincrement=True, nullable=False)] if with_id else []
    key = (sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_series")) if with_id
           else sa.PrimaryKeyConstraint("pod_id", "name", name=op.f("pk_metric_series")))
    extra = [sa.UniqueConstraint("pod_id", "name", name=op.f("uq_metric_series_pod_id"))] if with_id else []
    op.create_table(
        "metric_series",
        *columns,
        sa.Column("pod_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("experiment_id", sa.Uuid(), nullable=False),
        sa.Column("points", sa.BigInteger(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("last_value", sa.Float(), nullable=False),
        sa.Column("min_value", sa.Float(), nullable=False),
        sa.Column("max_value", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["pod_id"], ["pods.id"], name=op.f("fk_metric_series_pod_id_pods"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"],
                                name=op.f("fk_metric_series_experiment_id_experiments"), ondelete="CASCADE"),
        key,
        *extra,
    )
    op.create_index("ix_metric_series_experiment", "metric_series", ["experiment_id", "name"])


def upgrade():
    _set_aside("metric_points", ["ix_metric_points_series"])
    _set_aside("metric_series", ["ix_metric_series_experiment"])
    _series_table(with_id=True)
    op.create_table(
        "metric_batches",
        sa.Column("pod_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["pod_id"], ["pods.id"], name=op.f("fk_metric_batches_pod_id_pods"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("pod_id", "seq", name=op.f("pk_metric_batches")),
    )
    op.create_table(
        "metric_chunks",
        sa.Column("series_id", SERIES_ID_TYPE, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("steps", STEPS_TYPE, nullable=False),
        sa.Column("point_values", VALUES_TYPE, nullable=False),
        sa.Column("wall_times", VALUES_TYPE, nullable=True),
        sa.ForeignKeyConstraint(["series_id"], ["metric_series.id"], name=op.f("fk_metric_chunks_series_id_metric_series"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("series_id", "seq", name=op.f("pk_metric_chunks")),
    )

    op.execute(f"INSERT INTO metric_series ({SERIES_COLUMNS}) SELECT {SERIES_COLUMNS} FROM metric_series_old")
    op.execute("""
        INSERT INTO metric_batches (pod_id, seq, points, created_at)
        SELECT p.pod_id, p.seq, count(*), max(s.updated_at)
        FROM metric_points_old p JOIN metric_series s ON s.pod_id = p.pod_id AND s.name = p.name
        GROUP BY p.pod_id, p.seq""")
    if _postgres():
        op.execute("""
            INSERT INTO metric_chunks (series_id, seq, steps, point_values, wall_times)
            SELECT s.id, p.seq, array_agg(p.step ORDER BY p.position), array_agg(p.value ORDER BY p.position),
                   CASE WHEN bool_and(p.wall_time IS NULL) THEN NULL
                        ELSE array_agg(p.wall_time ORDER BY p.position) END
            FROM metric_points_old p JOIN metric_series s ON s.pod_id = p.pod_id AND s.name = p.name
            GROUP BY s.id, p.seq""")
    else:
        _chunks_in_python()
    op.drop_table("metric_points_old")
    op.drop_table("metric_series_old")


def _chunks_in_python() -> None:
    """SQLite 3.40 has no ORDER BY inside an aggregate: group the old points here."""
    conn = op.get_bind()
    chunks = sa.table("metric_chunks", sa.column("series_id"), sa.column("seq"), sa.column("steps", sa.JSON()),
                      sa.column("point_values", sa.JSON()), sa.column("wall_times", sa.JSON(none_as_null=True)))
    rows = conn.execute(sa.text("""
        SELECT s.id, p.seq, p.step, p.value, p.wall_time
        FROM metric_points_old p JOIN metric_series s ON s.pod_id = p.pod_id AND s.name = p.name
        ORDER BY s.id, p.seq, p.position"""))
    grouped: dict = {}
    for series_id, seq, step, value, wall_time in rows:
        chunk = grouped.setdefault((series_id, seq), ([], [], []))
        chunk[0].append(step)
        chunk[1].append(value)
        chunk[2].append(wall_time)
    if grouped:
        conn.execute(sa.insert(chunks), [
            {"series_id": series_id, "seq": seq, "steps": steps, "point_values": values,
             "wall_times": None if all(w is None for w in walls) else walls}
            for (series_id, seq), (steps, values, walls) in grouped.items()])


def downgrade():
    op.drop_index("ix_metric_series_experiment", table_name="metric_series")
    op.rename_table("metric_series", "metric_series_new")
    if _postgres():
        op.execute("ALTER TABLE metric_series_new RENAME CONSTRAINT pk_metric_series TO pk_metric_series_new")
        op.execute("ALTER TABLE metric_series_new RENAME CONSTRAINT uq_metric_series_pod_id "
                   "TO uq_metric_series_new_pod_id")
    _series_table(with_id=False)
    _old_points_table()
    op.execute(f"INSERT INTO metric_series ({SERIES_COLUMNS}) SELECT {SERIES_COLUMNS} FROM metric_series_new")
    if _postgres():
        op.execute("""
            INSERT INTO metric_points (pod_id, seq, position, experiment_id, name, step, value, wall_time)
            SELECT s.pod_id, c.seq,
                   row_number() OVER (PARTITION BY s.pod_id, c.seq ORDER BY s.id, u.ordinality) - 1,
                   s.experiment_id, s.name, u.step, u.value, u.wall_time
            FROM metric_chunks c JOIN metric_series_new s ON s.id = c.series_id
            CROSS JOIN LATERAL unnest(c.steps, c.point_values, c.wall_times) WITH ORDINALITY
                 AS u(step, value, wall_time, ordinality)""")
    else:
        _points_in_python()
    op.drop_table("metric_chunks")
    op.drop_table("metric_batches")
    op.drop_table("metric_series_new")


def _points_in_python() -> None:
    conn = op.get_bind()
    points = sa.table("metric_points", *(sa.column(c) for c in (
        "pod_id", "seq", "position", "experiment_id", "name", "step", "value", "wall_time")))
    rows = conn.execute(sa.text("""
        SELECT s.pod_id, c.seq, s.experiment_id, s.name, c.steps, c.point_values, c.wall_times
        FROM metric_chunks c JOIN metric_series_new s ON s.id = c.series_id ORDER BY s.pod_id, c.seq, s.id"""))
    out, positions = [], {}
    for pod_id, seq, experiment_id, name, steps, values, walls in rows:
        steps, values = json.loads(steps), json.loads(values)
        walls = (json.loads(walls) if walls else None) or [None] * len(steps)
        for step, value, wall in zip(steps, values, walls):
            position = positions.get((pod_id, seq), 0)
            positions[(pod_id, seq)] = position + 1
            out.append({"pod_id": pod_id, "seq": seq, "position": position, "experiment_id": experiment_id,
                        "name": name, "step": step, "value": value, "wall_time": wall})
    if out:
        conn.execute(sa.insert(points), out)
