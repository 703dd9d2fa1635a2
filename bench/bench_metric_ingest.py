"""Metric ingest throughput: POST /api/metrics with batches of 1,000 points (10 metrics ×
100 steps) under wrk on loopback, 2 threads, 8 connections, many pods, against the web server as deployed (granian, serve.py) on
PostgreSQL — and, in the same run on the same PostgreSQL, MLflow's
`/api/2.0/mlflow/runs/log-batch` with the same 1,000 points a request (MLflow's own cap).

Target: at least 50,000 points/s on the 2-core machine. MLflow is context, run from its own
venv (bench_mlflow_log_metric.py); when it cannot be installed its half says "skipped".
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_metric_ingest.py [--seconds 15] [--pods 50] [--workers 3] [--threads 2] [--no-mlflow]
Needs: PostgreSQL (BENCH_DATABASE_URL, dropped and created anew), Redis (BENCH_REDIS_URL,
flushed), and `wrk`. It serves the plain product app (`serve:wsgi_app`).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import harness
from bench_progress_ingest import prepare

TARGET_POINTS_PER_SECOND = 50_000
POINTS_PER_REQUEST = 1_000

# Both scripts build each request's 1,000 points afresh (new steps, new timestamps), so
# neither server sees a repeated body; the cost of building them is wrk's, not the servers'.
COMMON_LUA = r"""
-- Names MLflow accepts too (it refuses brackets and "%", so no units here).
local names = {"loss", "val/loss", "accuracy", "val/accuracy", "lr", "grad_norm",
               "tokens_per_s", "step_time", "gpu_mem", "perplexity"}
