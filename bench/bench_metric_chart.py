"""Chart data endpoint: `GET /experiments/<n>/metrics/data?name=loss` for an experiment
whose runs each posted 100,000 points of that metric (beside other metrics), the web server on
PostgreSQL. The server downsamples each series to at most 1,000 buckets (min, max and mean
per bucket) in the database, from the series' chunks (one per 100 steps, as batches of
10 metrics × 100 steps store them).

Budget: server time under 100 ms at p50 for 100,000 points per series (one run), and the
query count does not grow with the points. Also measured: four runs overlaid (400,000
points in all) and the 304 a polling chart gets when nothing changed.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_metric_chart.py [--points 100000] [--requests 30]
"""
from __future__ import annotations

import argparse
import uuid

import harness

BUDGET_MS = 100


def seed(app, points: int, pods: int, title: str) -> int:
    """An experiment with `pods` running pods, each with `points` points of "loss" and 1,000
    of "accuracy [%]", written as the ingest writes them (batches of 1,000, one summary row
    per series); returns the experiment number."""
    import sqlalchemy as sa

    from models import AgentRun, Pod, db
    from services.core.actors import Actor
    from services.workflow import experiments

    with app.app_context():
        experiment = experiments.create_experiment({"title": title}, Actor("owner"))
        db.session.flush()
        for index in range(pods):
            run = AgentRun(id=uuid.uuid4(), kind="apply", agent="bench", request="", scope_id=experiment.id,
                           status="waiting")
            db.session.add(run)
            db.session.flush()
            pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                      name=f"sagan-chart-{experiment.number}-{index}", run_index=index, status="running")
            db.session.add(pod)
            db.session.flush()
            for name, count in (("loss", points), ("accuracy [%]", 1000)):
                # One chunk per 100 steps, as batches of 10 metrics × 100 steps store them.
                series_id = db.session.execute(sa.text("""
                    INSERT INTO metric_series (pod_id, name, experiment_id, points, first_step, last_step, last_value,
                                               min_value, max_value, updated_at)
                    VALUES (:pod, :name, :experiment, :count, 0, :count - 1, 0, 0, 0, now()) RETURNING id"""),
                    {"pod": pod.id, "experiment": experiment.id, "name": name, "count": count}).scalar()
                db.session.execute(sa.text("""
                    INSERT INTO metric_chunks (series_id, seq, steps, point_values, wall_times)
                    SELECT :series, s / 100, array_agg(s ORDER BY s),
                           array_agg(2.0 / (1 + s / 1000.0) + random() * 0.05 ORDER BY s), array_agg(1.7e9 + s ORDER BY s)
                    FROM generate_series(0, :count - 1) AS s GROUP BY s / 100"""),
                    {"series": series_id, "count": count})
                db.session.execute(sa.text("""
                    UPDATE metric_series SET last_value = t.last_value, min_value = t.low, max_value = t.high
                    FROM (SELECT (array_agg(u.value ORDER BY u.step DESC))[1] AS last_value, min(u.value) AS low,
                                 max(u.value) AS high
                          FROM metric_chunks c, unnest(c.steps, c.point_values) AS u(step, value)
                          WHERE c.series_id = :series) AS t
                    WHERE id = :series"""), {"series": series_id})
            db.session.execute(sa.text("""
                INSERT INTO metric_batches (pod_id, seq, points, created_at)
                SELECT :pod, c.seq, sum(cardinality(c.steps)), now()
                FROM metric_chunks c JOIN metric_series s ON s.id = c.series_id WHERE s.pod_id = :pod GROUP BY c.seq"""),
                {"pod": pod.id})
        db.session.commit()
        return experiment.number


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    app = harness.fresh_database()
    harness.create_owner(app)
    one = seed(app, args.points, 1, "Chart bench, one run")
    four = seed(app, args.points, 4, "Chart bench, four runs")
    small = seed(app, 1000, 1, "Chart bench, small")
    harness.vacuum_analyze("metric_chunks", "metric_series")
    with harness.Server() as server:
        client = harness.login(server.url)
        single = harness.sample(client, f"/experiments/{one}/metrics/data?name=loss", args.requests)
        overlaid = harness.sample(client, f"/experiments/{four}/metrics/data?name=loss", args.requests)
        few = harness.sample(client, f"/experiments/{small}/metrics/data?name=loss", args.requests)
        etag = client.get(f"/experiments/{one}/metrics/data?name=loss").headers["ETag"]
        unchanged = harness.sample(client, f"/experiments/{one}/metrics/data?name=loss", args.requests,
                                   headers={"If-None-Match": etag}, expect=304)
        body = client.get(f"/experiments/{one}/metrics/data?name=loss").json()
        client.close()
    buckets = len(body["series"][0]["x"])
    constant = single["queries"] == few["queries"]
    ok = single["server_p50_ms"] < BUDGET_MS
    harness.report({"bench": "metric_chart", "server": harness.server_label(), "database": "postgresql",
                    "machine": harness.machine(), "points_per_series": args.points, "buckets_returned": buckets,
                    "one_series": single, "four_series": overlaid, "one_series_1000_points": few,
                    "unchanged_304": unchanged, "budget_ms": BUDGET_MS, "queries_constant": constant,
                    "meets_budget": ok and constant}, [
        (f"chart data, {args.points:,} points, p50 / p95", f"{single['server_p50_ms']} / {single['server_p95_ms']} ms",
         f"< {BUDGET_MS} ms", ok),
        (f"four runs overlaid ({4 * args.points:,} points) p50", f"{overlaid['server_p50_ms']} ms", "(no budget)", None),
        ("1,000 points p50", f"{few['server_p50_ms']} ms", "(for scale)", None),
        ("unchanged (304) p50", f"{unchanged['server_p50_ms']} ms", "(a polling chart)", None),
        ("queries (100,000 vs 1,000 points)", f"{single['queries']} vs {few['queries']}", "constant", constant),
        ("buckets returned per series", str(buckets), "≤ 1,000", None),
    ])


if __name__ == "__main__":
    main()
