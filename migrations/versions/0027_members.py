"""members: collaborators and mentors with accounts (SPEC §13) — a role, a removal time and
the last activity on users, the projects each member covers, and one-time invitations

Revision ID: 0027_members
Revises: 0026_notifications
Create Date: 2026-12-02

A collaborator's proposed experiments and todos name them (`proposed_by_member_id`), and a
member's comments and timeline events carry the kind `member`.

Every existing account is the owner (the role's server default), so the upgrade changes no
one's access.
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0027_members"
down_revision = "0026_notifications"
branch_labels = None
depends_on = None

# The registry's vocabularies as they stand at this revision (a later change is a new migration).
ACCOUNT_ROLES = ["owner", "collaborator", "mentor"]
INVITABLE_ROLES = ["collaborator", "mentor"]
# A member's comments and timeline events carry their own kind (attribution).
ACTOR_KINDS_BEFORE = ["owner", "agent", "system", "pod", "token"]
COMMENT_AUTHOR_KINDS_BEFORE = ["owner", "agent"]


def _replace_check(table: str, column: str, values) -> None:
    with op.batch_alter_table(table) as batch:
        batch.drop_constraint(op.f(f"ck_{table}_{column}"), type_="check")
        batch.create_check_constraint(op.f(f"ck_{table}_{column}"), _within(column, values))


def _within(column, values) -> str:
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def upgrade():
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="owner"))
        batch.add_column(sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_check_constraint(op.f("ck_users_role"), _within("role", ACCOUNT_ROLES))
    op.create_table(
        "member_projects",
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("project_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE",
                                name=op.f("fk_member_projects_user_id_users")),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE",
                                name=op.f("fk_member_projects_project_id_projects")),
        sa.PrimaryKeyConstraint("user_id", "project_id", name=op.f("pk_member_projects")),
    )
    op.create_index(op.f("ix_member_projects_project_id"), "member_projects", ["project_id"])
    op.create_table(
        "invitations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("email", sa.String(320), nullable=False),
        sa.Column("display_name", sa.String(120), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("project_ids", sa.JSON().with_variant(JSONB(), "postgresql"),
                  nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("invited_by_id", sa.Uuid(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("accepted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(_within("role", INVITABLE_ROLES), name=op.f("ck_invitations_role")),
        sa.ForeignKeyConstraint(["invited_by_id"], ["users.id"], ondelete="SET NULL",
                                name=op.f("fk_invitations_invited_by_id_users")),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="SET NULL",
                                name=op.f("fk_invitations_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invitations")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_invitations_token_hash")),
    )
    op.create_index(op.f("ix_invitations_email"), "invitations", ["email"])
    _replace_check("workflow_events", "actor_kind", ACTOR_KINDS_BEFORE + ["member"])
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("proposed_by_member_id", sa.Uuid(), nullable=True))
        batch.create_foreign_key(op.f("fk_experiments_proposed_by_member_id_users"), "users",
                                 ["proposed_by_member_id"], ["id"], ondelete="SET NULL")
    # A plain column (no foreign key): on SQLite a constraint would rebuild the table and drop
    # the search triggers 0020 made on it.
    op.add_column("literature_items", sa.Column("proposed_by_member_id", sa.Uuid(), nullable=True))
    with op.batch_alter_table("todos") as batch:
        batch.add_column(sa.Column("proposed_by_member_id", sa.Uuid(), nullable=True))
        batch.create_foreign_key(op.f("fk_todos_proposed_by_member_id_users"), "users",
                                 ["proposed_by_member_id"], ["id"], ondelete="SET NULL")
    _replace_check("comments", "author_kind", COMMENT_AUTHOR_KINDS_BEFORE + ["member"])


def downgrade():
    # What members wrote goes with their accounts; the timeline keeps the event, as the system's.
    op.execute("DELETE FROM comments WHERE author_kind = 'member'")
    op.execute("UPDATE workflow_events SET actor_kind = 'system', actor_id = NULL WHERE actor_kind = 'member'")
    for table in ("experiments", "todos"):
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(op.f(f"fk_{table}_proposed_by_member_id_users"), type_="foreignkey")
            batch.drop_column("proposed_by_member_id")
    op.drop_column("literature_items", "proposed_by_member_id")  # SQLite ≥ 3.35 drops it in place
    _replace_check("comments", "author_kind", COMMENT_AUTHOR_KINDS_BEFORE)
    _replace_check("workflow_events", "actor_kind", ACTOR_KINDS_BEFORE)
    op.drop_index(op.f("ix_invitations_email"), table_name="invitations")
    op.drop_table("invitations")
    op.drop_index(op.f("ix_member_projects_project_id"), table_name="member_projects")
    op.drop_table("member_projects")
    # The members' accounts go with their role: only the owner's account existed before.
    op.execute("DELETE FROM api_tokens WHERE user_id IN (SELECT id FROM users WHERE role <> 'owner')")
    op.execute("DELETE FROM users WHERE role <> 'owner'")
    with op.batch_alter_table("users") as batch:
        batch.drop_constraint(op.f("ck_users_role"), type_="check")
        batch.drop_column("last_seen_at")
        batch.drop_column("removed_at")
        batch.drop_column("role")