local counter = 0
local thread_id = 0
local threads = 0
-- setup() runs in the main Lua state and sets a global in each thread's own state; that
-- global must not share a name with a local of this chunk, or init() would read the local
-- (every thread 0, so the threads would post the same seqs). The clock keeps the warm-up's
-- seqs and steps apart from the measured run's.
function setup(thread) thread:set("wrk_thread_number", threads); threads = threads + 1 end
local run_base = 0
function init(args) thread_id = wrk_thread_number; run_base = os.time() * 1000000 end
"""

SAGAN_LUA = COMMON_LUA + r"""
local tokens = {}
for line in io.lines(os.getenv("TOKENS_FILE")) do tokens[#tokens + 1] = line end
request = function()
  counter = counter + 1
  local token = tokens[(counter % #tokens) + 1]
  local seq = run_base + counter * 10 + thread_id
  local base = (counter * 10 + thread_id) * 100
  local parts = {}
  for i = 0, 999 do
    local n = math.floor(i / 100)
    parts[i + 1] = string.format('{"step":%d,"name":"%s","value":%.6f}', base + i % 100, names[n + 1], 1 / (1 + i))
  end
  local body = string.format('{"seq":%d,"points":[%s]}', seq, table.concat(parts, ","))
  return wrk.format("POST", "/api/metrics", {["Authorization"] = "Bearer " .. token,
                                             ["Content-Type"] = "application/json"}, body)
end
"""

MLFLOW_LUA = COMMON_LUA + r"""
local runs = {}
for line in io.lines(os.getenv("RUNS_FILE")) do runs[#runs + 1] = line end
request = function()
  counter = counter + 1
  local run = runs[(counter % #runs) + 1]
  local base = ((counter * 10 + thread_id) * 100) % 100000000
  local parts = {}
  for i = 0, 999 do
    local n = math.floor(i / 100)
    parts[i + 1] = string.format('{"key":"%s","value":%.6f,"timestamp":%d,"step":%d}', names[n + 1], 1 / (1 + i),
                                 run_base + base + i % 100, base + i % 100)
  end
  local body = string.format('{"run_id":"%s","metrics":[%s]}', run, table.concat(parts, ","))
  return wrk.format("POST", "/api/2.0/mlflow/runs/log-batch", {["Content-Type"] = "application/json"}, body)
end
"""


def run_sagan(args) -> dict:
    tokens = prepare(args.pods)
    workdir = Path(tempfile.mkdtemp(prefix="sagan-bench-"))
    (workdir / "tokens").write_text("\n".join(tokens) + "\n")
    (workdir / "post.lua").write_text(SAGAN_LUA)
    port = harness.free_port()
    server = subprocess.Popen(
        harness.web_server(port, args.workers, args.threads, target="serve:wsgi_app"),
        cwd=harness.ROOT, env=harness.server_env(workdir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    env = {"TOKENS_FILE": str(workdir / "tokens")}
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        harness.wrk(url, seconds=3, script=str(workdir / "post.lua"), env=env)  # warm-up
        result = harness.wrk_with_cpu(server.pid, harness.DB_NAME, url, seconds=args.seconds,
                                      script=str(workdir / "post.lua"), env=env)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)
    result["points_per_second"] = _stored_rate(result, args.seconds)
    result["points_stored"] = _stored_points()
    return result


def _stored_rate(result: dict, seconds: int) -> int:
    """Points per second of the requests that succeeded (a refused batch stored nothing)."""
    accepted = max(0.0, result["requests_per_second"] - result["non_2xx"] / seconds)
    return round(accepted * POINTS_PER_REQUEST)


def _stored_points() -> int:
    """What the database holds after warm-up and run: the points really went in."""
    import sqlalchemy as sa
    engine = sa.create_engine(harness.DB_URL)
    with engine.connect() as conn:
        count = conn.execute(sa.text("SELECT coalesce(sum(cardinality(steps)), 0) FROM metric_chunks")).scalar()
    engine.dispose()
    return int(count)


def run_mlflow(args) -> dict:
    import bench_mlflow_log_metric as mlflow_bench
    try:
        with mlflow_bench.mlflow_server(args.mlflow_workers, args.pods) as (url, _runs, workdir, pid, database):
            (workdir / "batch.lua").write_text(MLFLOW_LUA)
            env = {"RUNS_FILE": str(workdir / "runs")}
            harness.wrk(url, seconds=3, script=str(workdir / "batch.lua"), env=env)  # warm-up
            result = harness.wrk_with_cpu(pid, database, url, seconds=args.seconds,
                                          script=str(workdir / "batch.lua"), env=env)
    except SystemExit:  # mlflow_bench.skip() printed why and exits: keep Sagan's figure
        return {"skipped": True}
    except Exception as exc:  # noqa: BLE001 - MLflow is context: its failure must not lose Sagan's figure
        return {"skipped": True, "reason": f"{exc.__class__.__name__}: {exc}"[:300]}
    result["points_per_second"] = _stored_rate(result, args.seconds)
    result["mlflow"] = mlflow_bench.MLFLOW_VERSION
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--pods", type=int, default=50, help="pods posting (MLflow: as many runs)")
    harness.add_server_arguments(parser)
    parser.add_argument("--no-mlflow", action="store_true")
    args = parser.parse_args()
    sagan = run_sagan(args)
    mlflow = {"skipped": True, "reason": "--no-mlflow"} if args.no_mlflow else run_mlflow(args)
    ok = sagan["points_per_second"] >= TARGET_POINTS_PER_SECOND and sagan["non_2xx"] == 0
    ratio = (round(sagan["points_per_second"] / mlflow["points_per_second"], 2)
             if mlflow.get("points_per_second") else None)
    # The same comparison by cost: CPU per 1,000-point request, servers and their database backends.
    cpu_ratio = (round(mlflow["server_cpu_ms_per_request"] / sagan["server_cpu_ms_per_request"], 2)
                 if mlflow.get("server_cpu_ms_per_request") and sagan.get("server_cpu_ms_per_request") else None)
    harness.report({"bench": "metric_ingest", "server": harness.server_label(args.workers, args.threads), "database": "postgresql",
                    "machine": harness.machine(), "wrk": "2 threads, 8 connections", "seconds": args.seconds,
                    "pods": args.pods, "points_per_request": POINTS_PER_REQUEST, "sagan": sagan,
                    "mlflow_log_batch": mlflow, "sagan_over_mlflow": ratio, "mlflow_cpu_over_sagan_cpu": cpu_ratio,
                    "target_points_per_second": TARGET_POINTS_PER_SECOND, "meets_budget": ok}, [
        ("Sagan metric ingest points/s", f"{sagan['points_per_second']:,}", f"≥ {TARGET_POINTS_PER_SECOND:,}", ok),
        ("  requests/s (1,000 points each)", f"{sagan['requests_per_second']:,.1f}",
         f"non-2xx {sagan['non_2xx']}", None),
        ("MLflow log-batch points/s", f"{mlflow['points_per_second']:,}" if ratio else "skipped", "(same run)", None),
        ("Sagan ÷ MLflow", f"{ratio}×" if ratio else "—", "", None),
        ("server CPU ms per batch, Sagan / MLflow",
         f"{sagan['server_cpu_ms_per_request']} / {mlflow.get('server_cpu_ms_per_request', '—')}",
         f"MLflow costs {cpu_ratio}× more" if cpu_ratio else "", None),
    ])


if __name__ == "__main__":
    main()
