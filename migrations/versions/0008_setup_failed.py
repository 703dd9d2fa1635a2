"""the `setup_failed` failure reason: a pod whose repository or environment setup failed
fails with it (not a crash loop)

Revision ID: 0008_setup_failed
Revises: 0007_run_cache_tokens
Create Date: 2026-12-01
"""
from alembic import op

revision = "0008_setup_failed"
down_revision = "0007_run_cache_tokens"
branch_labels = None
depends_on = None

# The registry's FAILURE_REASONS as of this revision (a migration never imports the live registry).
BEFORE = [
    "provider_capacity", "provider_auth", "provider_error", "spec_invalid", "pod_vanished",
    "pod_exit_nonzero", "partial_dispatch", "start_deadline", "crash_loop", "bootstrap_silence",
    "artifacts_missing", "cost_cap", "fleet_incident", "worker_lost", "agent_error",
    "model_api_error", "max_turns", "output_limit", "model_refusal", "context_limit", "run_incomplete",
    "cancelled_by_owner",
]
AFTER = BEFORE[:BEFORE.index("bootstrap_silence") + 1] + ["setup_failed"] + BEFORE[BEFORE.index("bootstrap_silence") + 1:]


def _replace(reasons: list[str]) -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_constraint(op.f("ck_agent_runs_failure_reason"), type_="check")
        batch.create_check_constraint(
            op.f("ck_agent_runs_failure_reason"), "failure_reason IS NULL OR failure_reason IN ("
            + ", ".join(f"'{r}'" for r in reasons) + ")")


def upgrade():
    _replace(AFTER)


def downgrade():
    op.execute("UPDATE agent_runs SET failure_reason = 'pod_exit_nonzero' WHERE failure_reason = 'setup_failed'")
    _replace(BEFORE)
