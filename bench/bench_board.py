"""Board render (ARCHITECTURE §5): server time p50/p95 and SQL queries per render of `/board`
at 100, 2,000 and 10,000 experiments (about 10% active: 200 active cards at 2,000),
the web server as deployed (serve.py) on PostgreSQL. Also the polled columns fragment, and its 304 when nothing changed.

Budget: at 2,000 experiments (200 active) p50 under 50 ms, at 10,000 (about 900 active) under
60 ms; a constant number of queries whatever the number of cards.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_board.py [--requests 40]
"""
from __future__ import annotations

import argparse

import harness

SCALES = (100, 2_000, 10_000)
BUDGET_MS = {2_000: 50, 10_000: 60}  # p50 server time by scale


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    app = harness.fresh_database()
    harness.create_owner(app)
    import sqlalchemy as sa

    from models import Experiment, db
    from services.core import registry
    from services.pipeline import demo

    results, rows = [], []
    loaded = 0
    with harness.Server() as server:
        client = harness.login(server.url)
        for scale in SCALES:
            with app.app_context():
                loaded += demo.load_scale(scale - loaded, seed=scale)
                active = db.session.scalar(sa.select(sa.func.count(Experiment.id)).where(
                    Experiment.status.not_in(registry.TERMINAL_STATUSES)))
            harness.vacuum_analyze()
            # The steady state of a server that shows the board all day: a warm-up long
            # enough for every worker thread's connection to have prepared its statements
            # (psycopg prepares one on its sixth run) and its caches filled.
            warmup = 4 * harness.WORKERS * harness.THREADS
            board = harness.sample(client, "/board", args.requests, warmup=warmup)
            columns = harness.sample(client, "/board/columns", args.requests, warmup=warmup)
            etag = client.get("/board/columns").headers["ETag"]
            unchanged = harness.sample(client, "/board/columns", args.requests,
                                       headers={"If-None-Match": etag}, expect=304)
            results.append({"experiments": scale, "active": active, "board": board, "columns": columns,
                            "columns_unchanged_304": unchanged})
            budget = BUDGET_MS.get(scale)
            ok = board["server_p50_ms"] < budget if budget else None
            rows.append((f"board at {scale:,} ({active} active) p50 / p95 (CPU p50)",
                         f"{board['server_p50_ms']} / {board['server_p95_ms']} ms ({board['server_cpu_p50_ms']})",
                         f"p50 < {budget} ms at {scale:,}" if budget else "(no budget)", ok))
        client.close()
    query_counts = sorted({q for r in results for q in r["board"]["queries"]})
    constant = len(query_counts) == 1
    rows.append(("board SQL queries per render", ", ".join(map(str, query_counts)), "constant", constant))
    within = all(r["board"]["server_p50_ms"] < BUDGET_MS[r["experiments"]]
                 for r in results if r["experiments"] in BUDGET_MS)
    harness.report({"bench": "board", "server": harness.server_label(), "database": "postgresql",
                    "scales": results, "budget_p50_ms": {f"{k}": v for k, v in BUDGET_MS.items()},
                    "queries_constant": constant, "queries": query_counts,
                    "meets_budget": within and constant}, rows)


if __name__ == "__main__":
    main()
