"""CPU cost of one ingest request, in process: Python (this process, through Flask's test
client) and PostgreSQL (the backends of the bench database), per request.

Not a benchmark of `make bench` (no server, no wrk): a measurement that the load other
engineers put on the shared machine hardly moves, for comparing two versions of the ingest
path (run it from each checkout against the same PostgreSQL). Requests are sequential, so
one pooled connection serves them all.

Run: .venv/bin/python bench/profile_ingest_cpu.py progress|metrics [--requests 300]
Needs: PostgreSQL (BENCH_DATABASE_URL, dropped and created anew), Redis (BENCH_REDIS_URL).
"""
from __future__ import annotations

import argparse
import json
import os
import time

import psutil
import sqlalchemy as sa

import harness
from bench_progress_ingest import prepare

METRIC_NAMES = ["loss", "val/loss", "accuracy", "val/accuracy", "lr", "grad_norm", "tokens_per_s", "step_time",
                "gpu_mem", "perplexity"]
WARMUP = 30


def body(kind: str, i: int) -> tuple[str, str]:
    """The i-th request: a progress post, or a batch of 1,000 points (10 metrics × 100 steps)."""
    if kind == "progress":
        return "/api/progress", json.dumps({"progressPct": i % 100, "message": f"step {i}", "seq": i,
                                            "metrics": {"loss": 0.5}})
    points = [{"step": i * 100 + k % 100, "name": METRIC_NAMES[k // 100], "value": 1 / (1 + k)} for k in range(1000)]
    return "/api/metrics", json.dumps({"seq": i, "points": points})


def backends_cpu_seconds() -> tuple[float, list[int]]:
    engine = sa.create_engine(sa.engine.make_url(harness.DB_URL).set(database="postgres"))
    with engine.connect() as conn:
        pids = sorted(conn.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :name"),
                                   {"name": harness.DB_NAME}).scalars())
    engine.dispose()
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total, pids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["progress", "metrics"])
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    tokens = prepare(50)
    os.environ.setdefault("SECRET_KEY", "bench")
    from app import create_app
    from config import Config

    class BenchConfig(Config):
        SQLALCHEMY_DATABASE_URI = harness.DB_URL
        REDIS_URL = harness.REDIS_URL

    app = create_app(BenchConfig)
    client = app.test_client()
    bodies = [body(args.kind, i) for i in range(WARMUP + args.requests)]

    def post(indexes) -> None:
        for i in indexes:
            path, data = bodies[i]
            answer = client.post(path, data=data, headers={"Authorization": f"Bearer {tokens[i % len(tokens)]}",
                                                           "Content-Type": "application/json"})
            if answer.status_code != 200:
                raise SystemExit(f"{path} answered {answer.status_code}: {answer.get_data(as_text=True)[:300]}")

    post(range(WARMUP))
    database_before, pids_before = backends_cpu_seconds()
    python_before, wall_before = time.process_time(), time.perf_counter()
    post(range(WARMUP, WARMUP + args.requests))
    python_used, wall = time.process_time() - python_before, time.perf_counter() - wall_before
    database_after, pids_after = backends_cpu_seconds()
    if pids_after != pids_before:
        raise SystemExit("the database connections changed during the run; measure again")
    per = 1000 / args.requests
    harness.report({"bench": "ingest_cpu", "kind": args.kind, "requests": args.requests,
                    "python_cpu_ms": round(python_used * per, 3),
                    "postgres_cpu_ms": round((database_after - database_before) * per, 3),
                    "wall_ms": round(wall * per, 3), "machine": harness.machine()}, [
        (f"{args.kind}: Python CPU per request", f"{python_used * per:.2f} ms", "(test client included)", None),
        (f"{args.kind}: PostgreSQL CPU per request", f"{(database_after - database_before) * per:.2f} ms", "", None),
    ])


if __name__ == "__main__":
    main()
