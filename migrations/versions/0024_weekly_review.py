"""weekly reviews (SPEC §12.3): one review per week (unique `week_end`), its text in versions
(draft → published, the one published before archived); agent runs get a classification
(pending | useful | not_useful | archived, and who set it); a share link may show a review's
published version as the mentor update (scope `weekly_review`)

Revision ID: 0024_weekly_review
Revises: 0023_literature_search
Create Date: 2026-12-02

The share links' scope CHECK is replaced (a batch rebuild of share_links on SQLite).
Downgrading deletes the weekly-review links first: the old CHECK cannot hold them.
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0024_weekly_review"
down_revision = "0023_literature_search"
branch_labels = None
depends_on = None

# The lists as of this revision (a migration never imports the live registry).
DRAFTERS = ["scheduler", "owner", "token", "demo"]
VERSION_STATUSES = ["draft", "published", "archived"]
CLASSIFICATIONS = ["pending", "useful", "not_useful", "archived"]
CLASSIFIERS = ["agent", "owner"]
SCOPES_BEFORE = ["experiment", "project", "all_promoted"]
SCOPES_AFTER = SCOPES_BEFORE + ["weekly_review"]


def _in(column: str, values: list[str]) -> str:
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def upgrade():
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    op.create_table(
        "weekly_reviews",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("week_end", sa.Date(), nullable=False),
        sa.Column("time_zone", sa.String(64), nullable=False),
        sa.Column("summary", json_type, nullable=False),
        sa.Column("drafted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("drafted_by", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(_in("drafted_by", DRAFTERS), name=op.f("ck_weekly_reviews_drafted_by")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_weekly_reviews")),
        sa.UniqueConstraint("week_end", name=op.f("uq_weekly_reviews_week_end")),
    )
    op.create_table(
        "weekly_review_versions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("review_id", sa.Uuid(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("body_md", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("author_kind", sa.String(16), nullable=False),
        sa.Column("author_label", sa.String(120), nullable=False),
        sa.Column("questions", json_type, nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(_in("status", VERSION_STATUSES), name=op.f("ck_weekly_review_versions_status")),
        sa.ForeignKeyConstraint(["review_id"], ["weekly_reviews.id"],
                                name=op.f("fk_weekly_review_versions_review_id_weekly_reviews"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_weekly_review_versions")),
        sa.UniqueConstraint("review_id", "version", name=op.f("uq_weekly_review_versions_review_id")),
    )
    op.create_index(op.f("ix_weekly_review_versions_review_id"), "weekly_review_versions", ["review_id"])
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("classification", sa.String(16), nullable=False, server_default="pending"))
        batch.add_column(sa.Column("classification_by", sa.String(16), nullable=True))
        batch.create_check_constraint(op.f("ck_agent_runs_classification"), _in("classification", CLASSIFICATIONS))
        batch.create_check_constraint(op.f("ck_agent_runs_classification_by"),
                                      "classification_by IS NULL OR " + _in("classification_by", CLASSIFIERS))
    with op.batch_alter_table("share_links") as batch:
        batch.add_column(sa.Column("weekly_review_id", sa.Uuid(), nullable=True))
        batch.create_foreign_key(op.f("fk_share_links_weekly_review_id_weekly_reviews"), "weekly_reviews",
                                 ["weekly_review_id"], ["id"], ondelete="CASCADE")
        batch.create_index(op.f("ix_share_links_weekly_review_id"), ["weekly_review_id"])
        batch.drop_constraint(op.f("ck_share_links_scope"), type_="check")
        batch.create_check_constraint(op.f("ck_share_links_scope"), _in("scope", SCOPES_AFTER))


def downgrade():
    op.execute(sa.text("DELETE FROM share_links WHERE scope = 'weekly_review'"))
    with op.batch_alter_table("share_links") as batch:
        batch.drop_constraint(op.f("ck_share_links_scope"), type_="check")
        batch.create_check_constraint(op.f("ck_share_links_scope"), _in("scope", SCOPES_BEFORE))
        batch.drop_index(op.f("ix_share_links_weekly_review_id"))
        batch.drop_constraint(op.f("fk_share_links_weekly_review_id_weekly_reviews"), type_="foreignkey")
        batch.drop_column("weekly_review_id")
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_constraint(op.f("ck_agent_runs_classification_by"), type_="check")
        batch.drop_constraint(op.f("ck_agent_runs_classification"), type_="check")
        batch.drop_column("classification_by")
        batch.drop_column("classification")
    op.drop_index(op.f("ix_weekly_review_versions_review_id"), table_name="weekly_review_versions")
    op.drop_table("weekly_review_versions")
    op.drop_table("weekly_reviews")
