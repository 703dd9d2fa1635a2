"""approval requests fix the RunPod account (at submission) and the cost cap (at approval),
so dispatch uses what the owner approved, not what the experiment says later

Revision ID: 0009_approved_terms
Revises: 0008_setup_failed
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0009_approved_terms"
down_revision = "0008_setup_failed"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("approval_requests") as batch:
        batch.add_column(sa.Column("runpod_account", sa.String(16), nullable=True))
        batch.add_column(sa.Column("cost_cap_usd", sa.Numeric(12, 2), nullable=True))
    # Requests made before this revision: the account the experiment has now is the best
    # record of the one they were made for (and what dispatch used until now).
    op.execute("UPDATE approval_requests SET runpod_account = (SELECT experiments.runpod_account "
               "FROM experiments WHERE experiments.id = approval_requests.experiment_id)")


def downgrade():
    with op.batch_alter_table("approval_requests") as batch:
        batch.drop_column("cost_cap_usd")
        batch.drop_column("runpod_account")
