"""Today `/` (SPEC §12.1): server time p50/p95 and SQL queries per render at 2,000 experiments
(about 200 active), 100 items waiting on the owner and 5,000 timeline events (and, beside
them, 100 of Claude's open idea cards and 500 judged agent runs), on the web server
as deployed (serve.py) on PostgreSQL; and its poll `GET /today/live` with nothing changed
(304), its request rate under wrk next to the bare hello endpoint on the same server, in the
same run.

Budget: p50 under 50 ms; the same number of queries with the items the scale load leaves
waiting (about 50) and topped up to 100; the unchanged poll at least half the bare endpoint's
request rate.
Prints one JSON document on stdout and a short table on stderr.

Run: BENCH_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/sagan_bench_h1 \\
     .venv/bin/python bench/bench_today.py [--requests 60] [--seconds 8]
"""
from __future__ import annotations

import argparse
import re

import harness

EXPERIMENTS = 2_000
WAITING = 100
EVENTS = 5_000
IDEA_SESSIONS = 20
IDEA_CARDS = 5
JUDGED_RUNS = 500
BUDGET_MS = 50
BUDGET_RATIO = 0.5


def seed(app, waiting: int) -> dict:
    """Top the record up to `waiting` items in the queue: real plans waiting for approval
    (through the planner's path), questions, and belief updates Claude proposed; a live pod on
    a few running experiments; yesterday's log entry; timeline events up to EVENTS."""
    from datetime import timedelta

    import sqlalchemy as sa

    from models import Experiment, Pod, WorkflowEvent, db
    from models.ideation import IdeaCard
    from services.core import events as event_log
    from services.core import registry
    from services.core.actors import Actor
    from services.core.clock import utcnow
    from services.day import daily_log
    from services.pipeline import demo
    from services.planning import today
    from services.research import beliefs
    from services.workflow import experiments

    owner = Actor("owner", None, "bench")
    with app.test_request_context():
        shown = len(today.needs_you())
        made = 0
        while shown + made < waiting:
            kind = made % 3
            if kind == 2:
                belief = beliefs.create_belief({"title": f"Bench belief {made}", "status": "active",
                                                "next_test": "Run it again with three seeds."}, owner)
                beliefs.propose_update(belief, None, None, status="supported", confidence="LOW", text="It held.",
                                       evidence="One run.", reasoning="Bench.")
            else:
                experiment = experiments.create_experiment({"title": f"Bench waiting {made}"}, owner)
                demo.walk_to(experiment, "plan_pending" if kind == 0 else "awaiting_clarifications")
            made += 1
            db.session.commit()
        already = db.session.scalar(sa.select(sa.func.count(Pod.id)))
        running = [] if already else list(db.session.scalars(
            sa.select(Experiment).where(Experiment.status == "running").limit(20)))
        now = utcnow()
        for i, experiment in enumerate(running):
            db.session.add(Pod(experiment_id=experiment.id, account="team", name=f"bench-today-pod-{i}",
                               gpu_type_id="NVIDIA A100 80GB PCIe", status="running", cost_per_hr=1.89,
                               uptime_seconds=1800, last_started_at=now - timedelta(minutes=30),
                               progress_pct=10 + i, progress_message=f"epoch {i % 5}/5"))
        daily_log.write(daily_log.today() - timedelta(days=1), "scheduler")
        db.session.commit()
        if waiting and not db.session.scalar(sa.select(sa.func.count(IdeaCard.id))):
            _ideas_and_judged_runs(owner, now)
        events = db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id)))
        filler = db.session.scalars(sa.select(Experiment).limit(50)).all()
        for i in range(max(0, EVENTS - events)):
            event_log.record(filler[i % len(filler)], "note", Actor("system", None, "bench"), note=f"Bench note {i}.")
        db.session.commit()
        active = db.session.scalar(sa.select(sa.func.count(Experiment.id)).where(
            Experiment.status.not_in(registry.TERMINAL_STATUSES)))
        return {"waiting": len(today.needs_you()), "open_ideas": today.claude_ideas()[1],
                "events": db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id))),
                "experiments": db.session.scalar(sa.select(sa.func.count(Experiment.id))), "active": active}


