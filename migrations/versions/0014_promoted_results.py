"""share links show what was promoted: a frozen copy of each experiment's latest promotion;
metric series may hold non-finite points (their summary values become nullable)

Revision ID: 0014_promoted_results
Revises: 0013_pod_ended_at
Create Date: 2026-12-02

`promoted_results` keeps, per experiment, the title, body and figures its latest promotion
froze (services/results/results.py::record_promotion); share links read only this. Results promoted
before this revision get the copy they have now — what their links showed until now — at
the time of their latest `epm:promoted` marker (else their last update).

A metric point whose value is NaN, ±Infinity or beyond ±1e300 is kept with a NULL value, so
a series' latest value and its range may be NULL. On SQLite the columns change by adding,
copying, dropping and renaming (SQLite 3.35+): rebuilding `metric_series` the batch way
would drop the table, and with foreign keys on that deletes every chunk by cascade. The
downgrade drops the non-finite points, which the old schema cannot hold.
"""
import json
import uuid

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0014_promoted_results"
down_revision = "0013_pod_ended_at"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(JSONB(), "postgresql")
SUMMARY_COLUMNS = ("last_value", "min_value", "max_value")


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade():
    op.create_table(
        "promoted_results",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("experiment_id", sa.Uuid(), nullable=False),
        sa.Column("promoted_to", sa.String(length=16), nullable=False),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version_id", sa.Uuid(), nullable=True),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("figure_ids", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("promoted_to IN ('shared', 'completed')", name=op.f("ck_promoted_results_promoted_to")),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"],
                                name=op.f("fk_promoted_results_experiment_id_experiments"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["version_id"], ["clean_result_versions.id"],
                                name=op.f("fk_promoted_results_version_id_clean_result_versions"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_promoted_results")),
        sa.UniqueConstraint("experiment_id", name=op.f("uq_promoted_results_experiment_id")),
    )
    _copy_promoted_results()
    if _postgres():
        for column in SUMMARY_COLUMNS:
            op.alter_column("metric_series", column, existing_type=sa.Float(), nullable=True)
    else:
        for column in SUMMARY_COLUMNS:
            _sqlite_retype(column, "FLOAT")


def _copy_promoted_results() -> None:
    """Each shared or completed result as it is now, with its figures and matching version."""
    conn = op.get_bind()
    experiments = conn.execute(sa.text(
        "SELECT id, status, title, body, updated_at FROM experiments "
        "WHERE status IN ('shared', 'completed') AND has_clean_result AND body IS NOT NULL")).all()
    # Values read back raw go back raw (a UUID is hex text on SQLite, a time is text there).
    table = sa.table("promoted_results", sa.column("id", sa.Uuid()), *(sa.column(c) for c in (
        "experiment_id", "promoted_to", "promoted_at", "version_id", "title", "body", "created_at",
        "updated_at")), sa.column("figure_ids", JSON_TYPE))
    rows = []
    for experiment_id, status, title, body, updated_at in experiments:
        promoted_at = conn.execute(sa.text(
            "SELECT max(created_at) FROM workflow_events WHERE entity_id = :id AND marker = 'epm:promoted'"),
            {"id": experiment_id}).scalar() or updated_at
        version_id = conn.execute(sa.text(
            "SELECT id FROM clean_result_versions WHERE experiment_id = :id AND title = :title AND body = :body "
            "ORDER BY created_at DESC LIMIT 1"), {"id": experiment_id, "title": title, "body": body}).scalar()
        figures = [str(uuid.UUID(str(f))) for f in conn.execute(sa.text(
            "SELECT id FROM figures WHERE experiment_id = :id ORDER BY created_at, id"), {"id": experiment_id}).scalars()]
        rows.append({"id": uuid.uuid4(), "experiment_id": experiment_id, "promoted_to": status,
                     "promoted_at": promoted_at, "version_id": version_id, "title": title, "body": body,
                     "figure_ids": figures, "created_at": promoted_at, "updated_at": promoted_at})
    if rows:
        conn.execute(sa.insert(table), rows)


def _sqlite_retype(column: str, declaration: str) -> None:
    """Give a SQLite column a new declaration without rebuilding the table (see above)."""
    op.execute(f"ALTER TABLE metric_series ADD COLUMN {column}_new {declaration}")
    op.execute(f"UPDATE metric_series SET {column}_new = {column}")
    op.execute(f"ALTER TABLE metric_series DROP COLUMN {column}")
    op.execute(f"ALTER TABLE metric_series RENAME COLUMN {column}_new TO {column}")


def downgrade():
    _drop_non_finite_points()
    for column in SUMMARY_COLUMNS:
        op.execute(f"UPDATE metric_series SET {column} = 0 WHERE {column} IS NULL")
    if _postgres():
        for column in SUMMARY_COLUMNS:
            op.alter_column("metric_series", column, existing_type=sa.Float(), nullable=False)
    else:
        for column in SUMMARY_COLUMNS:
            _sqlite_retype(column, "FLOAT NOT NULL DEFAULT 0")
    op.drop_table("promoted_results")


def _drop_non_finite_points() -> None:
    """Take the NULL-valued points out of their chunks (a chunk left empty goes)."""
    conn = op.get_bind()
    if _postgres():
        rows = conn.execute(sa.text("SELECT series_id, seq, steps, point_values, wall_times FROM metric_chunks "
                                    "WHERE array_position(point_values, NULL) IS NOT NULL")).all()
    else:
        rows = [(s, q, json.loads(a), json.loads(b), json.loads(c) if c else None) for s, q, a, b, c in conn.execute(
            sa.text("SELECT series_id, seq, steps, point_values, wall_times FROM metric_chunks "
                    "WHERE point_values LIKE '%null%'"))]
    for series_id, seq, steps, values, walls in rows:
        kept = [i for i, value in enumerate(values) if value is not None]
        key = {"series_id": series_id, "seq": seq}
        conn.execute(sa.text("UPDATE metric_series SET points = points - :dropped WHERE id = :series_id"),
                     {"dropped": len(values) - len(kept), "series_id": series_id})
        if not kept:
            conn.execute(sa.text("DELETE FROM metric_chunks WHERE series_id = :series_id AND seq = :seq"), key)
            continue
        new = {"steps": [steps[i] for i in kept], "point_values": [values[i] for i in kept],
               "wall_times": [walls[i] for i in kept] if walls else None}
        if _postgres():
            conn.execute(sa.text(
                "UPDATE metric_chunks SET steps = CAST(:steps AS BIGINT[]), "
                "point_values = CAST(:point_values AS DOUBLE PRECISION[]), "
                "wall_times = CAST(:wall_times AS DOUBLE PRECISION[]) WHERE series_id = :series_id AND seq = :seq"),
                {**key, **new})
        else:
            conn.execute(sa.text(
                "UPDATE metric_chunks SET steps = :steps, point_values = :point_values, wall_times = :wall_times "
                "WHERE series_id = :series_id AND seq = :seq"),
                {**key, **{name: None if value is None else json.dumps(value) for name, value in new.items()}})
