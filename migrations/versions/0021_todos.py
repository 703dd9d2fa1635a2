"""todos: the owner's todos (SPEC §12.2), numbered T1, T2 … from their own counter, with the
experiment each became

Revision ID: 0021_todos
Revises: 0020_literature
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0021_todos"
down_revision = "0020_literature"
branch_labels = None
depends_on = None

# The registry's vocabularies as they stand at this revision (a later change is a new migration).
TODO_STATUSES = ["inbox", "scoped", "planning", "open", "in_progress", "running", "interpreting",
                 "awaiting_promotion", "blocked", "done", "cancelled", "archived"]
TODO_INTENTS = ["exploratory", "hypothesis", "replication", "measurement", "engineering"]
PRIORITIES = ["low", "normal", "high", "urgent"]
ASSIGNEE_KINDS = ["agent", "human"]


def one_of(column, values):
    quoted = ", ".join("'" + v + "'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({quoted})", name=column)


def upgrade():
    op.create_table(
        "todos",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("body_md", sa.Text(), nullable=False),
        sa.Column("status", sa.String(24), nullable=False),
        sa.Column("intent", sa.String(16), nullable=False),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("assignee_kind", sa.String(16), nullable=False),
        sa.Column("project_id", sa.Uuid(), nullable=True),
        sa.Column("experiment_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        one_of("status", TODO_STATUSES),
        one_of("intent", TODO_INTENTS),
        one_of("priority", PRIORITIES),
        one_of("assignee_kind", ASSIGNEE_KINDS),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="SET NULL",
                                name=op.f("fk_todos_project_id_projects")),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="SET NULL",
                                name=op.f("fk_todos_experiment_id_experiments")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_todos")),
        sa.UniqueConstraint("number", name=op.f("uq_todos_number")),
        sa.UniqueConstraint("experiment_id", name=op.f("uq_todos_experiment_id")),
    )
    op.create_index(op.f("ix_todos_status"), "todos", ["status"])
    op.create_index(op.f("ix_todos_project_id"), "todos", ["project_id"])


def downgrade():
    op.drop_index(op.f("ix_todos_project_id"), table_name="todos")
    op.drop_index(op.f("ix_todos_status"), table_name="todos")
    op.drop_table("todos")
    op.execute("DELETE FROM counters WHERE name = 'todo_number'")
