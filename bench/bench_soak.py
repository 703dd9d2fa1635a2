"""Soak under faults: Sagan as deployed — PostgreSQL, a Redis of the bench's own, the web
server (granian through serve.py) and the two worker processes (`workers.launcher` with the
scheduler, and the artifact worker) — while 200 simulated pods post progress and metric
batches at the helpers' cadence and an owner clicks through the board, an experiment page
and its polls, the chart data and the approval page. During the run the workers are killed
(SIGKILL, work horses included) and restarted twice, and Redis is restarted once.

What the pods send, at the cadence of the real clients:
- a metric batch every 10 s (`scripts/sagan_metrics.py` flushes every FLUSH_SECONDS = 10 s;
  here 10 metrics × 20 steps = 200 points a batch), retried as the helper retries (five
  tries, 1, 2, 3, 4 s apart, on a timeout, a refused connection, 408/425/429 or a 5xx);
- a progress post every `--progress-seconds` (default 10 s: the bootstrap posts at its
  milestones, a training script as often as it likes; 10 s is a chatty one), retried as
  the bootstrap retries (five tries, 2, 4, 6, 8 s apart);
- `--log-uploads` pods (default 20) upload a 600 KB text log once, at a random moment: over
  the 512 KB redacted inside the request, so each is a job on the `artifacts` queue.

What it reports (one JSON document on stdout, a table on stderr):
- requests served, and p50/p95/p99 of wall time per page and per post kind (and of server
  time for the pages, from the bench app's header);
- posts accepted (2xx), refused (a final answer that is not 2xx), given up (no answer after
  five tries) and **lost** — accepted, yet not in the database at the end: must be 0;
- **jobs lost**: an accepted upload whose artifact is, after a drain, neither processed
  (ready, or failed with its reason) nor visibly waiting (`processing` with its job queued,
  started or scheduled in Redis): must be 0;
- the **worst stall**: the longest stretch of the run without one successful response (any
  client), and the slowest answer the owner waited for.

Run: .venv/bin/python bench/bench_soak.py [--minutes 10] [--pods 200] [--experiments 2000] [--client-processes 4]
Needs PostgreSQL (BENCH_DATABASE_URL, dropped and created anew) and `redis-server` on the
PATH (the bench starts its own on a free port: restarting the shared one would hit others).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import harness

ROOT = harness.ROOT
METRIC_NAMES = ("loss", "val/loss", "lr", "grad_norm", "val/accuracy [%]", "tokens_per_s",
                "throughput", "mem_gb", "step_time_s", "epoch")
STEPS_PER_BATCH = 20
LOG_BYTES = 600 * 1024
TRIES = 5
METRICS_RETRY_SECONDS = 1.0  # sagan_metrics.Metrics(retry_seconds=1.0): 1, 2, 3, 4 s
PROGRESS_RETRY_SECONDS = 2.0  # pod_bootstrap.sh SAGAN_POST_RETRY_SECONDS: 2, 4, 6, 8 s
RETRYABLE = {408, 425, 429}
# The owner's browser: htmx polls the board and the experiment page every 5 s
# (POLL_BOARD_SECONDS, POLL_EXPERIMENT_SECONDS); the chart refreshes every 10 s.
POLL_SECONDS = 5.0
CHART_SECONDS = 10.0
LIVE_JOB_STATES = {"queued", "started", "deferred", "scheduled"}
OWNER_PAGES = ("board", "board poll", "experiment page", "experiment poll", "chart data", "approvals", "approval page")


# --- the deployment ----------------------------------------------------------------------------

class RedisServer:
    """A redis-server of the bench's own on a free port, without persistence: a restart
    loses every queue and key, the harshest case for jobs."""

    def __init__(self, workdir: Path):
        self.port = harness.free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server") or str(Path(sys.executable).with_name("redis-server"))
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        import redis
        client = redis.Redis.from_url(self.url)
        for _ in range(100):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise SystemExit("the bench's redis-server did not start")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


class Workers:
    """The two worker processes as deployed (docs/deploy.md): the shared queues with the
    scheduler, and the artifact worker, each kept running as systemd's `Restart=always`,
    `RestartSec=5` keeps it (`supervise`). Each in a session of its own, so a SIGKILL to
    the group takes its work horse too."""

    ARGV = (["-m", "workers.launcher"], ["-m", "workers.launcher", "--queues", "artifacts", "--no-scheduler"])
    RESTART_SECONDS = 5

    def __init__(self, env: dict, workdir: Path):
        self.env, self.workdir = env, workdir
        self.processes: list[subprocess.Popen | None] = [None] * len(self.ARGV)
        self.starts = 0
        self.exits: list[dict] = []  # exits nobody asked for
        self.killing = False

    def start(self, index: int | None = None) -> None:
        for i in range(len(self.ARGV)) if index is None else (index,):
            self.starts += 1
            log = open(self.workdir / f"worker-{i}-{self.starts}.log", "wb")
            self.processes[i] = subprocess.Popen([sys.executable, *self.ARGV[i], "--log-level", "WARNING"],
                                                 cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                 start_new_session=True)
            log.close()

    def kill(self) -> None:
        """SIGKILL both workers and their work horses."""
        self.killing = True
        for process in self.processes:
            if process is not None and process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(timeout=10)
        self.killing = False

    async def supervise(self, start: float, end: float) -> None:
        """Restart a worker RESTART_SECONDS after it ended, killed or by itself."""
        pending: dict[int, float] = {}
        while time.monotonic() < end:
            for i, process in enumerate(self.processes):
                if process is None or process.poll() is None or i in pending or self.killing:
                    continue
                if process.returncode != -signal.SIGKILL:
                    self.exits.append({"at_s": round(time.monotonic() - start, 1), "worker": " ".join(self.ARGV[i][1:]),
                                       "returncode": process.returncode})
                pending[i] = time.monotonic() + self.RESTART_SECONDS
            for i, when in list(pending.items()):
                if time.monotonic() >= when:
                    self.start(i)
                    del pending[i]
            await asyncio.sleep(0.5)
        for i in pending:  # the drain after the run still needs them
            self.start(i)

    def stop(self) -> None:
        for process in self.processes:
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            if process is None:
                continue
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)


# --- the data --------------------------------------------------------------------------------

def seed(app, args) -> dict:
    """The board's experiments, the experiments the pods run for, the pods with their tokens,
    and one experiment awaiting approval; returns what the clients need."""
    import sqlalchemy as sa

    from models import AgentRun, ApprovalRequest, Pod, db
    from services.core.actors import Actor
    from services.dispatch import tokens as pod_tokens
    from services.pipeline import demo
    from services.workflow import experiments

    harness.create_owner(app)
    with app.app_context():
        demo.load_scale(args.experiments, seed=args.experiments)
        owner = Actor("owner", None, "bench")
        running, pods = [], []
        per_experiment = 10
        for start in range(0, args.pods, per_experiment):
            experiment = experiments.create_experiment({"title": f"Soak: sweep {start // per_experiment + 1}"}, owner)
            demo.walk_to(experiment, "running")
            run = AgentRun(id=uuid.uuid4(), kind="experiment", agent="bench", request="Soak bench dispatch.",
                           scope_id=experiment.id, status="waiting")
            db.session.add(run)
            db.session.flush()
            for i in range(start, min(start + per_experiment, args.pods)):
                secret, digest = pod_tokens.new_token()
                pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                          name=f"sagan-soak-{i}", status="running", progress_token_hash=digest)
                db.session.add(pod)
                pods.append((str(pod.id), secret))
            running.append(experiment.number)
            db.session.commit()
        waiting = experiments.create_experiment({"title": "Soak: a plan awaiting approval"}, owner)
        demo.walk_to(waiting, "plan_pending")  # submits the plan and opens its approval request
        db.session.commit()
        approval = db.session.scalars(sa.select(ApprovalRequest).where(ApprovalRequest.experiment_id == waiting.id)
                                      .order_by(ApprovalRequest.created_at.desc())).first()
        db.engine.dispose()
    return {"running": running, "pods": pods, "approval": str(approval.id)}


# --- the clients -----------------------------------------------------------------------------

class Record:
    """Every response and outcome of the run, on one event loop (no locks needed)."""

    def __init__(self):
        self.timings: dict[str, list[float]] = {}
        self.server_ms: dict[str, list[float]] = {}
        self.errors: dict[str, dict[str, int]] = {}
        self.ok_at: list[float] = []
        self.posts = {kind: {"accepted": 0, "refused": 0, "gave_up": 0, "retries": 0, "refusals": {}}
                      for kind in ("progress", "metrics", "artifact")}
        self.accepted_progress: list[tuple[str, int]] = []
        self.accepted_metrics: list[tuple[str, int]] = []
        self.accepted_artifacts: list[str] = []
        self.loop_lag_ms: list[float] = []
        self.error_times: list[dict] = []
        self.by_second: dict[int, list[float]] = {}  # second of the run → wall ms of its answers
        self.start = time.monotonic()
        self.cpu_seconds = 0.0  # the client's own CPU (all its processes)

    def answer(self, page: str, started: float, response) -> None:
        now = time.monotonic()
        self.timings.setdefault(page, []).append((now - started) * 1000)
        self.by_second.setdefault(int(now - self.start), []).append((now - started) * 1000)
        if "X-Bench-Server-Ms" in response.headers:
            self.server_ms.setdefault(page, []).append(float(response.headers["X-Bench-Server-Ms"]))
        if response.status_code < 400:
            self.ok_at.append(now)
        else:
            self.error(page, str(response.status_code))

    def merge(self, other: "Record") -> None:
        """Add another process's record to this one (the pods run in several processes)."""
        for mine, theirs in ((self.timings, other.timings), (self.server_ms, other.server_ms),
                             (self.by_second, other.by_second)):
            for key, values in theirs.items():
                mine.setdefault(key, []).extend(values)
        for page, counts in other.errors.items():
            for what, count in counts.items():
                self.errors.setdefault(page, {})[what] = self.errors.get(page, {}).get(what, 0) + count
        for kind, counts in other.posts.items():
            for name in ("accepted", "refused", "gave_up", "retries"):
                self.posts[kind][name] += counts[name]
            for code, count in counts["refusals"].items():
                self.posts[kind]["refusals"][code] = self.posts[kind]["refusals"].get(code, 0) + count
        self.ok_at += other.ok_at
        self.accepted_progress += other.accepted_progress
        self.accepted_metrics += other.accepted_metrics
        self.accepted_artifacts += other.accepted_artifacts
        self.loop_lag_ms += other.loop_lag_ms
        self.error_times = sorted(self.error_times + other.error_times, key=lambda e: e["at_s"])[:200]
        self.cpu_seconds += other.cpu_seconds

    def error(self, page: str, what: str) -> None:
        counts = self.errors.setdefault(page, {})
        counts[what] = counts.get(what, 0) + 1
        if len(self.error_times) < 200:
            self.error_times.append({"at_s": round(time.monotonic() - self.start, 1), "page": page, "error": what})


