"""ideation: sessions of questions about one source (a clean result, a belief, a literature
item or a project) and the idea cards that come out of them (SPEC §12.4); "ideation" becomes a
record kind a typed link may name (an experiment derives_from the session its card came from)

Revision ID: 0025_ideation
Revises: 0024_weekly_review
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0025_ideation"
down_revision = "0024_weekly_review"
branch_labels = None
depends_on = None

# The registry's vocabularies as they stand at this revision (a migration never imports the live registry).
SOURCE_KINDS = ["clean_result", "belief", "literature", "project"]
CARD_ORIGINS = ["claude", "owner"]
CARD_STATUSES = ["open", "promoted", "discarded"]
PROMOTION_TARGETS = ["experiment", "belief_update", "literature_task", "result_question"]
RECORD_KINDS_BEFORE = ["project", "belief", "experiment", "run", "clean_result", "todo", "literature", "narrative",
                       "daily_log", "weekly_review"]
RECORD_KINDS_AFTER = RECORD_KINDS_BEFORE + ["ideation"]
JSON_TYPE = sa.JSON().with_variant(JSONB(), "postgresql")


def one_of(column, values):
    quoted = ", ".join("'" + v + "'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({quoted})", name=column)


def _record_kinds(kinds: list[str]) -> None:
    quoted = ", ".join(f"'{k}'" for k in kinds)
    with op.batch_alter_table("record_links") as batch:
        for column in ("source_kind", "target_kind"):
            batch.drop_constraint(op.f(f"ck_record_links_{column}"), type_="check")
            batch.create_check_constraint(op.f(f"ck_record_links_{column}"), f"{column} IN ({quoted})")


def upgrade():
    op.create_table(
        "ideation_sessions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("source_kind", sa.String(16), nullable=False),
        sa.Column("source_id", sa.Uuid(), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("deck", JSON_TYPE, nullable=False),
        sa.Column("answers", JSON_TYPE, nullable=False),
        sa.Column("nearest_literature_id", sa.Uuid(), nullable=True),
        sa.Column("nearest_belief_id", sa.Uuid(), nullable=True),
        sa.Column("project_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        one_of("source_kind", SOURCE_KINDS),
        sa.ForeignKeyConstraint(["nearest_literature_id"], ["literature_items.id"], ondelete="SET NULL",
                                name=op.f("fk_ideation_sessions_nearest_literature_id_literature_items")),
        sa.ForeignKeyConstraint(["nearest_belief_id"], ["beliefs.id"], ondelete="SET NULL",
                                name=op.f("fk_ideation_sessions_nearest_belief_id_beliefs")),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="SET NULL",
                                name=op.f("fk_ideation_sessions_project_id_projects")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ideation_sessions")),
        sa.UniqueConstraint("number", name=op.f("uq_ideation_sessions_number")),
    )
    op.create_index("ix_ideation_sessions_source", "ideation_sessions", ["source_kind", "source_id"])
    op.create_table(
        "idea_cards",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("session_id", sa.Uuid(), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("body_md", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("agent_run_id", sa.Uuid(), nullable=True),
        sa.Column("promoted_kind", sa.String(24), nullable=True),
        sa.Column("promoted_id", sa.Uuid(), nullable=True),
        sa.Column("promoted_label", sa.String(400), nullable=False),
        sa.Column("promoted_url", sa.String(400), nullable=False),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        one_of("origin", CARD_ORIGINS),
        one_of("status", CARD_STATUSES),
        one_of("promoted_kind", PROMOTION_TARGETS),
        sa.ForeignKeyConstraint(["session_id"], ["ideation_sessions.id"], ondelete="CASCADE",
                                name=op.f("fk_idea_cards_session_id_ideation_sessions")),
        sa.ForeignKeyConstraint(["agent_run_id"], ["agent_runs.id"], ondelete="SET NULL",
                                name=op.f("fk_idea_cards_agent_run_id_agent_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_idea_cards")),
    )
    op.create_index(op.f("ix_idea_cards_session_id"), "idea_cards", ["session_id"])
    _record_kinds(RECORD_KINDS_AFTER)


def downgrade():
    # Links naming a session go with the sessions (the narrower constraint would refuse them).
    op.execute("DELETE FROM record_links WHERE source_kind = 'ideation' OR target_kind = 'ideation'")
    _record_kinds(RECORD_KINDS_BEFORE)
    op.drop_index(op.f("ix_idea_cards_session_id"), table_name="idea_cards")
    op.drop_table("idea_cards")
    op.drop_index("ix_ideation_sessions_source", table_name="ideation_sessions")
    op.drop_table("ideation_sessions")
    op.execute("DELETE FROM counters WHERE name = 'ideation_number'")
