"""Progress ingest throughput (ARCHITECTURE §5): POST /api/progress under wrk on loopback,
2 threads, 8 connections, many distinct pods, against gunicorn on PostgreSQL.

Budget: at least 500 posts/s sustained on the 2-core machine; goal 1,000.
Prints one JSON document on stdout and a short line on stderr.

Run: .venv/bin/python bench/bench_progress_ingest.py [--seconds 15] [--pods 200] [--workers 5]
Needs: PostgreSQL (BENCH_DATABASE_URL, default the local `sagan_bench` database, dropped and
created anew), Redis (BENCH_REDIS_URL, flushed), and `wrk` (Debian package wrk). It serves the
plain product app (`app:create_app()`), not the bench app with its timing middleware.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import harness

ROOT = harness.ROOT

LUA = r"""
-- Each request posts for the next pod in turn, with that pod's next seq (no duplicates).
local tokens = {}
for line in io.lines(os.getenv("TOKENS_FILE")) do tokens[#tokens + 1] = line end
local counter = 0
local thread_id = 0
local threads = 0
-- setup() sets a global in each thread's state: it must not share its name with a local of
-- this chunk (init() would read the local, every thread 0, and half the posts would be
-- duplicates, the cheap path). The clock keeps the warm-up's seqs apart from the run's.
function setup(thread) thread:set("wrk_thread_number", threads); threads = threads + 1 end
local run_base = 0
function init(args) thread_id = wrk_thread_number; run_base = os.time() * 1000000 end
request = function()
  counter = counter + 1
  local token = tokens[(counter % #tokens) + 1]
  local seq = run_base + counter * 10 + thread_id
  local body = string.format('{"progressPct": %d, "message": "step %d", "seq": %d, "metrics": {"loss": 0.5}}',
                             counter % 100, counter, seq)
  return wrk.format("POST", "/api/progress", {["Authorization"] = "Bearer " .. token,
                                              ["Content-Type"] = "application/json"}, body)
end
"""


def prepare(pods: int) -> list[str]:
    """A fresh schema (harness.fresh_database) and `pods` running pods with tokens; returns the tokens."""
    from models import AgentRun, Pod, db
    from services import experiments
    from services.actors import Actor
    from services.dispatch import tokens as pod_tokens

    app = harness.fresh_database()
    secrets_ = []
    with app.app_context():
        experiment = experiments.create_experiment({"title": "Ingest bench"}, Actor("owner"))
        db.session.flush()
        bench_runs = [AgentRun(id=uuid.uuid4(), kind="apply", agent="bench", request="", scope_id=experiment.id,
                               status="waiting") for _ in range(pods)]
        db.session.add_all(bench_runs)
        db.session.flush()  # runs first: pods reference them
        for i, run in enumerate(bench_runs):
            secret, digest = pod_tokens.new_token()
            db.session.add(Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                               name=f"sagan-bench-{i}", status="running", progress_token_hash=digest))
            secrets_.append(secret)
        db.session.commit()
        db.engine.dispose()
    return secrets_


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--workers", type=int, default=5, help="gunicorn workers (2 × cores + 1)")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk); cannot measure ingest throughput.")
    tokens = prepare(args.pods)
    workdir = Path(tempfile.mkdtemp(prefix="sagan-bench-"))
    (workdir / "tokens").write_text("\n".join(tokens) + "\n")
    (workdir / "post.lua").write_text(LUA)
    port = harness.free_port()
    env = harness.server_env(workdir)
    server = subprocess.Popen(
        [harness.GUNICORN, "-w", str(args.workers), "-b", f"127.0.0.1:{port}",
         "--no-control-socket", "--log-level", "warning", "app:create_app()"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        subprocess.run(["wrk", "-t2", "-c8", "-d3s", "-s", str(workdir / "post.lua"), f"http://127.0.0.1:{port}"],
                       env={**os.environ, "TOKENS_FILE": str(workdir / "tokens")}, capture_output=True)  # warm-up
        out = subprocess.run(["wrk", "-t2", "-c8", f"-d{args.seconds}s", "--latency", "-s",
                              str(workdir / "post.lua"), f"http://127.0.0.1:{port}"],
                             env={**os.environ, "TOKENS_FILE": str(workdir / "tokens")},
                             capture_output=True, text=True, check=True).stdout
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    p50 = re.search(r"50%\s+([\d.]+\w+)", out)
    p99 = re.search(r"99%\s+([\d.]+\w+)", out)
    result = {"bench": "progress_ingest", "server": f"gunicorn -w {args.workers}", "database": "postgresql",
              "machine": {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]},
              "wrk": "2 threads, 8 connections", "seconds": args.seconds, "pods": args.pods,
              "posts_per_second": round(rate, 1), "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
              "latency_p50": p50.group(1) if p50 else None, "latency_p99": p99.group(1) if p99 else None,
              "budget_posts_per_second": 500, "goal_posts_per_second": 1000, "meets_budget": rate >= 500}
    print(json.dumps(result))
    print(f"progress ingest: {rate:.0f} posts/s ({result['non_2xx']} non-2xx), p50 {result['latency_p50']}, "
          f"p99 {result['latency_p99']} — budget 500, goal 1000", file=sys.stderr)


if __name__ == "__main__":
    main()
