"""Idle and slow clients (docs/performance.md, "Idle browsers and slow uploads"): how long a
request on a new connection takes while fifty keep-alive connections sit idle (eight
browsers' worth) and thirty request bodies are held half-sent — side by side with the same
requests to the same server with nothing held, in the same run.

Budget: every request of the held run under 100 ms (p95; the worst is reported too).
Before serve.py's connection limit was raised, the seventh idle connection made new requests
wait 20-30 s; half-sent bodies stopped the server outright.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_idle_connections.py [--requests 100] [--idle 50] [--half-sent 30]
"""
from __future__ import annotations

import argparse
import sys
import time

import harness

sys.path.insert(0, str(harness.ROOT))
from tests.slow_clients import HeldConnections, timed_request  # noqa: E402 - the project's own client helpers

BUDGET_MS = 100.0
PATHS = ("/healthz", "/login")


def measure(port: int, requests: int) -> dict:
    """`requests` GETs, each on a new connection, alternating PATHS: wall milliseconds."""
    timings = []
    for index in range(requests):
        status, seconds, _headers, _body = timed_request(port, "GET", PATHS[index % len(PATHS)])
        if status != 200:
            raise SystemExit(f"GET {PATHS[index % len(PATHS)]} answered {status}")
        timings.append(seconds * 1000)
    return {"requests": requests, "p50_ms": harness.pct(timings, 50), "p95_ms": harness.pct(timings, 95),
            "max_ms": round(max(timings), 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--idle", type=int, default=50)
    parser.add_argument("--half-sent", type=int, default=30)
    args = parser.parse_args()
    harness.fresh_database()
    with harness.Server() as server:
        port = server.port
        measure(port, 10)  # warm: every worker's first requests
        quiet = measure(port, args.requests)
        with HeldConnections(port) as held:
            held.idle(args.idle, "/login")
            held.half_sent(args.half_sent, "POST", "/login",
                           headers={"Content-Type": "application/x-www-form-urlencoded"}, source="127.0.0.2")
            time.sleep(0.5)
            loaded = measure(port, args.requests)
    meets = loaded["p95_ms"] < BUDGET_MS
    harness.report({"bench": "idle_connections", "server": harness.server_label(), "database": "postgresql",
                    "machine": harness.machine(), "idle_connections": args.idle, "half_sent_bodies": args.half_sent,
                    "held": loaded, "nothing_held": quiet, "budget_ms": BUDGET_MS, "meets_budget": meets}, [
        (f"new request, {args.idle} idle + {args.half_sent} half-sent held, p50 / p95 / max",
         f"{loaded['p50_ms']} / {loaded['p95_ms']} / {loaded['max_ms']} ms", f"p95 < {BUDGET_MS:g} ms", meets),
        ("the same with nothing held (yardstick)", f"{quiet['p50_ms']} / {quiet['p95_ms']} / {quiet['max_ms']} ms",
         "(same run)", None),
    ])


if __name__ == "__main__":
    main()
