"""the literature library: items (normalized DOI / arXiv id unique, a title+author match key)
and feeds; full-text search as an expression GIN index on PostgreSQL and an FTS5 table kept
by triggers on SQLite

Revision ID: 0020_literature
Revises: 0019_pod_account
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0020_literature"
down_revision = "0019_pod_account"
branch_labels = None
depends_on = None

LITERATURE_TYPES = ["paper", "blog_post", "forum_post", "newsletter", "report", "repo", "video", "other"]
LITERATURE_READ_STATES = ["unread", "queued", "reading", "read", "archived"]
LITERATURE_SOURCES = ["arxiv", "openreview", "semantic_scholar", "hn", "twitter_list", "rss", "manual", "bibtex",
                      "zotero"]
LITERATURE_FEED_KINDS = ["arxiv_query", "arxiv_category", "rss"]

# The same expression services/research/literature_search.py queries with, so PostgreSQL uses the index.
PG_SEARCH_DOCUMENT = ("to_tsvector('english'::regconfig, title || ' ' || authors::text || ' ' || abstract || ' ' "
                      "|| summary_md || ' ' || notes)")
SQLITE_FTS_ROW = ("new.rowid, new.title, new.authors, new.abstract || ' ' || new.summary_md || ' ' || new.notes")


def one_of(column, values):
    quoted = ", ".join("'" + v + "'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({quoted})", name=column)


def timestamps():
    return [sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False)]


def upgrade():
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    op.create_table(
        "literature_feeds",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("query", sa.String(2000), nullable=False),
        sa.Column("label", sa.String(200), nullable=False),
        sa.Column("project_id", sa.Uuid(), nullable=True),
        sa.Column("last_polled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("items_added", sa.Integer(), nullable=False),
        *timestamps(),
        one_of("kind", LITERATURE_FEED_KINDS),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="SET NULL",
                                name=op.f("fk_literature_feeds_project_id_projects")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_literature_feeds")),
    )
    op.create_table(
        "literature_items",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("title", sa.String(1000), nullable=False),
        sa.Column("authors", json_type, nullable=False),
        sa.Column("year", sa.Integer(), nullable=True),
        sa.Column("venue", sa.String(500), nullable=False),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("arxiv_id", sa.String(40), nullable=True),
        sa.Column("doi", sa.String(255), nullable=True),
        sa.Column("openreview_id", sa.String(80), nullable=True),
        sa.Column("s2_id", sa.String(80), nullable=True),
        sa.Column("abstract", sa.Text(), nullable=False),
        sa.Column("summary_md", sa.Text(), nullable=False),
        sa.Column("relevance_reason_md", sa.Text(), nullable=False),
        sa.Column("threat_reason_md", sa.Text(), nullable=False),
        sa.Column("read_state", sa.String(16), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("tags", json_type, nullable=False),
        sa.Column("source", sa.String(24), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("match_key", sa.String(400), nullable=False),
        sa.Column("project_id", sa.Uuid(), nullable=True),
        sa.Column("feed_id", sa.Uuid(), nullable=True),
        *timestamps(),
        one_of("type", LITERATURE_TYPES),
        one_of("read_state", LITERATURE_READ_STATES),
        one_of("source", LITERATURE_SOURCES),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="SET NULL",
                                name=op.f("fk_literature_items_project_id_projects")),
        sa.ForeignKeyConstraint(["feed_id"], ["literature_feeds.id"], ondelete="SET NULL",
                                name=op.f("fk_literature_items_feed_id_literature_feeds")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_literature_items")),
        sa.UniqueConstraint("arxiv_id", name=op.f("uq_literature_items_arxiv_id")),
        sa.UniqueConstraint("doi", name=op.f("uq_literature_items_doi")),
    )
    op.create_index(op.f("ix_literature_items_read_state"), "literature_items", ["read_state"])
    op.create_index(op.f("ix_literature_items_match_key"), "literature_items", ["match_key"])
    op.create_index(op.f("ix_literature_items_project_id"), "literature_items", ["project_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE INDEX ix_literature_items_search ON literature_items USING gin ({PG_SEARCH_DOCUMENT})")
    else:
        # FTS5 keyed by the items' rowid; the triggers keep it in step with every write.
        op.execute("CREATE VIRTUAL TABLE literature_fts USING fts5(title, authors, body, tokenize='porter unicode61')")
        op.execute(f"CREATE TRIGGER literature_fts_insert AFTER INSERT ON literature_items BEGIN "
                   f"INSERT INTO literature_fts(rowid, title, authors, body) VALUES ({SQLITE_FTS_ROW}); END")
        op.execute(f"CREATE TRIGGER literature_fts_update AFTER UPDATE ON literature_items BEGIN "
                   f"DELETE FROM literature_fts WHERE rowid = old.rowid; "
                   f"INSERT INTO literature_fts(rowid, title, authors, body) VALUES ({SQLITE_FTS_ROW}); END")
        op.execute("CREATE TRIGGER literature_fts_delete AFTER DELETE ON literature_items BEGIN "
                   "DELETE FROM literature_fts WHERE rowid = old.rowid; END")


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_literature_items_search")
    else:
        for trigger in ("literature_fts_insert", "literature_fts_update", "literature_fts_delete"):
            op.execute(f"DROP TRIGGER {trigger}")
        op.execute("DROP TABLE literature_fts")
    op.drop_table("literature_items")
    op.drop_table("literature_feeds")
