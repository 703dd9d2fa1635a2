"""artifact budgets and processing: `artifact_usage` counts each pod's and each experiment's
artifacts (files, bytes) for the upload budgets; artifacts get a status (`ready`,
`processing`, `failed`), a note, and the upload kept apart until its job has processed it

Revision ID: 0015_artifact_budgets
Revises: 0014_promoted_results
Create Date: 2026-12-02

The counters start from the artifacts already stored. An SVG or HTML figure whose large
markup was left for the old sanitizing job and is still empty becomes `processing`, so the
scheduler's sweep queues it on the new `artifacts` queue (its content is not redacted
markup, so it stays where it is: the job reads it from there).
"""
import sqlalchemy as sa
from alembic import op

revision = "0015_artifact_budgets"
down_revision = "0014_promoted_results"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "artifact_usage",
        sa.Column("scope_id", sa.Uuid(), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("experiment_id", sa.Uuid(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("scope IN ('pod', 'experiment')", name=op.f("ck_artifact_usage_scope")),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"],
                                name=op.f("fk_artifact_usage_experiment_id_experiments"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("scope_id", name=op.f("pk_artifact_usage")),
    )
    op.create_index(op.f("ix_artifact_usage_experiment_id"), "artifact_usage", ["experiment_id"])
    # Plain ADD COLUMNs, not a batch: SQLite adds them in place, where a batch would copy the
    # whole table (every artifact's content) into a new one and drop the old.
    op.add_column("artifacts", sa.Column("pending_content", sa.LargeBinary(), nullable=True))
    op.add_column("artifacts", sa.Column(
        "status", sa.String(length=16),
        sa.CheckConstraint("status IN ('ready', 'processing', 'failed')", name=op.f("ck_artifacts_status")),
        server_default="ready", nullable=False))
    op.add_column("artifacts", sa.Column("status_note", sa.String(length=500), nullable=True))
    op.create_index("ix_artifacts_processing", "artifacts", ["status"],
                    postgresql_where=sa.text("status = 'processing'"), sqlite_where=sa.text("status = 'processing'"))

    op.execute("""
        INSERT INTO artifact_usage (scope_id, scope, experiment_id, files, bytes)
        SELECT experiment_id, 'experiment', experiment_id, COUNT(*), SUM(size) FROM artifacts GROUP BY experiment_id
    """)
    op.execute("""
        INSERT INTO artifact_usage (scope_id, scope, experiment_id, files, bytes)
        SELECT pod_id, 'pod', experiment_id, COUNT(*), SUM(size) FROM artifacts
        WHERE pod_id IS NOT NULL GROUP BY pod_id, experiment_id
    """)
    op.execute("""
        UPDATE artifacts SET status = 'processing'
        WHERE id IN (SELECT artifact_id FROM figures
                     WHERE artifact_id IS NOT NULL AND content IS NULL AND kind IN ('svg', 'html_artifact'))
    """)


def downgrade():
    op.drop_index("ix_artifacts_processing", table_name="artifacts")
    # An upload still waiting for its job is not redacted: it is dropped, not moved to where
    # the old code (which reads every artifact's content) would serve it.
    # Plain DROP COLUMNs for the same reason (SQLite drops a column with its own CHECK in place).
    op.drop_column("artifacts", "status_note")
    op.drop_column("artifacts", "status")
    op.drop_column("artifacts", "pending_content")
    op.drop_index(op.f("ix_artifact_usage_experiment_id"), table_name="artifact_usage")
    op.drop_table("artifact_usage")
