"""email notifications: what the owner is told of, and the emails that carry it (SPEC §12.5)

Revision ID: 0026_notifications
Revises: 0025_ideation
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0026_notifications"
down_revision = "0025_ideation"
branch_labels = None
depends_on = None

# services/core/registry.py; a migration never imports the application.
NOTIFICATION_KINDS = ["owner_turn", "result_ready", "failure", "weekly_review"]
NOTIFICATION_EMAIL_STATUSES = ["queued", "sent", "failed"]


def _in(values) -> str:
    return ", ".join("'" + v + "'" for v in values)


def upgrade():
    op.create_table(
        "notification_emails",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False),
        sa.Column("body_text", sa.Text(), nullable=False),
        sa.Column("body_html", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(f"kind IN ({_in(NOTIFICATION_KINDS)})", name="kind"),
        sa.CheckConstraint(f"status IN ({_in(NOTIFICATION_EMAIL_STATUSES)})",
                           name="status"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_emails")),
    )
    op.create_index(op.f("ix_notification_emails_kind"), "notification_emails", ["kind"])
    op.create_index(op.f("ix_notification_emails_status"), "notification_emails", ["status"])
    op.create_table(
        "notifications",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("url", sa.String(500), nullable=False),
        sa.Column("experiment_id", sa.Uuid(), nullable=True),
        sa.Column("email_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(f"kind IN ({_in(NOTIFICATION_KINDS)})", name="kind"),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="SET NULL",
                                name=op.f("fk_notifications_experiment_id_experiments")),
        sa.ForeignKeyConstraint(["email_id"], ["notification_emails.id"], ondelete="CASCADE",
                                name=op.f("fk_notifications_email_id_notification_emails")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
    )
    op.create_index(op.f("ix_notifications_email_id"), "notifications", ["email_id"])


def downgrade():
    op.drop_table("notifications")
    op.drop_table("notification_emails")
