"""the research record: projects and their narratives, beliefs with versions and proposed
updates, typed links between records; experiments.project_id gets an index (board filters)

Revision ID: 0018_research_record
Revises: 0017_experiment_question
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0018_research_record"
down_revision = "0017_experiment_question"
branch_labels = None
depends_on = None

PROJECT_STATUSES = ["active", "paused", "completed", "archived"]
NARRATIVE_STATUSES = ["draft", "published", "archived"]
BELIEF_STATUSES = ["draft", "active", "supported", "weakened", "falsified", "retracted", "archived"]
CONFIDENCES = ["LOW", "MODERATE", "HIGH"]
BELIEF_PROPOSAL_STATUSES = ["pending", "accepted", "rejected", "superseded"]
RECORD_KINDS = ["project", "belief", "experiment", "run", "clean_result", "todo", "literature", "narrative",
                "daily_log", "weekly_review"]
LINK_KINDS = ["supports", "contradicts", "tests", "produces_evidence_for", "derives_from", "cites", "answers",
              "blocks", "duplicates", "method", "baseline", "background", "threat", "inspiration", "parent",
              "child", "sibling"]


def one_of(column, values):
    quoted = ", ".join("'" + v + "'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({quoted})", name=column)


def timestamps():
    return [sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False)]


def upgrade():
    op.create_table(
        "projects",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("slug", sa.String(80), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("summary_md", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        *timestamps(),
        one_of("status", PROJECT_STATUSES),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("slug", name=op.f("uq_projects_slug")),
    )
    op.create_table(
        "project_narratives",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("project_id", sa.Uuid(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("body_md", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("author_kind", sa.String(16), nullable=False),
        sa.Column("author_label", sa.String(120), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        *timestamps(),
        one_of("status", NARRATIVE_STATUSES),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE",
                                name=op.f("fk_project_narratives_project_id_projects")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_project_narratives")),
        sa.UniqueConstraint("project_id", "version", name=op.f("uq_project_narratives_project_id")),
    )
    op.create_index(op.f("ix_project_narratives_project_id"), "project_narratives", ["project_id"])
    op.create_table(
        "beliefs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Uuid(), nullable=True),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("current_belief", sa.Text(), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("counterevidence", sa.Text(), nullable=False),
        sa.Column("next_test", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("confidence", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        *timestamps(),
        one_of("status", BELIEF_STATUSES),
        one_of("confidence", CONFIDENCES),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="SET NULL",
                                name=op.f("fk_beliefs_project_id_projects")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_beliefs")),
        sa.UniqueConstraint("number", name=op.f("uq_beliefs_number")),
    )
    op.create_index(op.f("ix_beliefs_project_id"), "beliefs", ["project_id"])
    op.create_table(
        "belief_proposals",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("belief_id", sa.Uuid(), nullable=False),
        sa.Column("experiment_id", sa.Uuid(), nullable=True),
        sa.Column("agent_run_id", sa.Uuid(), nullable=True),
        sa.Column("based_on_version", sa.Integer(), nullable=False),
        sa.Column("proposed_status", sa.String(16), nullable=False),
        sa.Column("proposed_confidence", sa.String(16), nullable=False),
        sa.Column("proposed_text", sa.Text(), nullable=False),
        sa.Column("evidence_md", sa.Text(), nullable=False),
        sa.Column("reasoning_md", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("resolution_note", sa.Text(), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        *timestamps(),
        one_of("status", BELIEF_PROPOSAL_STATUSES),
        one_of("proposed_status", BELIEF_STATUSES),
        one_of("proposed_confidence", CONFIDENCES),
        sa.ForeignKeyConstraint(["belief_id"], ["beliefs.id"], ondelete="CASCADE",
                                name=op.f("fk_belief_proposals_belief_id_beliefs")),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="SET NULL",
                                name=op.f("fk_belief_proposals_experiment_id_experiments")),
        sa.ForeignKeyConstraint(["agent_run_id"], ["agent_runs.id"], ondelete="SET NULL",
                                name=op.f("fk_belief_proposals_agent_run_id_agent_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_belief_proposals")),
    )
    op.create_index(op.f("ix_belief_proposals_belief_id"), "belief_proposals", ["belief_id"])
    op.create_index(op.f("ix_belief_proposals_experiment_id"), "belief_proposals", ["experiment_id"])
    op.create_index(op.f("ix_belief_proposals_status"), "belief_proposals", ["status"])
    op.create_table(
        "belief_versions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("belief_id", sa.Uuid(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("current_belief", sa.Text(), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("counterevidence", sa.Text(), nullable=False),
        sa.Column("next_test", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("confidence", sa.String(16), nullable=False),
        sa.Column("reasoning_md", sa.Text(), nullable=False),
        sa.Column("author_kind", sa.String(16), nullable=False),
        sa.Column("author_label", sa.String(120), nullable=False),
        sa.Column("experiment_id", sa.Uuid(), nullable=True),
        sa.Column("proposal_id", sa.Uuid(), nullable=True),
        *timestamps(),
        one_of("status", BELIEF_STATUSES),
        one_of("confidence", CONFIDENCES),
        sa.ForeignKeyConstraint(["belief_id"], ["beliefs.id"], ondelete="CASCADE",
                                name=op.f("fk_belief_versions_belief_id_beliefs")),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="SET NULL",
                                name=op.f("fk_belief_versions_experiment_id_experiments")),
        sa.ForeignKeyConstraint(["proposal_id"], ["belief_proposals.id"], ondelete="SET NULL",
                                name=op.f("fk_belief_versions_proposal_id_belief_proposals")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_belief_versions")),
        sa.UniqueConstraint("belief_id", "version", name=op.f("uq_belief_versions_belief_id")),
    )
    op.create_index(op.f("ix_belief_versions_belief_id"), "belief_versions", ["belief_id"])
    op.create_table(
        "record_links",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("source_kind", sa.String(16), nullable=False),
        sa.Column("source_id", sa.Uuid(), nullable=False),
        sa.Column("target_kind", sa.String(16), nullable=False),
        sa.Column("target_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("note", sa.String(2000), nullable=False),
        sa.Column("actor_kind", sa.String(16), nullable=False),
        sa.Column("actor_label", sa.String(120), nullable=False),
        *timestamps(),
        one_of("kind", LINK_KINDS),
        one_of("source_kind", RECORD_KINDS),
        one_of("target_kind", RECORD_KINDS),
        sa.CheckConstraint("NOT (source_kind = target_kind AND source_id = target_id)", name="not_to_itself"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_record_links")),
        sa.UniqueConstraint("source_kind", "source_id", "target_kind", "target_id", "kind",
                            name=op.f("uq_record_links_source_kind")),
    )
    op.create_index("ix_record_links_target", "record_links", ["target_kind", "target_id"])
    op.create_index(op.f("ix_experiments_project_id"), "experiments", ["project_id"])


def downgrade():
    op.drop_index(op.f("ix_experiments_project_id"), table_name="experiments")
    op.drop_table("record_links")
    op.drop_table("belief_versions")
    op.drop_table("belief_proposals")
    op.drop_table("beliefs")
    op.drop_table("project_narratives")
    op.drop_table("projects")
