"""the `preflight_failed` failure reason: a dispatch whose preflight checks failed (commit not
on the remote, entry script missing, a GPU without a price, a secret not configured, an
estimate over the cap) fails with it before any pod is created

Revision ID: 0016_preflight_failed
Revises: 0015_artifact_budgets
Create Date: 2026-12-02
"""
from alembic import op

revision = "0016_preflight_failed"
down_revision = "0015_artifact_budgets"
branch_labels = None
depends_on = None

# The registry's FAILURE_REASONS as of this revision (a migration never imports the live registry).
BEFORE = [
    "provider_capacity", "provider_auth", "provider_balance", "provider_error", "spec_invalid", "pod_vanished",
    "pod_exit_nonzero", "partial_dispatch", "start_deadline", "crash_loop", "bootstrap_silence",
    "setup_failed", "artifacts_missing", "cost_cap", "fleet_incident", "worker_lost", "agent_error",
    "model_api_error", "max_turns", "output_limit", "model_refusal", "context_limit", "run_incomplete",
    "cancelled_by_owner",
]
AFTER = BEFORE + ["preflight_failed"]


def _replace(reasons: list[str]) -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_constraint(op.f("ck_agent_runs_failure_reason"), type_="check")
        batch.create_check_constraint(
            op.f("ck_agent_runs_failure_reason"), "failure_reason IS NULL OR failure_reason IN ("
            + ", ".join(f"'{r}'" for r in reasons) + ")")


def upgrade():
    _replace(AFTER)


def downgrade():
    op.execute("UPDATE agent_runs SET failure_reason = 'spec_invalid' WHERE failure_reason = 'preflight_failed'")
    _replace(BEFORE)
