"""Literature search (SPEC §11.3): `literature.search` over a library of 50,000 generated items
(bench/literature_corpus.py), timed in process (time.perf_counter around the service call:
the query and loading the page of 50 items), on PostgreSQL (the expression GIN index
`ix_literature_items_search`) and on SQLite (the embedded default: the FTS5 table
`literature_fts` kept by triggers, which this bench checks a bulk insert fills). Beside each,
in the same run, the yardstick: a plain `ILIKE '%word%'` scan (SQLite: LIKE, which ignores
ASCII case) of the same columns, same filters, same order and limit; the table gives the ratio.

Queries: a common word, a rare one (about one item in a thousand), two words, and the common
word filtered by project and by read state.
Budget: full-text search p50 < 20 ms on both databases for every query.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_literature_search.py [--items 50000] [--repeats 25]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import harness

BUDGET_MS = 20
PROJECTS = 8


def queries(project_id) -> list[tuple[str, dict]]:
    """(label, filter arguments as the library's query string gives them)."""
    from literature_corpus import RARE_WORD
    return [("common word", {"q": "attention"}),
            ("rare word", {"q": RARE_WORD}),
            ("two words", {"q": "sparse autoencoder"}),
            ("common word, one project", {"q": "attention", "project": str(project_id)}),
            ("common word, read", {"q": "attention", "read_state": "read"})]


def seed(app, items: int) -> list:
    """The projects and the items, in bulk (one insert per 5,000 rows); returns the project ids."""
    import uuid

    import sqlalchemy as sa
    from literature_corpus import item_rows

    from models import LiteratureItem, Project, db
    with app.app_context():
        ids = []
        for n in range(PROJECTS):
            project = Project(id=uuid.uuid4(), slug=f"bench-{n}", title=f"Bench project {n}", status="active")
            db.session.add(project)
            ids.append(project.id)
        db.session.commit()
        for start in range(0, items, 5000):
            db.session.execute(sa.insert(LiteratureItem),
                               item_rows(min(5000, items - start), seed=start, project_ids=ids, start=start))
            db.session.commit()
    return ids


def ilike_scan(filters, limit: int = 50):
    """The yardstick: every query word somewhere in the searched columns, no index."""
    import sqlalchemy as sa

    from models import LiteratureItem, db
    authors = sa.cast(LiteratureItem.authors, sa.Text) if db.engine.dialect.name == "postgresql" \
        else sa.literal_column("literature_items.authors")
    columns = (LiteratureItem.title, authors, LiteratureItem.abstract, LiteratureItem.summary_md,
               LiteratureItem.notes)
    statement = sa.select(LiteratureItem)
    for word in filters.query.split():
        statement = statement.where(sa.or_(*(column.ilike(f"%{word}%") for column in columns)))
    if filters.project_id:
        statement = statement.where(LiteratureItem.project_id == filters.project_id)
    if filters.read_state:
        statement = statement.where(LiteratureItem.read_state == filters.read_state)
    order = [LiteratureItem.score.desc().nulls_last(), LiteratureItem.created_at.desc(), LiteratureItem.id]
    return list(db.session.scalars(statement.order_by(*order).limit(limit)))


def timed(call, repeats: int) -> tuple[float, int]:
    """p50 milliseconds of `call()` over `repeats` (after two warm-up calls), and its row count."""
    from models import db
    for _ in range(2):
        call()
        db.session.rollback()
    times, found = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        found = len(call())
        times.append((time.perf_counter() - start) * 1000)
        db.session.rollback()  # a request's session ends: nothing cached in the identity map
    return round(statistics.median(times), 2), found


def measure(app, project_ids: list, repeats: int) -> list[dict]:
    from services.research import literature
    results = []
    with app.app_context():
        for label, args in queries(project_ids[0]):
            filters = literature.filters_from(args)
            search_ms, found = timed(lambda f=filters: literature.search(f), repeats)
            # The scan takes a second or more a call: a few calls are enough for its median.
            scan_ms, scanned = timed(lambda f=filters: ilike_scan(f), max(3, repeats // 5))
            results.append({"query": label, "args": args, "search_p50_ms": search_ms, "results": found,
                            "ilike_p50_ms": scan_ms, "ilike_results": scanned,
                            "ilike_over_search": round(scan_ms / search_ms, 1) if search_ms else None})
    return results


def sqlite_app(path: Path):
    """The app on a fresh SQLite file, its schema built by the migrations (the embedded setup)."""
    import flask_migrate

    from app import create_app
    from config import Config

    class SQLiteBenchConfig(Config):
        SQLALCHEMY_DATABASE_URI = f"sqlite:///{path}"
        REDIS_URL = harness.REDIS_URL

    app = create_app(SQLiteBenchConfig)
    with app.app_context():
        flask_migrate.upgrade(directory=str(harness.ROOT / "migrations"))
    return app


def fts_rows(app) -> tuple[int, int]:
    """(items, rows in the FTS5 table): equal when the triggers filled it during the bulk insert."""
    import sqlalchemy as sa

    from models import db
    with app.app_context():
        return (db.session.scalar(sa.text("SELECT count(*) FROM literature_items")),
                db.session.scalar(sa.text("SELECT count(*) FROM literature_fts")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=25)
    args = parser.parse_args()

    databases, rows = {}, []
    started = time.perf_counter()
    app = harness.fresh_database()
    project_ids = seed(app, args.items)
    seeded = round(time.perf_counter() - started, 1)
    harness.vacuum_analyze("literature_items")
    databases["postgresql"] = {"seed_seconds": seeded, "queries": measure(app, project_ids, args.repeats)}

    with tempfile.TemporaryDirectory(prefix="sagan-bench-sqlite-") as folder:
        started = time.perf_counter()
        lite = sqlite_app(Path(folder) / "sagan.db")
        lite_projects = seed(lite, args.items)
        items, indexed = fts_rows(lite)
        with lite.app_context():
            from models import db
            db.session.execute(db.text("ANALYZE"))
            db.session.commit()
        databases["sqlite"] = {"seed_seconds": round(time.perf_counter() - started, 1), "items": items,
                               "fts_rows": indexed, "queries": measure(lite, lite_projects, args.repeats)}
        with lite.app_context():
            db.session.remove()
            db.engine.dispose()

    within = True
    for name, found in databases.items():
        for q in found["queries"]:
            ok = q["search_p50_ms"] < BUDGET_MS
            within = within and ok
            rows.append((f"{name}: {q['query']} ({q['results']} shown) p50",
                         f"{q['search_p50_ms']} ms", f"< {BUDGET_MS} ms", ok))
            rows.append((f"{name}: {q['query']} ILIKE scan p50 (ratio)",
                         f"{q['ilike_p50_ms']} ms ({q['ilike_over_search']}×)", "(yardstick)", None))
    filled = databases["sqlite"]["items"] == databases["sqlite"]["fts_rows"]
    rows.append(("sqlite: FTS5 rows after the bulk insert", f"{databases['sqlite']['fts_rows']:,}",
                 f"= items ({databases['sqlite']['items']:,})", filled))
    harness.report({"bench": "literature_search", "items": args.items, "repeats": args.repeats,
                    "budget_p50_ms": BUDGET_MS, "databases": databases, "fts_filled_by_bulk_insert": filled,
                    "machine": harness.machine(), "meets_budget": within and filled}, rows)


if __name__ == "__main__":
    main()
