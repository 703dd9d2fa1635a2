"""experiments keep the question they were asked (`question`): a clean result's title states
its finding and takes the title's place, and the experiment page's header still shows what
was asked

Revision ID: 0017_experiment_question
Revises: 0016_preflight_failed
Create Date: 2026-12-02

Nullable, no backfill: an experiment whose title a result already replaced cannot tell its
question any more, and its page shows the title as before.
"""
import sqlalchemy as sa
from alembic import op

revision = "0017_experiment_question"
down_revision = "0016_preflight_failed"
branch_labels = None
depends_on = None


# Plain ADD COLUMN on both backends, not batch mode (which on SQLite copies the table).
def upgrade():
    op.add_column("experiments", sa.Column("question", sa.String(300), nullable=True))


def downgrade():
    op.drop_column("experiments", "question")
