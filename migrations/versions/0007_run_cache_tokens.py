"""agent runs record prompt-cache tokens apart, a cost that may be unknown (NULL, never a
made-up $0.00) with six decimals for cache-read-sized amounts, and the model-side failure
reasons output_limit, model_refusal, context_limit and run_incomplete

Revision ID: 0007_run_cache_tokens
Revises: 0006_pod_progress_seq
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0007_run_cache_tokens"
down_revision = "0006_pod_progress_seq"
branch_labels = None
depends_on = None

OLD_REASONS = ["provider_capacity", "provider_auth", "provider_error", "spec_invalid", "pod_vanished",
               "pod_exit_nonzero", "partial_dispatch", "start_deadline", "crash_loop", "bootstrap_silence",
               "artifacts_missing", "cost_cap", "fleet_incident", "worker_lost", "agent_error", "model_api_error",
               "max_turns", "cancelled_by_owner"]
NEW_REASONS = OLD_REASONS[:17] + ["output_limit", "model_refusal", "context_limit", "run_incomplete",
                                  "cancelled_by_owner"]


def _reason_check(reasons):
    return "failure_reason IS NULL OR failure_reason IN (" + ", ".join(f"'{r}'" for r in reasons) + ")"


def upgrade():
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("cache_creation_input_tokens", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("cache_read_input_tokens", sa.BigInteger(), nullable=False, server_default="0"))
        batch.alter_column("cost_usd", existing_type=sa.Numeric(12, 4, asdecimal=False),
                           type_=sa.Numeric(14, 6, asdecimal=False), nullable=True)
        batch.drop_constraint(op.f("ck_agent_runs_failure_reason"), type_="check")
        batch.create_check_constraint(op.f("ck_agent_runs_failure_reason"), _reason_check(NEW_REASONS))


def downgrade():
    op.execute("UPDATE agent_runs SET failure_reason = 'agent_error' WHERE failure_reason IN "
               "('output_limit', 'model_refusal', 'context_limit', 'run_incomplete')")
    op.execute("UPDATE agent_runs SET cost_usd = 0 WHERE cost_usd IS NULL")
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_constraint(op.f("ck_agent_runs_failure_reason"), type_="check")
        batch.create_check_constraint(op.f("ck_agent_runs_failure_reason"), _reason_check(OLD_REASONS))
        batch.alter_column("cost_usd", existing_type=sa.Numeric(14, 6, asdecimal=False),
                           type_=sa.Numeric(12, 4, asdecimal=False), nullable=False)
        batch.drop_column("cache_read_input_tokens")
        batch.drop_column("cache_creation_input_tokens")
