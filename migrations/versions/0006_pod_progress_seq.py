"""pods remember the seq of the progress they show, so a late, older post (a retry that
arrives after a newer one) never overwrites newer progress

Revision ID: 0006_pod_progress_seq
Revises: 0005_code_commits
Create Date: 2026-11-29
"""
import sqlalchemy as sa
from alembic import op

revision = "0006_pod_progress_seq"
down_revision = "0005_code_commits"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("pods") as batch:
        batch.add_column(sa.Column("progress_seq", sa.BigInteger(), nullable=True))


def downgrade():
    with op.batch_alter_table("pods") as batch:
        batch.drop_column("progress_seq")
