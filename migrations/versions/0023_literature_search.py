"""literature search at 50,000 items: the unread queue's order as an index on both backends,
and on PostgreSQL each item's search document kept as a stored tsvector column
(`search_vector`, generated from the text 0020's expression index covered), indexed instead

Revision ID: 0023_literature_search
Revises: 0022_daily_log
Create Date: 2026-12-02

Why (bench/bench_literature_search.py, docs/performance.md "The research record"): a common
word matches over 20,000 of 50,000 items. Visiting them all (to rank or sort) cost 100–500 ms;
search now lists in the queue's order, which the database reads from
`ix_literature_items_queue` and stops at the page's end. The stored vector is what lets
PostgreSQL test each row the walk meets without parsing its text again; it is generated, so
every write (bulk inserts too) keeps it current without the services knowing it exists.
SQLite's FTS5 table already stores the words; SQLite indexes sort NULLs first, so `score DESC`
there is PostgreSQL's `DESC NULLS LAST`.
"""
from alembic import op

revision = "0023_literature_search"
down_revision = "0022_daily_log"
branch_labels = None
depends_on = None

# The search filters, after the order: a walk of the index checks them without reading the row
# (SQLite: a common word within one project 13 → 6 ms over 50,000 items).
FILTER_COLUMNS = "project_id, read_state, type"
# 0020's document (models/literature.py SEARCH_DOCUMENT_SQL); a migration never imports the models.
PG_SEARCH_DOCUMENT = ("to_tsvector('english'::regconfig, title || ' ' || authors::text || ' ' || abstract || ' ' "
                      "|| summary_md || ' ' || notes)")


def upgrade():
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE INDEX ix_literature_items_queue ON literature_items "
                   f"(score DESC NULLS LAST, created_at DESC, id, {FILTER_COLUMNS})")
        op.execute("DROP INDEX ix_literature_items_search")
        op.execute(f"ALTER TABLE literature_items ADD COLUMN search_vector tsvector "
                   f"GENERATED ALWAYS AS ({PG_SEARCH_DOCUMENT}) STORED")
        op.execute("CREATE INDEX ix_literature_items_search ON literature_items USING gin (search_vector)")
    else:
        op.execute(f"CREATE INDEX ix_literature_items_queue ON literature_items "
                   f"(score DESC, created_at DESC, id, {FILTER_COLUMNS})")


def downgrade():
    op.execute("DROP INDEX ix_literature_items_queue")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_literature_items_search")
        op.execute("ALTER TABLE literature_items DROP COLUMN search_vector")
        op.execute(f"CREATE INDEX ix_literature_items_search ON literature_items USING gin ({PG_SEARCH_DOCUMENT})")
