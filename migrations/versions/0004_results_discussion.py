"""clean results, discussion and follow-ups: who wrote a comment, which run answers it,
when it was edited; follow-ups proposed by an agent are marked as such

Revision ID: 0004_results_discussion
Revises: 0003_pod_progress
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = "0004_results_discussion"
down_revision = "0003_pod_progress"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("comments") as batch:
        batch.add_column(sa.Column("agent_run_id", sa.Uuid(), nullable=True))
        batch.add_column(sa.Column("qa_run_id", sa.Uuid(), nullable=True))
        batch.add_column(sa.Column("edited_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_foreign_key("fk_comments_agent_run_id_agent_runs", "agent_runs", ["agent_run_id"], ["id"],
                                 ondelete="SET NULL")
        batch.create_foreign_key("fk_comments_qa_run_id_agent_runs", "agent_runs", ["qa_run_id"], ["id"],
                                 ondelete="SET NULL")
        batch.create_index("ix_comments_qa_run_id", ["qa_run_id"])
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("proposed_by_agent", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))


def downgrade():
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("proposed_by_agent")
    with op.batch_alter_table("comments") as batch:
        batch.drop_index("ix_comments_qa_run_id")
        batch.drop_constraint("fk_comments_qa_run_id_agent_runs", type_="foreignkey")
        batch.drop_constraint("fk_comments_agent_run_id_agent_runs", type_="foreignkey")
        batch.drop_column("edited_at")
        batch.drop_column("qa_run_id")
        batch.drop_column("agent_run_id")
