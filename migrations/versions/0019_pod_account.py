"""`runpod_account` becomes `pod_account` on experiments, approval requests and agent runs (an
account may be served by any backend, not only RunPod), and experiments lose the CHECK that
listed the accounts: the pod-accounts table (services/core/pod_accounts.py) is the one list,
checked by the services, so a new provider needs no migration

Revision ID: 0019_pod_account
Revises: 0018_research_record
Create Date: 2026-12-02

The columns are renamed in place (`ALTER TABLE … RENAME COLUMN`, PostgreSQL and SQLite ≥ 3.25),
which keeps every row. Only the CHECK's removal rebuilds the experiments table on SQLite (a
constraint cannot be dropped there otherwise); env.py turns foreign keys off for that.
"""
import sqlalchemy as sa
from alembic import op

revision = "0019_pod_account"
down_revision = "0018_research_record"
branch_labels = None
depends_on = None

TABLES = ("experiments", "approval_requests", "agent_runs")
# The accounts the CHECK allowed at 0001 (a migration never imports the live table).
ACCOUNTS_BEFORE = ("team", "personal", "local")


def _rename(old: str, new: str) -> None:
    for table in TABLES:
        op.execute(sa.text(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}"))


def upgrade():
    with op.batch_alter_table("experiments") as batch:
        batch.drop_constraint(op.f("ck_experiments_runpod_account"), type_="check")
    _rename("runpod_account", "pod_account")


def downgrade():
    # An account added since (a provider the old CHECK never knew) cannot go back under it:
    # the CHECK below then refuses, loudly, rather than the downgrade rewriting accounts.
    _rename("pod_account", "runpod_account")
    with op.batch_alter_table("experiments") as batch:
        batch.create_check_constraint(
            op.f("ck_experiments_runpod_account"),
            "runpod_account IN (" + ", ".join(f"'{a}'" for a in ACCOUNTS_BEFORE) + ")")
