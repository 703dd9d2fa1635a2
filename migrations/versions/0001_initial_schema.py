"""initial schema

Revision ID: 0001_initial
Revises: 
Create Date: 2026-11-29

"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = '0001_initial'
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    # Built from the models; CHECK constraints carry the registry of services/core/registry.py.
    op.create_table('agent_runs',
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('agent', sa.String(length=80), nullable=False),
    sa.Column('provider', sa.String(length=32), nullable=False),
    sa.Column('model', sa.String(length=80), nullable=True),
    sa.Column('status', sa.String(length=24), nullable=False),
    sa.Column('request', sa.Text(), nullable=False),
    sa.Column('plan_md', sa.Text(), nullable=True),
    sa.Column('plan_json', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('scope_kind', sa.String(length=32), nullable=False),
    sa.Column('scope_id', sa.Uuid(), nullable=True),
    sa.Column('parent_run_id', sa.Uuid(), nullable=True),
    sa.Column('resumes_run_id', sa.Uuid(), nullable=True),
    sa.Column('approval_required', sa.Boolean(), nullable=False),
    sa.Column('approved_by', sa.String(length=64), nullable=True),
    sa.Column('approved_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('runpod_account', sa.String(length=16), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('failure_reason', sa.String(length=32), nullable=True),
    sa.Column('input_tokens', sa.BigInteger(), nullable=False),
    sa.Column('output_tokens', sa.BigInteger(), nullable=False),
    sa.Column('cost_usd', sa.Numeric(precision=12, scale=4, asdecimal=False), nullable=False),
    sa.Column('turns', sa.Integer(), nullable=False),
    sa.Column('last_seq', sa.BigInteger(), nullable=False),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('wake_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('rq_job_id', sa.String(length=64), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("failure_reason IS NULL OR failure_reason IN ('provider_capacity', 'provider_auth', 'provider_error', 'spec_invalid', 'pod_vanished', 'pod_exit_nonzero', 'partial_dispatch', 'start_deadline', 'crash_loop', 'bootstrap_silence', 'artifacts_missing', 'cost_cap', 'fleet_incident', 'worker_lost', 'agent_error', 'model_api_error', 'max_turns', 'cancelled_by_owner')", name=op.f('ck_agent_runs_failure_reason')),
    sa.CheckConstraint("kind IN ('plan', 'apply', 'qa', 'experiment')", name=op.f('ck_agent_runs_kind')),
    sa.CheckConstraint("status IN ('queued', 'running', 'waiting', 'awaiting_approval', 'completed', 'failed', 'cancelled', 'blocked')", name=op.f('ck_agent_runs_status')),
    sa.ForeignKeyConstraint(['parent_run_id'], ['agent_runs.id'], name=op.f('fk_agent_runs_parent_run_id_agent_runs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['resumes_run_id'], ['agent_runs.id'], name=op.f('fk_agent_runs_resumes_run_id_agent_runs'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_agent_runs'))
    )
    with op.batch_alter_table('agent_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_agent_runs_parent_run_id'), ['parent_run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_agent_runs_resumes_run_id'), ['resumes_run_id'], unique=False)
        batch_op.create_index('ix_agent_runs_scope', ['scope_kind', 'scope_id'], unique=False)
        batch_op.create_index('ix_agent_runs_status', ['status'], unique=False)

    op.create_table('comments',
    sa.Column('entity_kind', sa.String(length=32), nullable=False),
    sa.Column('entity_id', sa.Uuid(), nullable=False),
    sa.Column('author_kind', sa.String(length=16), nullable=False),
    sa.Column('author_name', sa.String(length=120), nullable=False),
    sa.Column('body_md', sa.Text(), nullable=False),
    sa.Column('body_html', sa.Text(), nullable=False),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("author_kind IN ('owner', 'agent')", name=op.f('ck_comments_author_kind')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_comments'))
    )
    with op.batch_alter_table('comments', schema=None) as batch_op:
        batch_op.create_index('ix_comments_entity', ['entity_kind', 'entity_id'], unique=False)

    op.create_table('counters',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('value', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_counters'))
    )
    op.create_table('experiments',
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('title', sa.String(length=300), nullable=False),
    sa.Column('hypothesis', sa.Text(), nullable=True),
    sa.Column('body', sa.Text(), nullable=True),
    sa.Column('plan_md', sa.Text(), nullable=True),
    sa.Column('plan_json', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('pod_spec', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('config_yaml', sa.Text(), nullable=True),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('compute_size', sa.String(length=16), nullable=True),
    sa.Column('priority', sa.String(length=16), nullable=False),
    sa.Column('assignee_kind', sa.String(length=16), nullable=False),
    sa.Column('tags', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('has_clean_result', sa.Boolean(), nullable=False),
    sa.Column('auto_approve_plan', sa.Boolean(), nullable=False),
    sa.Column('parent_experiment_id', sa.Uuid(), nullable=True),
    sa.Column('runpod_account', sa.String(length=16), nullable=False),
    sa.Column('project_id', sa.Uuid(), nullable=True),
    sa.Column('cost_cap_usd', sa.Numeric(precision=12, scale=2, asdecimal=False), nullable=True),
    sa.Column('git_branch', sa.String(length=255), nullable=True),
    sa.Column('git_commit', sa.String(length=64), nullable=True),
    sa.Column('status_before_block', sa.String(length=32), nullable=True),
    sa.Column('last_event_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("assignee_kind IN ('agent', 'human')", name=op.f('ck_experiments_assignee_kind')),
    sa.CheckConstraint("compute_size IS NULL OR compute_size IN ('none', 'small', 'medium', 'large')", name=op.f('ck_experiments_compute_size')),
    sa.CheckConstraint("kind IN ('experiment', 'infra', 'survey')", name=op.f('ck_experiments_kind')),
    sa.CheckConstraint("priority IN ('low', 'normal', 'high', 'urgent')", name=op.f('ck_experiments_priority')),
    sa.CheckConstraint("runpod_account IN ('team', 'personal', 'local')", name=op.f('ck_experiments_runpod_account')),
    sa.CheckConstraint("status IN ('proposed', 'clarifying', 'awaiting_clarifications', 'gate_pending', 'planning', 'plan_pending', 'awaiting_approval', 'approved', 'queued', 'implementing', 'code_reviewing', 'testing', 'running', 'uploading', 'verifying', 'interpreting', 'clean_result_drafting', 'followups_running', 'reviewing', 'awaiting_promotion', 'blocked', 'shared', 'completed', 'done_experiment', 'done_impl', 'failed', 'cancelled', 'archived')", name=op.f('ck_experiments_status')),
    sa.CheckConstraint("status_before_block IS NULL OR status_before_block IN ('proposed', 'clarifying', 'awaiting_clarifications', 'gate_pending', 'planning', 'plan_pending', 'awaiting_approval', 'approved', 'queued', 'implementing', 'code_reviewing', 'testing', 'running', 'uploading', 'verifying', 'interpreting', 'clean_result_drafting', 'followups_running', 'reviewing', 'awaiting_promotion', 'blocked', 'shared', 'completed', 'done_experiment', 'done_impl', 'failed', 'cancelled', 'archived')", name=op.f('ck_experiments_status_before_block')),
    sa.CheckConstraint('length(title) BETWEEN 1 AND 300', name=op.f('ck_experiments_title_length')),
    sa.ForeignKeyConstraint(['parent_experiment_id'], ['experiments.id'], name=op.f('fk_experiments_parent_experiment_id_experiments'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_experiments')),
    sa.UniqueConstraint('number', name=op.f('uq_experiments_number'))
    )
    with op.batch_alter_table('experiments', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_experiments_parent_experiment_id'), ['parent_experiment_id'], unique=False)
        batch_op.create_index('ix_experiments_status', ['status'], unique=False)
        batch_op.create_index('ix_experiments_updated_at', ['updated_at'], unique=False)

    op.create_table('fleet_incidents',
    sa.Column('opened_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('pods', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('resolved_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('resolved_by', sa.String(length=64), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_fleet_incidents'))
    )
    op.create_table('settings',
    sa.Column('key', sa.String(length=120), nullable=False),
    sa.Column('value', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_settings'))
    )
    op.create_table('users',
    sa.Column('email', sa.String(length=320), nullable=False),
    sa.Column('password_hash', sa.String(length=255), nullable=False),
    sa.Column('display_name', sa.String(length=120), nullable=False),
    sa.Column('session_version', sa.Integer(), nullable=False),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('email', name=op.f('uq_users_email'))
    )
    op.create_table('api_tokens',
    sa.Column('name', sa.String(length=120), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('secret_hash', sa.String(length=64), nullable=False),
    sa.Column('scopes', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('user_id', sa.Uuid(), nullable=True),
    sa.Column('experiment_id', sa.Uuid(), nullable=True),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], name=op.f('fk_api_tokens_experiment_id_experiments'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_api_tokens_user_id_users'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('secret_hash', name=op.f('uq_api_tokens_secret_hash'))
    )
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_tokens_experiment_id'), ['experiment_id'], unique=False)

    op.create_table('clean_result_versions',
    sa.Column('experiment_id', sa.Uuid(), nullable=False),
    sa.Column('title', sa.String(length=300), nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.Column('author_kind', sa.String(length=16), nullable=False),
    sa.Column('author_id', sa.String(length=64), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], name=op.f('fk_clean_result_versions_experiment_id_experiments'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_clean_result_versions'))
    )
    with op.batch_alter_table('clean_result_versions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_clean_result_versions_experiment_id'), ['experiment_id'], unique=False)

    op.create_table('plan_versions',
    sa.Column('experiment_id', sa.Uuid(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('markdown', sa.Text(), nullable=False),
    sa.Column('plan_json', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('problems', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('estimate', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('agent_run_id', sa.Uuid(), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("source IN ('owner', 'agent', 'api', 'import')", name=op.f('ck_plan_versions_source')),
    sa.ForeignKeyConstraint(['agent_run_id'], ['agent_runs.id'], name=op.f('fk_plan_versions_agent_run_id_agent_runs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], name=op.f('fk_plan_versions_experiment_id_experiments'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_plan_versions')),
    sa.UniqueConstraint('experiment_id', 'version', name='uq_plan_versions_experiment_version')
    )
    op.create_table('pods',
    sa.Column('agent_run_id', sa.Uuid(), nullable=True),
    sa.Column('experiment_id', sa.Uuid(), nullable=False),
    sa.Column('progress_token_hash', sa.String(length=64), nullable=True),
    sa.Column('run_index', sa.Integer(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('provider_pod_id', sa.String(length=128), nullable=True),
    sa.Column('account', sa.String(length=16), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('gpu_type_id', sa.String(length=120), nullable=True),
    sa.Column('gpu_count', sa.Integer(), nullable=False),
    sa.Column('cloud_type', sa.String(length=16), nullable=True),
    sa.Column('data_center_id', sa.String(length=64), nullable=True),
    sa.Column('status', sa.String(length=24), nullable=False),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('exited_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('desired_status', sa.String(length=24), nullable=True),
    sa.Column('ssh_host', sa.String(length=255), nullable=True),
    sa.Column('ssh_port', sa.Integer(), nullable=True),
    sa.Column('retry_count', sa.Integer(), nullable=False),
    sa.Column('max_retries', sa.Integer(), nullable=False),
    sa.Column('blocked_reason', sa.Text(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('last_checked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_progress_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('bootstrap_count', sa.Integer(), nullable=False),
    sa.Column('progress_pct', sa.Double(), nullable=True),
    sa.Column('progress_message', sa.String(length=2000), nullable=True),
    sa.Column('stopped_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('terminated_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('stop_reason', sa.String(length=16), nullable=True),
    sa.Column('cost_per_hr', sa.Numeric(precision=10, scale=4, asdecimal=False), nullable=True),
    sa.Column('adjusted_cost_per_hr', sa.Numeric(precision=10, scale=4, asdecimal=False), nullable=True),
    sa.Column('uptime_seconds', sa.Integer(), nullable=False),
    sa.Column('last_started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('metadata', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("status IN ('deploying', 'running', 'exited', 'stop_requested', 'stopped', 'terminated', 'retrying', 'vanished', 'failed')", name=op.f('ck_pods_status')),
    sa.CheckConstraint("stop_reason IS NULL OR stop_reason IN ('owner', 'orphan', 'failure', 'cost_cap', 'completed')", name=op.f('ck_pods_stop_reason')),
    sa.ForeignKeyConstraint(['agent_run_id'], ['agent_runs.id'], name=op.f('fk_pods_agent_run_id_agent_runs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], name=op.f('fk_pods_experiment_id_experiments'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_pods')),
    sa.UniqueConstraint('name', name=op.f('uq_pods_name')),
    sa.UniqueConstraint('progress_token_hash', name=op.f('uq_pods_progress_token_hash')),
    sa.UniqueConstraint('provider_pod_id', name=op.f('uq_pods_provider_pod_id'))
    )
    with op.batch_alter_table('pods', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_pods_agent_run_id'), ['agent_run_id'], unique=False)
        batch_op.create_index('ix_pods_experiment_id', ['experiment_id'], unique=False)
        batch_op.create_index('ix_pods_status', ['status'], unique=False)

    op.create_table('run_events',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('run_id', sa.Uuid(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('event_type', sa.String(length=32), nullable=False),
    sa.Column('body', sa.Text(), nullable=True),
    sa.Column('metadata', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['agent_runs.id'], name=op.f('fk_run_events_run_id_agent_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_run_events')),
    sa.UniqueConstraint('run_id', 'seq', name='uq_run_events_run_id_seq')
    )
    op.create_table('share_links',
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('scope', sa.String(length=16), nullable=False),
    sa.Column('experiment_id', sa.Uuid(), nullable=True),
    sa.Column('project_id', sa.Uuid(), nullable=True),
    sa.Column('label', sa.String(length=200), nullable=False),
    sa.Column('include_comments', sa.Boolean(), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('use_count', sa.Integer(), nullable=False),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("scope IN ('experiment', 'project', 'all_promoted')", name=op.f('ck_share_links_scope')),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], name=op.f('fk_share_links_experiment_id_experiments'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_share_links')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_share_links_token_hash'))
    )
    with op.batch_alter_table('share_links', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_share_links_experiment_id'), ['experiment_id'], unique=False)

    op.create_table('workflow_events',
    sa.Column('entity_kind', sa.String(length=32), nullable=False),
    sa.Column('entity_id', sa.Uuid(), nullable=False),
    sa.Column('experiment_id', sa.Uuid(), nullable=True),
    sa.Column('event_type', sa.String(length=32), nullable=False),
    sa.Column('from_status', sa.String(length=32), nullable=True),
    sa.Column('to_status', sa.String(length=32), nullable=True),
    sa.Column('marker', sa.String(length=64), nullable=True),
    sa.Column('actor_kind', sa.String(length=16), nullable=False),
    sa.Column('actor_id', sa.String(length=64), nullable=True),
    sa.Column('note', sa.String(length=2000), nullable=True),
    sa.Column('metadata', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("actor_kind IN ('owner', 'agent', 'system', 'pod', 'token')", name=op.f('ck_workflow_events_actor_kind')),
    sa.CheckConstraint("event_type IN ('state_changed', 'approval_requested', 'approval_resolved', 'marker', 'progress', 'note', 'blocked', 'comment')", name=op.f('ck_workflow_events_event_type')),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], name=op.f('fk_workflow_events_experiment_id_experiments'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_workflow_events'))
    )
    with op.batch_alter_table('workflow_events', schema=None) as batch_op:
        batch_op.create_index('ix_workflow_events_entity_created', ['entity_id', 'created_at'], unique=False)
        batch_op.create_index('ix_workflow_events_marker', ['marker'], unique=False)

    op.create_table('approval_requests',
    sa.Column('experiment_id', sa.Uuid(), nullable=False),
    sa.Column('plan_version_id', sa.Uuid(), nullable=True),
    sa.Column('agent_run_id', sa.Uuid(), nullable=True),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('title', sa.String(length=400), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('requested_state', sa.String(length=32), nullable=False),
    sa.Column('approved_state', sa.String(length=32), nullable=False),
    sa.Column('rejected_state', sa.String(length=32), nullable=False),
    sa.Column('checklist', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('answers', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('estimated_cost_usd', sa.Numeric(precision=12, scale=2, asdecimal=False), nullable=True),
    sa.Column('requested_by', sa.String(length=64), nullable=True),
    sa.Column('resolved_by', sa.String(length=64), nullable=True),
    sa.Column('resolved_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('resolved_note', sa.String(length=2000), nullable=True),
    sa.Column('deferred_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('defer_note', sa.String(length=2000), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("kind IN ('experiment_plan', 'dispatch')", name=op.f('ck_approval_requests_kind')),
    sa.CheckConstraint("status IN ('pending', 'approved', 'rejected', 'superseded')", name=op.f('ck_approval_requests_status')),
    sa.ForeignKeyConstraint(['agent_run_id'], ['agent_runs.id'], name=op.f('fk_approval_requests_agent_run_id_agent_runs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], name=op.f('fk_approval_requests_experiment_id_experiments'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['plan_version_id'], ['plan_versions.id'], name=op.f('fk_approval_requests_plan_version_id_plan_versions'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_approval_requests'))
    )
    with op.batch_alter_table('approval_requests', schema=None) as batch_op:
        batch_op.create_index('ix_approval_requests_experiment_status', ['experiment_id', 'status'], unique=False)

    op.create_table('artifacts',
    sa.Column('pod_id', sa.Uuid(), nullable=True),
    sa.Column('experiment_id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=500), nullable=False),
    sa.Column('content_type', sa.String(length=120), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('content', sa.LargeBinary(), nullable=False),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], name=op.f('fk_artifacts_experiment_id_experiments'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['pod_id'], ['pods.id'], name=op.f('fk_artifacts_pod_id_pods'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_artifacts')),
    sa.UniqueConstraint('pod_id', 'name', name='uq_artifacts_pod_name')
    )
    with op.batch_alter_table('artifacts', schema=None) as batch_op:
        batch_op.create_index('ix_artifacts_experiment_id', ['experiment_id'], unique=False)

    op.create_table('figures',
    sa.Column('experiment_id', sa.Uuid(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('title', sa.String(length=300), nullable=False),
    sa.Column('artifact_id', sa.Uuid(), nullable=True),
    sa.Column('content', sa.Text(), nullable=True),
    sa.Column('content_type', sa.String(length=120), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("kind IN ('image', 'html_artifact', 'svg')", name=op.f('ck_figures_kind')),
    sa.ForeignKeyConstraint(['artifact_id'], ['artifacts.id'], name=op.f('fk_figures_artifact_id_artifacts'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], name=op.f('fk_figures_experiment_id_experiments'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_figures'))
    )
    with op.batch_alter_table('figures', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_figures_experiment_id'), ['experiment_id'], unique=False)



def downgrade():
    # Built from the models; CHECK constraints carry the registry of services/core/registry.py.
    with op.batch_alter_table('figures', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_figures_experiment_id'))

    op.drop_table('figures')
    with op.batch_alter_table('artifacts', schema=None) as batch_op:
        batch_op.drop_index('ix_artifacts_experiment_id')

    op.drop_table('artifacts')
    with op.batch_alter_table('approval_requests', schema=None) as batch_op:
        batch_op.drop_index('ix_approval_requests_experiment_status')

    op.drop_table('approval_requests')
    with op.batch_alter_table('workflow_events', schema=None) as batch_op:
        batch_op.drop_index('ix_workflow_events_marker')
        batch_op.drop_index('ix_workflow_events_entity_created')

    op.drop_table('workflow_events')
    with op.batch_alter_table('share_links', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_share_links_experiment_id'))

    op.drop_table('share_links')
    op.drop_table('run_events')
    with op.batch_alter_table('pods', schema=None) as batch_op:
        batch_op.drop_index('ix_pods_status')
        batch_op.drop_index('ix_pods_experiment_id')
        batch_op.drop_index(batch_op.f('ix_pods_agent_run_id'))

    op.drop_table('pods')
    op.drop_table('plan_versions')
    with op.batch_alter_table('clean_result_versions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_clean_result_versions_experiment_id'))

    op.drop_table('clean_result_versions')
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_tokens_experiment_id'))

    op.drop_table('api_tokens')
    op.drop_table('users')
    op.drop_table('settings')
    op.drop_table('fleet_incidents')
    with op.batch_alter_table('experiments', schema=None) as batch_op:
        batch_op.drop_index('ix_experiments_updated_at')
        batch_op.drop_index('ix_experiments_status')
        batch_op.drop_index(batch_op.f('ix_experiments_parent_experiment_id'))

    op.drop_table('experiments')
    op.drop_table('counters')
    with op.batch_alter_table('comments', schema=None) as batch_op:
        batch_op.drop_index('ix_comments_entity')

    op.drop_table('comments')
    with op.batch_alter_table('agent_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_agent_runs_status')
        batch_op.drop_index('ix_agent_runs_scope')
        batch_op.drop_index(batch_op.f('ix_agent_runs_resumes_run_id'))
        batch_op.drop_index(batch_op.f('ix_agent_runs_parent_run_id'))

    op.drop_table('agent_runs')
