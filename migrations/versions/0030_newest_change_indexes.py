"""newest-change indexes: an index on `updated_at` for the tables Today's poll watches, so
each one's newest change is one probe of an index rather than a scan of the table
(services/planning/today.py; docs/performance.md, "Today")

Revision ID: 0030_newest_change_indexes
Revises: 0029_member_assignments
Create Date: 2026-12-02

Experiments had theirs already (0001). Pods get none on purpose: every progress post stamps
a pod's row, which PostgreSQL rewrites in place only while no indexed column changes (the
poll watches the unfinished pods on their status index instead). Nothing else changes: the
indexes only speed reads.
"""
from alembic import op

revision = "0030_newest_change_indexes"
down_revision = "0029_member_assignments"
branch_labels = None
depends_on = None

TABLES = ("approval_requests", "belief_proposals", "beliefs", "todos", "agent_runs", "daily_log_entries",
          "comments", "weekly_reviews", "weekly_review_versions", "notification_emails", "idea_cards", "users")


def upgrade():
    for table in TABLES:
        op.create_index(op.f(f"ix_{table}_updated_at"), table, ["updated_at"])


def downgrade():
    for table in TABLES:
        op.drop_index(op.f(f"ix_{table}_updated_at"), table_name=table)
