"""member assignments: a todo the owner assigns to a collaborator of its project (what waits on
them), and a weekly review the owner shows to mentor accounts (SPEC §13)

Revision ID: 0029_member_assignments
Revises: 0028_agent_logs_share
Create Date: 2026-12-02

Nothing is assigned and no review is shown to mentors after the upgrade (null, and the server
default false), so members see nothing new until the owner chooses.
"""
import sqlalchemy as sa
from alembic import op

revision = "0029_member_assignments"
down_revision = "0028_agent_logs_share"
branch_labels = None
depends_on = None


def upgrade():
    # batch_alter_table: SQLite adds a foreign key only by rebuilding the table.
    with op.batch_alter_table("todos") as batch:
        batch.add_column(sa.Column("assigned_member_id", sa.Uuid(), nullable=True))
        batch.create_foreign_key(op.f("fk_todos_assigned_member_id_users"), "users", ["assigned_member_id"], ["id"],
                                 ondelete="SET NULL")
        batch.create_index(op.f("ix_todos_assigned_member_id"), ["assigned_member_id"])
    op.add_column("weekly_reviews", sa.Column("shown_to_mentors", sa.Boolean(), nullable=False,
                                              server_default=sa.false()))


def downgrade():
    op.drop_column("weekly_reviews", "shown_to_mentors")
    with op.batch_alter_table("todos") as batch:
        batch.drop_index(op.f("ix_todos_assigned_member_id"))
        batch.drop_constraint(op.f("fk_todos_assigned_member_id_users"), type_="foreignkey")
        batch.drop_column("assigned_member_id")