def _ideas_and_judged_runs(owner, now) -> None:
    """What "Next" and "Spend" read beyond the queue: idea sessions with Claude's open cards
    (IDEA_SESSIONS × IDEA_CARDS) and this month's agent runs of every classification."""
    from datetime import timedelta

    from models import db
    from services.core import registry
    from services.planning import ideation
    from services.research import beliefs
    from services.workflow import runs

    for i in range(IDEA_SESSIONS):
        belief = beliefs.create_belief({"title": f"Bench idea source {i}", "status": "active"}, owner)
        session = ideation.start_session("belief", belief.id, owner)
        for j in range(IDEA_CARDS):
            ideation.add_card(session, f"Bench idea {i}.{j}", "Why: the answers.", origin="claude")
        db.session.commit()
    for i in range(JUDGED_RUNS):
        run = runs.create_run(kind="apply", agent="analyzer", request="Bench.", status="completed")
        run.cost_usd = 0.05 + (i % 7) * 0.1
        run.classification = registry.RUN_CLASSIFICATIONS[i % len(registry.RUN_CLASSIFICATIONS)]
        run.started_at = now - timedelta(hours=i % 200)
    db.session.commit()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--seconds", type=int, default=8)
    args = parser.parse_args()
    app = harness.fresh_database()
    harness.create_owner(app)
    from services.pipeline import demo
    with app.app_context():
        demo.load_scale(EXPERIMENTS, seed=EXPERIMENTS, events_per_experiment=2)
    results = {}
    with harness.Server() as server:
        client = harness.login(server.url)
        warmup = 4 * harness.WORKERS * harness.THREADS
        for label, waiting in (("as_loaded", 0), ("full", WAITING)):
            shape = seed(app, waiting)
            harness.vacuum_analyze()
            page = harness.sample(client, "/", args.requests, warmup=warmup)
            results[label] = {**shape, "today": page}
        version = re.search(r'data-version="([^"]+)"', client.get("/").text).group(1)
        poll_headers = {"HX-Request": "true", "If-None-Match": f'"{version}"'}
        poll = harness.sample(client, "/today/live", args.requests, headers=poll_headers, expect=304, warmup=warmup)
        hello_timing = harness.sample(client, "/bench/hello", args.requests)
        cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
        agent = client.headers["User-Agent"]  # the same client identifier as the login's
        client.close()
        hello = harness.wrk(f"{server.url}/bench/hello", seconds=args.seconds)
        polled = harness.wrk(f"{server.url}/today/live", seconds=args.seconds,
                             headers={"Cookie": cookie, "User-Agent": agent, **poll_headers})
    full = results["full"]["today"]
    constant = results["as_loaded"]["today"]["queries"] == full["queries"]
    ratio = round(polled["requests_per_second"] / hello["requests_per_second"], 3)
    fast = full["server_p50_ms"] < BUDGET_MS
    rate_ok = ratio >= BUDGET_RATIO and polled["non_2xx"] == 0
    harness.report({"bench": "today", "server": harness.server_label(), "database": "postgresql",
                    "machine": harness.machine(), "wrk": "2 threads, 8 connections", "shapes": results,
                    "poll_server": poll, "hello_server": hello_timing, "poll_wrk": polled, "hello_wrk": hello,
                    "rate_ratio": ratio, "budget_p50_ms": BUDGET_MS, "budget_ratio": BUDGET_RATIO,
                    "queries_constant": constant, "meets_budget": fast and constant and rate_ok}, [
        (f"Today at {results['full']['experiments']:,} ({results['full']['active']} active), "
         f"{results['full']['waiting']} waiting, {results['full']['events']:,} events p50 / p95 (CPU p50)",
         f"{full['server_p50_ms']} / {full['server_p95_ms']} ms ({full['server_cpu_p50_ms']})",
         f"p50 < {BUDGET_MS} ms", fast),
        ("Today SQL queries, {} vs {} waiting".format(results["as_loaded"]["waiting"], results["full"]["waiting"]),
         f"{results['as_loaded']['today']['queries']} vs {full['queries']}", "same", constant),
        ("poll (unchanged, 304) server p50 / queries", f"{poll['server_p50_ms']} ms / {poll['queries']}",
         "(no budget)", None),
        ("poll requests/s", f"{polled['requests_per_second']:,.0f}", "≥ half of hello", rate_ok),
        ("hello requests/s", f"{hello['requests_per_second']:,.0f}", f"ratio {ratio:.2f}", None),
    ])


if __name__ == "__main__":
    main()
