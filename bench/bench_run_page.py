"""Run page first render (ARCHITECTURE §5): `GET /runs/<id>` for a run with 10,000 events
(the page shows the latest 200 and pages back on demand), the web server on PostgreSQL; also
"show earlier" from the middle of the run, and the JSON API's page of events.

Budget: first render under 200 ms; the query count does not grow with the run.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_run_page.py [--events 10000] [--requests 30]
"""
from __future__ import annotations

import argparse

import harness

BUDGET_MS = 200


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    app = harness.fresh_database()
    harness.create_owner(app)
    small_id, _ = harness.seed_run(app, 100)
    run_id, last = harness.seed_run(app, args.events)
    with harness.Server() as server:
        client = harness.login(server.url)
        page = harness.sample(client, f"/runs/{run_id}", args.requests)
        small = harness.sample(client, f"/runs/{small_id}", args.requests)
        earlier = harness.sample(client, f"/runs/{run_id}/events?before={last // 2}", args.requests,
                                 headers={"HX-Request": "true"})
        api = harness.sample(client, f"/api/runs/{run_id}?after={last - 500}", args.requests)
        client.close()
    constant = page["queries"] == small["queries"]
    ok = page["server_p50_ms"] < BUDGET_MS
    harness.report({"bench": "run_page", "server": harness.server_label(), "database": "postgresql",
                    "machine": harness.machine(), "events": args.events, "first_render": page,
                    "first_render_100_events": small, "show_earlier_fragment": earlier, "api_500_events": api,
                    "budget_ms": BUDGET_MS, "queries_constant": constant, "meets_budget": ok and constant}, [
        (f"run page, {args.events:,} events, p50 / p95", f"{page['server_p50_ms']} / {page['server_p95_ms']} ms",
         f"first render < {BUDGET_MS} ms", ok),
        ("run page, 100 events, p50", f"{small['server_p50_ms']} ms", "(for scale)", None),
        ("queries per render (10,000 vs 100)", f"{page['queries']} vs {small['queries']}", "constant", constant),
        ("show earlier (200 events) p50", f"{earlier['server_p50_ms']} ms", "(no budget)", None),
        ("API page of 500 events p50", f"{api['server_p50_ms']} ms", "(no budget)", None),
    ])


if __name__ == "__main__":
    main()
