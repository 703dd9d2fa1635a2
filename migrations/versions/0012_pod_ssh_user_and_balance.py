"""a pod's SSH user (RunPod's `ssh.*.username`, beside the host and port already kept), and
the `provider_balance` failure reason: RunPod's 402 on create, a balance too low to deploy

Revision ID: 0012_pod_ssh_user_and_balance
Revises: 0011_metric_chunks
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0012_pod_ssh_user_and_balance"
down_revision = "0011_metric_chunks"
branch_labels = None
depends_on = None

# The registry's FAILURE_REASONS as of this revision (a migration never imports the live registry).
BEFORE = [
    "provider_capacity", "provider_auth", "provider_error", "spec_invalid", "pod_vanished",
    "pod_exit_nonzero", "partial_dispatch", "start_deadline", "crash_loop", "bootstrap_silence",
    "setup_failed", "artifacts_missing", "cost_cap", "fleet_incident", "worker_lost", "agent_error",
    "model_api_error", "max_turns", "output_limit", "model_refusal", "context_limit", "run_incomplete",
    "cancelled_by_owner",
]
AFTER = BEFORE[:BEFORE.index("provider_auth") + 1] + ["provider_balance"] + BEFORE[BEFORE.index("provider_auth") + 1:]


def _replace(reasons: list[str]) -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_constraint(op.f("ck_agent_runs_failure_reason"), type_="check")
        batch.create_check_constraint(
            op.f("ck_agent_runs_failure_reason"), "failure_reason IS NULL OR failure_reason IN ("
            + ", ".join(f"'{r}'" for r in reasons) + ")")


def upgrade():
    with op.batch_alter_table("pods") as batch:
        batch.add_column(sa.Column("ssh_user", sa.String(length=255), nullable=True))
    _replace(AFTER)


def downgrade():
    op.execute("UPDATE agent_runs SET failure_reason = 'provider_error' WHERE failure_reason = 'provider_balance'")
    _replace(BEFORE)
    with op.batch_alter_table("pods") as batch:
        batch.drop_column("ssh_user")
