"""agent logs shared: the owner shares one experiment's agent runs with the collaborators of its
project (SPEC §13, "unless the owner shares that experiment's logs")

Revision ID: 0028_agent_logs_share
Revises: 0027_members
Create Date: 2026-12-02

Off for every existing experiment (the server default), so the upgrade shows members nothing new.
"""
import sqlalchemy as sa
from alembic import op

revision = "0028_agent_logs_share"
down_revision = "0027_members"
branch_labels = None
depends_on = None


def upgrade():
    # A plain column with a default: both backends add it in place (no table rebuild on SQLite).
    op.add_column("experiments", sa.Column("agent_logs_shared", sa.Boolean(), nullable=False,
                                           server_default=sa.false()))


def downgrade():
    op.drop_column("experiments", "agent_logs_shared")  # SQLite ≥ 3.35 drops it in place
