"""For scale (ARCHITECTURE §5): MLflow's `log-metric` endpoint on the same PostgreSQL, under
the same wrk load as bench_progress_ingest.py (loopback, 2 threads, 8 connections, many
runs), next to which Sagan's progress ingest figure reads.

MLflow is never installed into the project's venv: it lives in its own venv under /tmp
(MLFLOW_VENV, default /tmp/sagan-bench-mlflow), created with pip on first use. When it
cannot be installed or started (no registry access, a failed build), this prints a JSON
document saying so ({"skipped": true, "reason": …}) and exits 0: the comparison is
context, not a budget.

Run: .venv/bin/python bench/bench_mlflow_log_metric.py [--seconds 15] [--runs 20] [--workers 5]
"""
from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import harness

MLFLOW_VERSION = "3.17.2"
VENV = Path(os.environ.get("MLFLOW_VENV", "/tmp/sagan-bench-mlflow"))
INSTALL_TIMEOUT = 600
# Five MLflow workers importing mlflow on a loaded 2-core machine took minutes (2026-12-01,
# load average 15): the first /health and the first requests wait that long.
START_TIMEOUT = int(os.environ.get("MLFLOW_START_TIMEOUT", "300"))

LUA = r"""
-- Each request logs the next step of the next run in turn.
local runs = {}
for line in io.lines(os.getenv("RUNS_FILE")) do runs[#runs + 1] = line end
local counter = 0
request = function()
  counter = counter + 1
  local run = runs[(counter % #runs) + 1]
  local body = string.format('{"run_id": "%s", "key": "loss", "value": 0.5, "timestamp": %d, "step": %d}',
                             run, 1700000000000 + counter, counter)
  return wrk.format("POST", "/api/2.0/mlflow/runs/log-metric", {["Content-Type"] = "application/json"}, body)
end
"""


def skip(reason: str) -> None:
    harness.report({"bench": "mlflow_log_metric", "skipped": True, "reason": reason},
                   [("MLflow log-metric", "skipped", reason[:60], None)])
    sys.exit(0)


def ensure_mlflow() -> Path:
    """The mlflow executable of the private venv, installing it there when missing."""
    mlflow = VENV / "bin" / "mlflow"
    if mlflow.exists():
        return mlflow
    print(f"  (installing MLflow {MLFLOW_VERSION} into {VENV}; once)", file=sys.stderr, flush=True)
    try:
        subprocess.run(["python3", "-m", "venv", str(VENV)], check=True, capture_output=True, timeout=120)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        f"mlflow=={MLFLOW_VERSION}", "psycopg2-binary"], check=True, capture_output=True,
                       text=True, timeout=INSTALL_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or str(exc)
        shutil.rmtree(VENV, ignore_errors=True)
        skip(f"MLflow {MLFLOW_VERSION} could not be installed: {str(detail).strip().splitlines()[-1][:300]}")
    return mlflow


def post(url: str, body: dict, tries: int = 10) -> dict:
    """One JSON POST; retried a few times, since a busy MLflow's workers may still be
    starting when /health first answers (a dropped connection or a timeout, not a refusal)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    for attempt in range(1, tries + 1):
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError:
            raise  # an answer: the caller decides
        except (ConnectionError, TimeoutError, http.client.HTTPException, urllib.error.URLError):
            if attempt == tries:
                raise
            time.sleep(attempt)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def mlflow_server(workers: int, runs: int):
    """An MLflow tracking server on its own fresh database beside the bench's (same
    PostgreSQL), with one experiment and `runs` runs; yields (url, run ids, work directory,
    server pid, database name).
    Calls skip() — a JSON "skipped" document, exit 0 — when MLflow cannot be had."""
    mlflow = ensure_mlflow()

    import sqlalchemy as sa
    base = sa.engine.make_url(harness.DB_URL)
    name = f"{base.database}_mlflow"
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    store = base.set(drivername="postgresql+psycopg2", database=name).render_as_string(hide_password=False)

    workdir = Path(tempfile.mkdtemp(prefix="sagan-bench-mlflow-"))
    port = harness.free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(mlflow), "server", "--backend-store-uri", store, "--default-artifact-root", str(workdir / "artifacts"),
         "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT  # the first start creates MLflow's schema
        while time.monotonic() < deadline:
            if server.poll() is not None:
                skip("mlflow server exited at start: " + server.stderr.read().decode()[-300:])
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5)
                break
            except OSError:
                time.sleep(0.5)
        else:
            skip(f"mlflow server did not answer within {START_TIMEOUT} s")
        try:
            experiment = post(f"{url}/api/2.0/mlflow/experiments/create", {"name": "sagan-bench"})["experiment_id"]
        except urllib.error.HTTPError as exc:  # a retried create that had in fact gone through
            if exc.code != 400:
                raise
            with urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name=sagan-bench",
                                        timeout=30) as answer:
                experiment = json.loads(answer.read())["experiment"]["experiment_id"]
        run_ids = [post(f"{url}/api/2.0/mlflow/runs/create", {"experiment_id": experiment})["run"]["info"]["run_id"]
                   for _ in range(runs)]
        (workdir / "runs").write_text("\n".join(run_ids) + "\n")
        yield url, run_ids, workdir, server.pid, name
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=5)
    args = parser.parse_args()
    with mlflow_server(args.workers, args.runs) as (url, _run_ids, workdir, pid, database):
        (workdir / "log.lua").write_text(LUA)
        env = {"RUNS_FILE": str(workdir / "runs")}
        harness.wrk(url, seconds=3, script=str(workdir / "log.lua"), env=env)  # warm-up
        result = harness.wrk_with_cpu(pid, database, url, seconds=args.seconds, script=str(workdir / "log.lua"),
                                      env=env)
    harness.report({"bench": "mlflow_log_metric", "mlflow": MLFLOW_VERSION, "server": f"mlflow server --workers {args.workers}",
                    "database": "postgresql", "machine": harness.machine(), "wrk": "2 threads, 8 connections",
                    "seconds": args.seconds, "runs": args.runs, **result}, [
        ("MLflow log-metric requests/s", f"{result['requests_per_second']:,.0f}", "(for scale)", None),
        ("non-2xx answers", str(result["non_2xx"]), "", None),
    ])


if __name__ == "__main__":
    main()
