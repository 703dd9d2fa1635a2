"""Memory (ARCHITECTURE §5): resident set size of a web process and of a worker.

Web: the largest web worker after serving the board at 2,000 experiments and a run
page with 10,000 events many times. Worker: `python -m workers.launcher` (the RQ worker
with the scheduler thread) running agent runs against a loopback fake of the model API
(tests/fakes/anthropic_server.py), sampled while the jobs run — the worker process and the
work horse it forks for each job, each on its own.

Budget: a web process under 150 MB, a worker under 250 MB.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_memory.py
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness

WEB_BUDGET_MB = 150
WORKER_BUDGET_MB = 250
AGENT_RUNS = 4


def web_rss(app) -> dict:
    from services.pipeline import demo
    with app.app_context():
        demo.load_scale(2_000)
    run_id, _ = harness.seed_run(app, 10_000)
    with harness.Server(workers=2) as server:
        client = harness.login(server.url)
        for _ in range(30):
            client.get("/board")
            client.get(f"/runs/{run_id}")
            client.get("/experiments")
        client.close()
        sizes = [harness.rss_mb(pid) for pid in server.worker_pids()]
    return {"workers_mb": sizes, "max_mb": max(sizes)}


def worker_rss(app) -> dict:
    import psutil

    from models import db
    from services.core.actors import Actor
    from services.workflow import experiments, jobs, runs
    from tests.fakes.anthropic_server import FakeAnthropic, reply, slow, text, tool_use

    with FakeAnthropic() as fake:
        turns = []
        for _ in range(AGENT_RUNS):
            turns += [slow(0.5, reply(tool_use("get_experiment", {}))), slow(0.5, reply(text("Planned.")))]
        fake.script(*turns)
        with app.app_context():
            for i in range(AGENT_RUNS):
                experiment = experiments.create_experiment({"title": f"Memory bench {i}"}, Actor("owner", None, "b"))
                run = runs.create_run(kind="plan", agent="experiment-planner", request="Plan it.",
                                      scope_id=experiment.id)
                db.session.commit()
                jobs.enqueue_run(run.id)
        workdir = Path(tempfile.mkdtemp(prefix="sagan-bench-worker-"))  # a private instance directory
        env = harness.server_env(workdir, ANTHROPIC_API_KEY="sk-ant-bench-000000000000", ANTHROPIC_BASE_URL=fake.url)
        process = subprocess.Popen([sys.executable, "-m", "workers.launcher", "--queues", "agents,dispatch,default"],
                                   cwd=harness.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        parent_mb, horse_mb = 0.0, 0.0
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and fake.remaining() > 0:
                parent = psutil.Process(process.pid)
                parent_mb = max(parent_mb, parent.memory_info().rss / 2**20)
                for child in parent.children():
                    try:
                        horse_mb = max(horse_mb, child.memory_info().rss / 2**20)
                    except psutil.NoSuchProcess:
                        pass
                time.sleep(0.05)
            done = fake.remaining() == 0
        finally:
            # The work horse runs in a session of its own: kill it too, not just the group.
            horses = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
            for horse in horses:
                horse.kill()
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            psutil.wait_procs(horses, timeout=10)
            shutil.rmtree(workdir, ignore_errors=True)
    return {"worker_mb": round(parent_mb, 1), "work_horse_mb": round(horse_mb, 1), "agent_runs": AGENT_RUNS,
            "all_model_calls_made": done}


def main() -> None:
    app = harness.fresh_database()
    harness.create_owner(app)
    web = web_rss(app)
    worker = worker_rss(app)
    web_ok = web["max_mb"] < WEB_BUDGET_MB
    worker_ok = max(worker["worker_mb"], worker["work_horse_mb"]) < WORKER_BUDGET_MB
    harness.report({"bench": "memory", "machine": harness.machine(), "web": web, "worker": worker,
                    "budget_web_mb": WEB_BUDGET_MB, "budget_worker_mb": WORKER_BUDGET_MB,
                    "meets_budget": web_ok and worker_ok}, [
        ("web process RSS (largest web worker)", f"{web['max_mb']} MB", f"< {WEB_BUDGET_MB} MB", web_ok),
        ("worker process RSS (launcher)", f"{worker['worker_mb']} MB", f"< {WORKER_BUDGET_MB} MB",
         worker["worker_mb"] < WORKER_BUDGET_MB),
        ("work horse RSS (one job)", f"{worker['work_horse_mb']} MB", f"< {WORKER_BUDGET_MB} MB",
         worker["work_horse_mb"] < WORKER_BUDGET_MB),
    ])


if __name__ == "__main__":
    main()
