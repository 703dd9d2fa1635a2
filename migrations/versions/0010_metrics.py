"""metric points that pods post in batches (idempotent by pod and seq) and a summary row
per pod and metric name

Revision ID: 0010_metrics
Revises: 0009_approved_terms
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0010_metrics"
down_revision = "0009_approved_terms"
branch_labels = None
depends_on = None


def upgrade():
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
    op.create_table(
        "metric_series",
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
        sa.PrimaryKeyConstraint("pod_id", "name", name=op.f("pk_metric_series")),
    )
    op.create_index("ix_metric_series_experiment", "metric_series", ["experiment_id", "name"])


def downgrade():
    op.drop_index("ix_metric_series_experiment", table_name="metric_series")
    op.drop_table("metric_series")
    op.drop_index("ix_metric_points_series", table_name="metric_points")
    op.drop_table("metric_points")
