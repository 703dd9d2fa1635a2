"""The experiment page's live poll with nothing changed:
`GET /experiments/<n>/live` with `If-None-Match: "<version>"` from htmx, answered 304 with no
body — server time, queries, and requests/s under wrk next to a bare hello endpoint on the
same web server, in the same run.

Budget: a constant number of queries (the session's user and the one fingerprint query,
whatever the experiment's size); at least half the request rate of the bare endpoint.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_experiment_poll.py [--seconds 8] [--requests 300] [--events 2000]
"""
from __future__ import annotations

import argparse
import re

import harness

BUDGET_RATIO = 0.5
BUDGET_QUERIES = 2


def seed_experiment(app, events: int) -> int:
    """A running experiment with a plan, an approval, `events` timeline events and a run."""
    from models import db
    from services.core import events as event_log
    from services.core.actors import Actor
    from services.pipeline import demo
    from services.workflow import experiments

    with app.app_context():
        experiment = experiments.create_experiment({"title": "Experiment poll bench"}, Actor("owner", None, "bench"))
        demo.walk_to(experiment, "running")
        for i in range(events):
            event_log.record(experiment, "note", Actor("system", None, "bench"), note=f"Bench event {i}.")
        db.session.commit()
        return experiment.number


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--events", type=int, default=2_000)
    args = parser.parse_args()
    app = harness.fresh_database()
    harness.create_owner(app)
    small = seed_experiment(app, 10)
    number = seed_experiment(app, args.events)
    harness.vacuum_analyze()
    with harness.Server() as server:
        client = harness.login(server.url)
        polls = {}
        for n in (small, number):
            version = re.search(r'data-version="([0-9a-f]+)"', client.get(f"/experiments/{n}").text).group(1)
            polls[n] = (f"/experiments/{n}/live", {"HX-Request": "true", "If-None-Match": f'"{version}"'})
        small_timing = harness.sample(client, polls[small][0], args.requests, headers=polls[small][1], expect=304)
        timing = harness.sample(client, polls[number][0], args.requests, headers=polls[number][1], expect=304)
        hello_timing = harness.sample(client, "/bench/hello", args.requests)
        cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
        # The browser that logged in polls: the same User-Agent, so the same client identifier
        # under Flask-Login's session protection (wrk sends none by default, and every poll
        # then took the "other client" path, which re-signs the session cookie).
        agent = client.headers["User-Agent"]
        client.close()
        hello = harness.wrk(f"{server.url}/bench/hello", seconds=args.seconds)
        polled = harness.wrk(f"{server.url}{polls[number][0]}", seconds=args.seconds,
                             headers={"Cookie": cookie, "User-Agent": agent, **polls[number][1]})
    ratio = round(polled["requests_per_second"] / hello["requests_per_second"], 3)
    constant = timing["queries"] == small_timing["queries"] and max(timing["queries"]) <= BUDGET_QUERIES
    rate_ok = ratio >= BUDGET_RATIO and polled["non_2xx"] == 0
    harness.report({"bench": "experiment_poll", "server": harness.server_label(), "database": "postgresql",
                    "machine": harness.machine(), "wrk": "2 threads, 8 connections", "events": args.events,
                    "poll_server": timing, "poll_server_small": small_timing, "hello_server": hello_timing,
                    "poll_wrk": polled, "hello_wrk": hello, "rate_ratio": ratio, "budget_ratio": BUDGET_RATIO,
                    "budget_queries": BUDGET_QUERIES, "meets_budget": constant and rate_ok}, [
        ("poll (unchanged, 304) server p50 / p95", f"{timing['server_p50_ms']} / {timing['server_p95_ms']} ms",
         "(no budget)", None),
        ("poll queries, 10 vs. {:,} events".format(args.events),
         f"{small_timing['queries']} vs. {timing['queries']}", f"same, ≤ {BUDGET_QUERIES}", constant),
        ("hello server p50", f"{hello_timing['server_p50_ms']} ms", "(yardstick)", None),
        ("poll vs hello, server CPU p50", f"{timing['server_cpu_p50_ms']} vs {hello_timing['server_cpu_p50_ms']} ms",
         "(what each costs)", None),
        ("poll requests/s", f"{polled['requests_per_second']:,.0f}", "≥ half of hello", rate_ok),
        ("hello requests/s", f"{hello['requests_per_second']:,.0f}", f"ratio {ratio:.2f}", None),
    ])


if __name__ == "__main__":
    main()
