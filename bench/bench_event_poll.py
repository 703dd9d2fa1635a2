"""Event poll with nothing new (ARCHITECTURE §5): the run page's live poll,
`GET /runs/<id>/events?after=<last seq>` from htmx, answered 204 with no body — server time,
and requests/s under wrk next to a bare hello endpoint on the same web server.

Budget: under 5 ms server time; at least half the request rate of the bare endpoint.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_event_poll.py [--seconds 8] [--requests 300]
"""
from __future__ import annotations

import argparse

import harness

BUDGET_MS = 5.0
BUDGET_RATIO = 0.5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    app = harness.fresh_database()
    harness.create_owner(app)
    run_id, last = harness.seed_run(app, 1_000)
    poll = f"/runs/{run_id}/events?after={last}"
    with harness.Server() as server:
        client = harness.login(server.url)
        timing = harness.sample(client, poll, args.requests, headers={"HX-Request": "true"}, expect=204)
        hello_timing = harness.sample(client, "/bench/hello", args.requests)
        cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
        # The browser that logged in polls: the same User-Agent, so the same client identifier
        # under Flask-Login's session protection (wrk sends none by default, and every poll
        # then took the "other client" path, which re-signs the session cookie).
        agent = client.headers["User-Agent"]
        client.close()
        headers = {"Cookie": cookie, "User-Agent": agent, "HX-Request": "true"}
        hello = harness.wrk(f"{server.url}/bench/hello", seconds=args.seconds)
        polled = harness.wrk(f"{server.url}{poll}", seconds=args.seconds, headers=headers)
    ratio = round(polled["requests_per_second"] / hello["requests_per_second"], 3)
    fast = timing["server_p50_ms"] < BUDGET_MS
    rate_ok = ratio >= BUDGET_RATIO and polled["non_2xx"] == 0
    harness.report({"bench": "event_poll", "server": harness.server_label(), "database": "postgresql",
                    "machine": harness.machine(), "wrk": "2 threads, 8 connections",
                    "poll_server": timing, "hello_server": hello_timing, "poll_wrk": polled, "hello_wrk": hello,
                    "rate_ratio": ratio, "budget_server_ms": BUDGET_MS, "budget_ratio": BUDGET_RATIO,
                    "meets_budget": fast and rate_ok}, [
        ("poll (nothing new) server p50 / p95", f"{timing['server_p50_ms']} / {timing['server_p95_ms']} ms",
         f"< {BUDGET_MS:g} ms", fast),
        ("poll queries", ", ".join(map(str, timing["queries"])), "(no budget)", None),
        ("hello server p50", f"{hello_timing['server_p50_ms']} ms", "(yardstick)", None),
        ("poll requests/s", f"{polled['requests_per_second']:,.0f}", "≥ half of hello", rate_ok),
        ("hello requests/s", f"{hello['requests_per_second']:,.0f}", f"ratio {ratio:.2f}", None),
    ])


if __name__ == "__main__":
    main()
