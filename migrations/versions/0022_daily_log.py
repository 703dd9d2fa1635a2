"""the daily log: one entry per day in the owner's time zone, written from the record

Revision ID: 0022_daily_log
Revises: 0021_todos
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0022_daily_log"
down_revision = "0021_todos"
branch_labels = None
depends_on = None

DAILY_LOG_WRITERS = ["scheduler", "owner", "token"]


def upgrade():
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    writers = ", ".join("'" + v + "'" for v in DAILY_LOG_WRITERS)
    op.create_table(
        "daily_log_entries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("time_zone", sa.String(64), nullable=False),
        sa.Column("summary", json_type, nullable=False),
        sa.Column("body_md", sa.Text(), nullable=False),
        sa.Column("partial", sa.Boolean(), nullable=False),
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("written_by", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(f"written_by IN ({writers})", name="written_by"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_daily_log_entries")),
        sa.UniqueConstraint("day", name=op.f("uq_daily_log_entries_day")),
    )


def downgrade():
    op.drop_table("daily_log_entries")
