"""Progress ingest throughput (ARCHITECTURE §5): POST /api/progress under wrk on loopback,
2 threads, 8 connections, many distinct pods, against the web server as deployed (granian, serve.py) on PostgreSQL — and, in the
same run on the same PostgreSQL, MLflow's `log-metric` under the same load
(bench_mlflow_log_metric.py), since absolute rates on the shared machine follow its load.

Budget: at least 500 posts/s sustained on the 2-core machine; goal 1,000 posts/s
and at least 8× MLflow's log-metric in the same run.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_progress_ingest.py [--seconds 15] [--pods 200] [--workers 3] [--threads 2]
     [--mlflow-workers 5] [--no-mlflow]
Needs: PostgreSQL (BENCH_DATABASE_URL, default the local `sagan_bench` database, dropped and
created anew), Redis (BENCH_REDIS_URL, flushed), and `wrk` (Debian package wrk). It serves the
plain product app (`serve:wsgi_app`), not the bench app with its timing middleware.
"""
from __future__ import annotations

import argparse
import os
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
    from services.core.actors import Actor
    from services.dispatch import tokens as pod_tokens
    from services.workflow import experiments

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


GOAL_POSTS_PER_SECOND = 1000
GOAL_OVER_MLFLOW = 8


def run_sagan(args) -> dict:
    """wrk against the web server as deployed (serve.py) serving the product app; wrk's figures."""
    tokens = prepare(args.pods)
    workdir = Path(tempfile.mkdtemp(prefix="sagan-bench-"))
    (workdir / "tokens").write_text("\n".join(tokens) + "\n")
    (workdir / "post.lua").write_text(LUA)
    port = harness.free_port()
    url = f"http://127.0.0.1:{port}"
    env = {"TOKENS_FILE": str(workdir / "tokens")}
    server = subprocess.Popen(
        harness.web_server(port, args.workers, args.threads, target="serve:wsgi_app"),
        cwd=ROOT, env=harness.server_env(workdir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True)
    try:
        for _ in range(harness.START_TIMEOUT * 5):
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        harness.wrk(url, seconds=3, script=str(workdir / "post.lua"), env=env)  # warm-up
        return harness.wrk_with_cpu(server.pid, harness.DB_NAME, url, seconds=args.seconds,
                                    script=str(workdir / "post.lua"), env=env)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)


def run_mlflow(args) -> dict:
    """MLflow's log-metric under the same wrk load, on the same PostgreSQL, right after."""
    import bench_mlflow_log_metric as mlflow_bench
    try:
        with mlflow_bench.mlflow_server(args.mlflow_workers, args.runs) as (url, _runs, workdir, pid, database):
            (workdir / "log.lua").write_text(mlflow_bench.LUA)
            env = {"RUNS_FILE": str(workdir / "runs")}
            harness.wrk(url, seconds=3, script=str(workdir / "log.lua"), env=env)  # warm-up
            result = harness.wrk_with_cpu(pid, database, url, seconds=args.seconds,
                                          script=str(workdir / "log.lua"), env=env)
    except SystemExit:  # mlflow_bench.skip() printed why: keep Sagan's figure
        return {"skipped": True}
    except Exception as exc:  # noqa: BLE001 - MLflow is context: its failure must not lose Sagan's figure
        return {"skipped": True, "reason": f"{exc.__class__.__name__}: {exc}"[:300]}
    result["mlflow"] = mlflow_bench.MLFLOW_VERSION
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--runs", type=int, default=20, help="MLflow runs logged to")
    harness.add_server_arguments(parser)
    parser.add_argument("--no-mlflow", action="store_true")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk); cannot measure ingest throughput.")
    sagan = run_sagan(args)
    mlflow = {"skipped": True, "reason": "--no-mlflow"} if args.no_mlflow else run_mlflow(args)
    rate = sagan["requests_per_second"]
    accepted = max(0.0, rate - sagan["non_2xx"] / args.seconds)
    mlflow_rate = mlflow.get("requests_per_second")
    ratio = round(accepted / mlflow_rate, 2) if mlflow_rate else None
    goal = accepted >= GOAL_POSTS_PER_SECOND and (ratio is None or ratio >= GOAL_OVER_MLFLOW)
    # The same comparison by cost: CPU per request, servers and their database backends.
    cpu_ratio = (round(mlflow["server_cpu_ms_per_request"] / sagan["server_cpu_ms_per_request"], 2)
                 if mlflow.get("server_cpu_ms_per_request") and sagan.get("server_cpu_ms_per_request") else None)
    harness.report({"bench": "progress_ingest", "server": harness.server_label(args.workers, args.threads), "database": "postgresql",
                    "machine": harness.machine(), "wrk": "2 threads, 8 connections", "seconds": args.seconds,
                    "pods": args.pods, "posts_per_second": round(rate, 1), "non_2xx": sagan["non_2xx"],
                    "latency_p50": sagan["latency_p50"], "latency_p99": sagan["latency_p99"],
                    "server_cpu_ms_per_request": sagan["server_cpu_ms_per_request"],
                    "server_process_cpu_ms_per_request": sagan["server_process_cpu_ms_per_request"],
                    "database_cpu_ms_per_request": sagan["database_cpu_ms_per_request"],
                    "mlflow_log_metric": mlflow, "sagan_over_mlflow": ratio, "mlflow_cpu_over_sagan_cpu": cpu_ratio,
                    "budget_posts_per_second": 500, "goal_posts_per_second": GOAL_POSTS_PER_SECOND,
                    "goal_over_mlflow": GOAL_OVER_MLFLOW, "meets_budget": accepted >= 500 and sagan["non_2xx"] == 0,
                    "meets_goal": goal and sagan["non_2xx"] == 0}, [
        ("Sagan progress posts/s", f"{rate:,.1f}", f"≥ 500 budget, ≥ {GOAL_POSTS_PER_SECOND:,} goal",
         accepted >= GOAL_POSTS_PER_SECOND),
        ("  non-2xx, p50 / p99", f"{sagan['non_2xx']}", f"{sagan['latency_p50']} / {sagan['latency_p99']}", None),
        ("MLflow log-metric requests/s", f"{mlflow_rate:,.1f}" if mlflow_rate else "skipped", "(same run)", None),
        ("Sagan ÷ MLflow", f"{ratio}×" if ratio else "—", f"≥ {GOAL_OVER_MLFLOW}×",
         None if ratio is None else ratio >= GOAL_OVER_MLFLOW),
        ("server CPU ms per request, Sagan / MLflow",
         f"{sagan['server_cpu_ms_per_request']} / {mlflow.get('server_cpu_ms_per_request', '—')}",
         f"MLflow costs {cpu_ratio}× more" if cpu_ratio else "", None),
        ("  of which PostgreSQL, Sagan / MLflow",
         f"{sagan['database_cpu_ms_per_request']} / {mlflow.get('database_cpu_ms_per_request', '—')}", "", None),
    ])


if __name__ == "__main__":
    main()
