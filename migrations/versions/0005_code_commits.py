"""commits made by code-writing agents on experiment branches, with the branch diff

Revision ID: 0005_code_commits
Revises: 0004_results_discussion
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0005_code_commits"
down_revision = "0004_results_discussion"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "code_commits",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("experiment_id", sa.Uuid(), nullable=False),
        sa.Column("agent_run_id", sa.Uuid(), nullable=True),
        sa.Column("agent", sa.String(length=80), nullable=True),
        sa.Column("branch", sa.String(length=255), nullable=False),
        sa.Column("sha", sa.String(length=64), nullable=False),
        sa.Column("parent_sha", sa.String(length=64), nullable=True),
        sa.Column("base_sha", sa.String(length=64), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=True),
        sa.Column("files_changed", sa.Integer(), nullable=False),
        sa.Column("insertions", sa.Integer(), nullable=False),
        sa.Column("deletions", sa.Integer(), nullable=False),
        sa.Column("diff", sa.Text(), nullable=False),
        sa.Column("diff_truncated_from", sa.Integer(), nullable=True),
        sa.Column("pushed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"],
                                name=op.f("fk_code_commits_experiment_id_experiments"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["agent_run_id"], ["agent_runs.id"],
                                name=op.f("fk_code_commits_agent_run_id_agent_runs"), ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_code_commits")),
        sa.UniqueConstraint("experiment_id", "sha", name="uq_code_commits_experiment_sha"),
    )
    op.create_index("ix_code_commits_experiment_created", "code_commits", ["experiment_id", "created_at"])


def downgrade():
    op.drop_index("ix_code_commits_experiment_created", table_name="code_commits")
    op.drop_table("code_commits")