async def post(client, record: Record, kind: str, url: str, *, token: str, body: bytes, content_type: str,
               retry_seconds: float, headers: dict | None = None):
    """One post as the pod's client makes it, retries included; the final answer or None."""
    for attempt in range(1, TRIES + 1):
        started = time.monotonic()
        try:
            response = await client.post(url, content=body, headers={
                "Authorization": f"Bearer {token}", "Content-Type": content_type, **(headers or {})})
        except Exception as exc:  # noqa: BLE001 - refused, reset, timed out: the clients retry
            record.error(kind, exc.__class__.__name__)
            response = None
        else:
            record.answer(kind, started, response)
            if response.status_code < 300:
                record.posts[kind]["accepted"] += 1
                return response
            if response.status_code < 500 and response.status_code not in RETRYABLE:
                break
        if attempt < TRIES:
            record.posts[kind]["retries"] += 1
            await asyncio.sleep(retry_seconds * attempt)
    if response is None:
        record.posts[kind]["gave_up"] += 1
    else:
        record.posts[kind]["refused"] += 1
        refusals = record.posts[kind]["refusals"]
        refusals[str(response.status_code)] = refusals.get(str(response.status_code), 0) + 1
    return None


async def pod_client(client, record: Record, pod_id: str, token: str, end: float, args, rng: random.Random,
                     upload_at: float | None) -> None:
    """One pod: a metric batch every 10 s and a progress post every --progress-seconds, each
    on its own clock (as the helper's flush and the script's prints are), from a random phase."""
    import json

    async def metrics_loop():
        await asyncio.sleep(rng.uniform(0, args.metrics_seconds))
        seq, step = time.time_ns() // 1000, 0
        while time.monotonic() < end:
            seq = max(seq + 1, time.time_ns() // 1000)
            points = [{"step": step + s, "name": name, "value": rng.random()}
                      for s in range(STEPS_PER_BATCH) for name in METRIC_NAMES]
            step += STEPS_PER_BATCH
            if await post(client, record, "metrics", "/api/metrics", token=token,
                          body=json.dumps({"seq": seq, "points": points}).encode(), content_type="application/json",
                          retry_seconds=METRICS_RETRY_SECONDS):
                record.accepted_metrics.append((pod_id, seq))
            await asyncio.sleep(args.metrics_seconds)

    async def progress_loop():
        await asyncio.sleep(rng.uniform(0, args.progress_seconds))
        seq = 0
        while time.monotonic() < end:
            seq += 1
            body = {"progressPct": min(99, seq), "message": f"step {seq * 100} · loss {rng.random():.3f}", "seq": seq}
            if await post(client, record, "progress", "/api/progress", token=token,
                          body=json.dumps(body).encode(), content_type="application/json",
                          retry_seconds=PROGRESS_RETRY_SECONDS):
                record.accepted_progress.append((pod_id, seq))
            await asyncio.sleep(args.progress_seconds)

    async def upload():
        await asyncio.sleep(max(0.0, upload_at - time.monotonic()))
        lines = "".join(f"step {i} loss {rng.random():.5f} lr 3e-4 grad_norm {rng.random():.3f}\n"
                        for i in range(LOG_BYTES // 50))
        response = await post(client, record, "artifact", "/api/artifacts", token=token,
                              body=lines.encode()[:LOG_BYTES], content_type="text/plain",
                              retry_seconds=PROGRESS_RETRY_SECONDS,
                              headers={"X-Sagan-Artifact-Name": "sagan-logs/train.log"})
        if response is not None:
            record.accepted_artifacts.append(response.json()["id"])

    parts = [metrics_loop(), progress_loop()]
    if upload_at is not None:
        parts.append(upload())
    await asyncio.gather(*parts)


async def owner_client(base_url: str, record: Record, end: float, data: dict) -> None:
    """The owner, as a browser would: the board and its poll, an experiment page with its
    poll and a chart refreshing, the approval queue and page; round and round until the end."""
    import httpx

    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        page = await client.get("/login")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        answer = await client.post("/login", data={"email": harness.OWNER_EMAIL, "password": harness.OWNER_PASSWORD,
                                                   "csrf_token": csrf})
        if answer.status_code != 302:
            raise SystemExit(f"soak login failed: {answer.status_code}")

        async def get(page: str, path: str, headers: dict | None = None):
            started = time.monotonic()
            try:
                response = await client.get(path, headers=headers)
            except Exception as exc:  # noqa: BLE001 - a browser shows an error and the owner reloads
                record.error(page, exc.__class__.__name__)
                return None
            record.answer(page, started, response)
            return response

        turn = 0
        while time.monotonic() < end:
            number = data["running"][turn % len(data["running"])]
            turn += 1
            board = await get("board", "/board")
            version = re.search(r'data-version="([^"]+)"', board.text) if board is not None else None
            for _ in range(2):
                await asyncio.sleep(POLL_SECONDS)
                headers = {"HX-Request": "true", "If-None-Match": f'"{version.group(1)}"'} if version else None
                await get("board poll", "/board/columns", headers)
            detail = await get("experiment page", f"/experiments/{number}")
            version = re.search(r'data-version="([0-9a-f]+)"', detail.text) if detail is not None else None
            chart_etag = None
            for i in range(6):
                await asyncio.sleep(POLL_SECONDS)
                headers = {"HX-Request": "true", "If-None-Match": f'"{version.group(1)}"'} if version else None
                polled = await get("experiment poll", f"/experiments/{number}/live", headers)
                if polled is not None and polled.status_code == 200:
                    version = re.search(r'data-version="([0-9a-f]+)"', polled.text) or version
                if i % 2 == 0:  # the chart refreshes every 10 s
                    chart = await get("chart data", f"/experiments/{number}/metrics/data?name=loss",
                                      {"If-None-Match": chart_etag} if chart_etag else None)
                    if chart is not None and chart.status_code == 200:
                        chart_etag = chart.headers.get("ETag")
                if time.monotonic() >= end:
                    break
            await get("approvals", "/approvals")
            await get("approval page", f"/approvals/{data['approval']}")
            await asyncio.sleep(POLL_SECONDS)


async def loop_lag(record: Record, end: float) -> None:
    """How late this client's own event loop wakes up: when it is late, the client (on the
    same loaded machine), not the server, adds to the wall times."""
    while time.monotonic() < end:
        planned = time.monotonic() + 0.1
        await asyncio.sleep(0.1)
        record.loop_lag_ms.append(max(0.0, (time.monotonic() - planned) * 1000))


def timeline(record: Record, start: float, step: int = 10) -> list[dict]:
    """Per `step` seconds of the run: answers and their wall p95, to set beside the faults."""
    out = []
    last = max(record.by_second) if record.by_second else 0
    for first in range(0, last + 1, step):
        values = [v for second in range(first, first + step) for v in record.by_second.get(second, [])]
        out.append({"from_s": first, "answers": len(values), "wall_p95_ms": harness.pct(values, 95) if values else None})
    return out


async def faults(record: dict, workers: Workers, redis_server: RedisServer, start: float, seconds: float,
                 down_seconds: float) -> None:
    """Kill the workers at 20% and 60% of the run (the supervisor restarts them 5 s later, as
    systemd would), stop Redis at 40% and start it again, empty, `down_seconds` later."""
    plan = [(0.2, "workers"), (0.4, "redis"), (0.6, "workers")]
    for fraction, what in plan:
        await asyncio.sleep(max(0.0, start + fraction * seconds - time.monotonic()))
        at = round(time.monotonic() - start, 1)
        if what == "workers":
            await asyncio.to_thread(workers.kill)
            record["events"].append({"at_s": at, "what": "both workers killed (SIGKILL, work horses included); "
                                                         f"restarted {workers.RESTART_SECONDS} s later"})
        else:
            await asyncio.to_thread(redis_server.stop)
            await asyncio.sleep(down_seconds)
            await asyncio.to_thread(redis_server.start)
            record["events"].append({"at_s": at, "what": f"redis stopped, started again empty {down_seconds:g} s later"})


def pod_group(server_url: str, pods: list, uploads: list, args, start: float, end: float) -> Record:
    """One client process: its share of the pods, on its own event loop (one loop for all 200
    pods lagged by seconds on the loaded machine, and the lag was the client's, not the
    server's). Each pod on its own connections, as real pods are."""
    import httpx

    async def run() -> Record:
        record = Record()
        record.start = start
        limits = httpx.Limits(max_connections=len(pods) * 2 + 10, max_keepalive_connections=len(pods) * 2)
        async with httpx.AsyncClient(base_url=server_url, timeout=30, limits=limits) as client:
            await asyncio.gather(loop_lag(record, end), *(
                pod_client(client, record, pod_id, token, end, args, random.Random(seed), upload_at)
                for (seed, pod_id, token), upload_at in zip(pods, uploads)))
        return record

    record = asyncio.run(run())
    record.cpu_seconds = time.process_time()
    return record


async def run_load(server_url: str, data: dict, args, workers: Workers, redis_server: RedisServer) -> tuple:
    from concurrent.futures import ProcessPoolExecutor

    cpu_at_start = time.process_time()
    record = Record()
    fault_record = {"events": []}
    rng = random.Random(25)
    seconds = args.minutes * 60
    # The pods' processes start first (their imports take a while on a loaded machine).
    start = record.start = time.monotonic() + 5
    end = start + seconds
    uploaders = set(rng.sample(range(len(data["pods"])), min(args.log_uploads, len(data["pods"]))))
    pods = [(i, pod_id, token) for i, (pod_id, token) in enumerate(data["pods"])]
    uploads = [start + rng.uniform(0.05, 0.85) * seconds if i in uploaders else None for i in range(len(pods))]
    groups = max(1, args.client_processes)
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(groups) as pool:
        parts = [loop.run_in_executor(pool, pod_group, server_url, pods[g::groups], uploads[g::groups], args,
                                      start, end) for g in range(groups)]
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        results = await asyncio.gather(owner_client(server_url, record, end, data),
                                       faults(fault_record, workers, redis_server, start, seconds, args.down_seconds),
                                       workers.supervise(start, end), loop_lag(record, end), *parts)
    for part in results[4:]:
        record.merge(part)
    record.cpu_seconds += time.process_time() - cpu_at_start
    return record, fault_record, start, end


# --- the verdict -----------------------------------------------------------------------------

def lost_posts(record: Record) -> dict:
    """Accepted posts that are not in the database."""
    import sqlalchemy as sa
    engine = sa.create_engine(harness.DB_URL)
    with engine.connect() as conn:
        progress = {(str(p), s) for p, s in conn.execute(sa.text("SELECT pod_id, seq FROM pod_progress_posts"))}
        metrics = {(str(p), s) for p, s in conn.execute(sa.text("SELECT pod_id, seq FROM metric_batches"))}
    engine.dispose()
    return {"progress": sum(1 for key in record.accepted_progress if key not in progress),
            "metrics": sum(1 for key in record.accepted_metrics if key not in metrics)}


def job_outcomes(record: Record, redis_url: str, drain_seconds: float) -> dict:
    """What became of every accepted upload's job, after waiting up to `drain_seconds` for the
    artifact worker (and the scheduler's sweep, which queues again a job Redis lost)."""
    import redis
    import sqlalchemy as sa
    from rq.exceptions import NoSuchJobError
    from rq.job import Job

    sys.path.insert(0, str(ROOT))
    from services.dispatch.artifacts import job_id

    engine = sa.create_engine(harness.DB_URL)
    ids = record.accepted_artifacts
    deadline = time.monotonic() + drain_seconds
    while True:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, status, sha256, status_note FROM artifacts WHERE id = ANY(:ids)"),
                                {"ids": [uuid.UUID(i) for i in ids]}).all()
        processing = [row for row in rows if row.status == "processing"]
        if not processing or time.monotonic() > deadline:
            break
        time.sleep(2)
    drained_in = round(drain_seconds - max(0.0, deadline - time.monotonic()), 1)
    engine.dispose()
    connection = redis.Redis.from_url(redis_url)
    waiting, lost = 0, 0
    for row in processing:
        try:
            state = Job.fetch(job_id(row.id, row.sha256), connection=connection).get_status(refresh=False)
        except NoSuchJobError:
            state = None
        if state in LIVE_JOB_STATES:
            waiting += 1
        else:
            lost += 1
    missing = len(ids) - len(rows)
    by_status: dict[str, int] = {}
    for row in rows:
        by_status[row.status] = by_status.get(row.status, 0) + 1
    notes = sorted({row.status_note for row in rows if row.status == "failed" and row.status_note})
    return {"enqueued": len(ids), "by_status": by_status, "visibly_waiting": waiting, "lost": lost + missing,
            "failed_notes": notes, "drain_seconds": drained_in}


def stall(times: list[float], start: float, end: float) -> dict:
    """The longest stretch without a successful response: its length and when it began."""
    moments = [start, *sorted(t for t in times if start <= t <= end), end]
    length, began = max((b - a, a) for a, b in zip(moments, moments[1:]))
    return {"seconds": round(length, 2), "from_s": round(began - start, 1)}


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    return {"n": len(values), "p50": harness.pct(values, 50), "p95": harness.pct(values, 95),
            "p99": harness.pct(values, 99), "max": round(max(values), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--experiments", type=int, default=2000, help="experiments on the board besides the pods'")
    parser.add_argument("--progress-seconds", type=float, default=10)
    parser.add_argument("--metrics-seconds", type=float, default=10)
    parser.add_argument("--log-uploads", type=int, default=20)
    parser.add_argument("--down-seconds", type=float, default=5, help="how long Redis stays down")
    parser.add_argument("--drain-seconds", type=float, default=180)
    parser.add_argument("--client-processes", type=int, default=4, help="processes the simulated pods run in")
    args = parser.parse_args()
    if not shutil.which("redis-server") and not Path(sys.executable).with_name("redis-server").exists():
        raise SystemExit("redis-server is not installed; the soak starts one of its own.")

    workdir = Path(tempfile.mkdtemp(prefix="sagan-soak-"))
    redis_server = RedisServer(workdir)
    redis_server.start()
    harness.REDIS_URL = redis_server.url  # the harness's server and fresh_database read it
    workers = None
    try:
        app = harness.fresh_database()
        data = seed(app, args)
        harness.vacuum_analyze()
        # The pods are simulated: no backend to watch (the watcher would find no such pods
        # and stop them); the scheduler's other sweeps, artifacts' included, run as usual.
        env = harness.server_env(workdir, SAGAN_POD_WATCH_SECONDS="86400")
        server_log = workdir / "web.log"
        with harness.Server(log_path=server_log, SAGAN_POD_WATCH_SECONDS="86400") as server:
            workers = Workers(env, workdir)
            workers.start()
            load_before = harness.machine()["load_average"]
            record, fault_record, start, end = asyncio.run(run_load(server.url, data, args, workers, redis_server))
            load_after = harness.machine()["load_average"]
            jobs = job_outcomes(record, redis_server.url, args.drain_seconds)
            lost = lost_posts(record)
    finally:
        if workers:
            workers.stop()
        redis_server.stop()

    pages = {page: {"wall_ms": percentiles(values), "server_ms": percentiles(record.server_ms.get(page, [])),
                    "errors": record.errors.get(page, {})}
             for page, values in sorted(record.timings.items())}
    served = sum(len(v) for v in record.timings.values())
    posts = record.posts
    lost_total = lost["progress"] + lost["metrics"]
    worst = stall(record.ok_at, start, end)
    # The owner's requests are seconds apart by design (the polls' cadence): their gaps say
    # nothing; the slowest answer the owner waited for does.
    owner_slowest = max((v for page, values in record.timings.items() if page in OWNER_PAGES for v in values),
                        default=0.0)
    result = {
        "bench": "soak", "server": harness.server_label(), "database": "postgresql",
        "machine": harness.machine(), "load_average_at_start": load_before, "load_average_at_end": load_after,
        "minutes": args.minutes, "pods": args.pods, "experiments": args.experiments,
        "cadence_seconds": {"progress": args.progress_seconds, "metrics": args.metrics_seconds,
                            "points_per_batch": STEPS_PER_BATCH * len(METRIC_NAMES)},
        "faults": fault_record["events"], "worker_exits_unasked": workers.exits, "requests_served": served, "pages": pages, "posts": posts,
        "posts_lost": lost, "jobs": jobs, "worst_stall_s": worst, "owner_slowest_answer_ms": round(owner_slowest, 1),
        "client_loop_lag_ms": percentiles(record.loop_lag_ms), "client_processes": args.client_processes,
        "client_cpu_seconds": round(record.cpu_seconds, 1), "timeline_10s": timeline(record, start),
        "errors_at": record.error_times, "server_log_tail": server_log.read_text(errors="replace")[-6000:],
        "worker_log_tails": {path.name: path.read_text(errors="replace")[-1500:]
                             for path in sorted(workdir.glob("worker-*.log")) if path.stat().st_size},
        "meets_budget": lost_total == 0 and jobs["lost"] == 0,
    }
    # The accepted keys make the document long and say nothing a reader needs.
    rows = [("requests served", f"{served:,}", f"in {args.minutes:g} min", None)]
    for page, figures in pages.items():
        wall = figures["wall_ms"]
        errors = sum(figures["errors"].values())
        rows.append((f"{page}: p50 / p95 / p99 ms", f"{wall['p50']} / {wall['p95']} / {wall['p99']}",
                     f"n {wall['n']:,}, errors {errors}" if errors else f"n {wall['n']:,}", None))
    for kind, counts in posts.items():
        rows.append((f"{kind} posts accepted / refused / gave up",
                     f"{counts['accepted']:,} / {counts['refused']} / {counts['gave_up']}",
                     f"retries {counts['retries']}", None))
    rows.append(("posts lost (accepted, not stored)", f"{lost['progress']} + {lost['metrics']}", "must be 0",
                 lost_total == 0))
    rows.append(("jobs lost", f"{jobs['lost']} of {jobs['enqueued']}",
                 f"must be 0; {jobs['by_status']}", jobs["lost"] == 0))
    rows.append(("worst stall: no successful answer for", f"{worst['seconds']} s", f"from {worst['from_s']} s", None))
    rows.append(("the owner's slowest answer", f"{owner_slowest / 1000:.2f} s", "", None))
    lag = percentiles(record.loop_lag_ms)
    rows.append(("the client's own lag p50 / p99 / max", f"{lag.get('p50')} / {lag.get('p99')} / {lag.get('max')} ms",
                 f"its CPU {record.cpu_seconds:.0f} s in {args.client_processes + 1} processes", None))
    rows.append(("load average start → end", f"{load_before[0]} → {load_after[0]}", "", None))
    harness.report(result, rows)
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
