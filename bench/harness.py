"""What the benchmarks share: a fresh database, the web server on the bench app, wrk, timings.

Not a benchmark itself (`make bench` runs bench/bench_*.py). Every bench measures on
PostgreSQL (BENCH_DATABASE_URL, default the local `sagan_bench` database, dropped and
created anew) and Redis (BENCH_REDIS_URL, default db 14, flushed), with the production
server as deployed (granian through serve.py) serving `bench/wsgi.py`, which is the product's app plus a bare hello
endpoint and two response headers giving each request's server time and SQL query count.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import serve  # noqa: E402 - the project's root is on the path only from the line above

DB_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/sagan_bench")
DB_NAME = DB_URL.rsplit("/", 1)[-1].split("?")[0]
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
OWNER_EMAIL = "bench@example.com"
OWNER_PASSWORD = "bench-password-0000"
# granian, as deployed (serve.py): one worker per core and one more, two threads each.
WORKERS = int(os.environ.get("BENCH_WEB_WORKERS", "3"))
THREADS = int(os.environ.get("BENCH_WEB_THREADS", "2"))
# Workers importing the app on a loaded 2-core machine can take more than 30 s.
START_TIMEOUT = int(os.environ.get("BENCH_START_TIMEOUT", "90"))


def fresh_database():
    """Drop and create the bench database, build the schema with the migrations, flush
    the bench Redis; returns an app on it (for seeding; the server is another process)."""
    import flask_migrate
    import redis
    import sqlalchemy as sa

    from app import create_app
    from config import Config

    base = sa.engine.make_url(DB_URL)
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{base.database}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{base.database}"'))
    admin.dispose()
    redis.Redis.from_url(REDIS_URL).flushdb()

    class BenchConfig(Config):
        SQLALCHEMY_DATABASE_URI = DB_URL
        REDIS_URL = REDIS_URL  # noqa: F811 - the class attribute, from the module constant

    os.environ.setdefault("SECRET_KEY", "bench")
    app = create_app(BenchConfig)
    logging.getLogger().setLevel(logging.WARNING)  # the app logs at INFO outside tests
    with app.app_context():
        flask_migrate.upgrade(directory=str(ROOT / "migrations"))
    return app


def vacuum_analyze(*tables: str) -> None:
    """VACUUM ANALYZE (outside a transaction; every table when none is named): what
    autovacuum does on a live server after a burst of inserts (PostgreSQL 13+ vacuums after
    inserts). Fresh statistics for the planner, and the visibility map that lets an index
    answer alone; without it a bench measures the aftermath of its own bulk load."""
    import sqlalchemy as sa
    engine = sa.create_engine(DB_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for table in tables or ("",):
            conn.execute(sa.text(f"VACUUM ANALYZE {table}".strip()))
    engine.dispose()


def create_owner(app) -> None:
    from models import db
    from services.core.auth import create_owner as make
    with app.app_context():
        make(OWNER_EMAIL, OWNER_PASSWORD)
        db.session.commit()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(workdir: Path, **extra) -> dict:
    # The seeding app's key (fresh_database's default): jobs it enqueues are signed with it.
    return {**os.environ, "DATABASE_URL": DB_URL, "REDIS_URL": REDIS_URL,
            "SECRET_KEY": os.environ.get("SECRET_KEY") or "bench", "SAGAN_INSTANCE_DIR": str(workdir), **extra}


def web_server(port: int, workers: int = WORKERS, threads: int = THREADS,
               target: str = "bench.wsgi:create_bench_app") -> list[str]:
    """The argv of Sagan's web server as deployed (serve.command), on 127.0.0.1:port."""
    return serve.command(host="127.0.0.1", port=port, workers=workers, threads=threads, log_level="warning",
                         target=target)


def add_server_arguments(parser) -> None:
    """The ingest benches' options for the two servers they compare."""
    parser.add_argument("--workers", type=int, default=WORKERS, help="Sagan's web worker processes")
    parser.add_argument("--threads", type=int, default=THREADS, help="threads per Sagan web worker")
    parser.add_argument("--mlflow-workers", type=int, default=5, help="mlflow server workers (2 × cores + 1)")


def server_label(workers: int = WORKERS, threads: int = THREADS) -> str:
    return f"granian {serve.granian_version()} --workers {workers}, {threads} app threads each (serve.py)"


class Server:
    """Sagan's web server on the bench app; `url`, `pid` and `worker_pids()`."""

    def __init__(self, workers: int = WORKERS, log_path: Path | None = None, **env):
        self.workers = workers
        self.env = env
        # A long run (the soak) sends the server's log to a file: a pipe nobody reads fills
        # up, and the server's threads then block writing to it.
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = Path(tempfile.mkdtemp(prefix="sagan-bench-"))
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "Server":
        log = open(self.log_path, "wb") if self.log_path else subprocess.PIPE
        self.process = subprocess.Popen(
            web_server(self.port, self.workers),
            cwd=ROOT, env=server_env(self.workdir, **self.env), stdout=subprocess.DEVNULL,
            stderr=log, start_new_session=True)
        if self.log_path:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.log_path.read_bytes() if self.log_path else self.process.stderr.read()
                raise SystemExit("the web server exited at start:\n" + output.decode()[-3000:])
            try:
                urllib.request.urlopen(f"{self.url}/bench/hello", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise SystemExit(f"the web server did not answer within {START_TIMEOUT} s")
        # Every worker answers once before anything is measured (imports, first connections).
        for _ in range(self.workers * 4):
            urllib.request.urlopen(f"{self.url}/bench/hello", timeout=5).read()
        return self

    def worker_pids(self) -> list[int]:
        import psutil
        return [child.pid for child in psutil.Process(self.process.pid).children()]

    def __exit__(self, *exc) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)


def login(base_url: str):
    """An httpx client holding the owner's session cookie (through the real login form)."""
    import httpx
    client = httpx.Client(base_url=base_url, timeout=30)
    page = client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    answer = client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD, "csrf_token": token})
    if answer.status_code != 302:
        raise SystemExit(f"bench login failed: {answer.status_code}")
    return client


def sample(client, path: str, count: int, *, headers: dict | None = None, expect: int = 200,
           warmup: int = 5) -> dict:
    """`count` sequential requests: server time (from the bench header) and queries per request."""
    for _ in range(warmup):
        client.get(path, headers=headers)
    server_ms, cpu_ms, wall_ms, queries, size = [], [], [], set(), 0
    for _ in range(count):
        start = time.perf_counter()
        response = client.get(path, headers=headers)
        wall_ms.append((time.perf_counter() - start) * 1000)
        if response.status_code != expect:
            raise SystemExit(f"GET {path} answered {response.status_code}, expected {expect}")
        server_ms.append(float(response.headers["X-Bench-Server-Ms"]))
        cpu_ms.append(float(response.headers["X-Bench-Cpu-Ms"]))
        queries.add(int(response.headers["X-Bench-Queries"]))
        size = len(response.content)
    return {"requests": count, "server_p50_ms": pct(server_ms, 50), "server_p95_ms": pct(server_ms, 95),
            "server_cpu_p50_ms": pct(cpu_ms, 50), "server_cpu_p95_ms": pct(cpu_ms, 95),
            "wall_p50_ms": pct(wall_ms, 50), "queries": sorted(queries), "bytes": size}


def pct(values: list[float], p: int) -> float:
    ordered = sorted(values)
    if p == 50:
        return round(statistics.median(ordered), 2)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))], 2)


def wrk(url: str, *, seconds: int = 8, threads: int = 2, connections: int = 8, headers: dict | None = None,
        script: str | None = None, env: dict | None = None) -> dict:
    """Run wrk; requests/s, non-2xx/3xx count and latency percentiles."""
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (Debian/Ubuntu: apt-get install wrk).")
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency"]
    for name, value in (headers or {}).items():
        argv += ["-H", f"{name}: {value}"]
    if script:
        argv += ["-s", script]
    out = subprocess.run(argv + [url], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})}).stdout
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    total = re.search(r"(\d+) requests in", out)
    return {"requests_per_second": round(float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), 1),
            "requests": int(total.group(1)) if total else None,
            "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
            "socket_errors": errors.group(0) if errors else None,
            "latency_p50": _latency(out, "50%"), "latency_p99": _latency(out, "99%")}


def _latency(out: str, label: str) -> str | None:
    found = re.search(rf"{label}\s+([\d.]+\w+)", out)
    return found.group(1) if found else None


def server_cpu_seconds(pid: int, database: str) -> float:
    """CPU seconds used so far by a server's process tree and by PostgreSQL's backends for
    its database: what serving costs, whatever else the shared machine runs at the time."""
    return sum(server_cpu_split(pid, database))


def server_cpu_split(pid: int, database: str) -> tuple[float, float]:
    """server_cpu_seconds as (the server's processes, its database backends)."""
    import psutil
    import sqlalchemy as sa

    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)]
    engine = sa.create_engine(sa.engine.make_url(DB_URL).set(database="postgres"))
    with engine.connect() as conn:
        backends = conn.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :name"),
                                {"name": database}).scalars().all()
    engine.dispose()

    def used(group) -> float:
        total = 0.0
        for process in group:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:  # a worker or backend that ended meanwhile
                continue
            total += times.user + times.system
        return total

    return used(processes), used(psutil.Process(backend) for backend in backends if psutil.pid_exists(backend))


def wrk_with_cpu(pid: int, database: str, url: str, **wrk_args) -> dict:
    """wrk(), plus the server's CPU milliseconds per request (its processes and its database
    backends, wrk's own excluded): a cost that, unlike the request rate, hardly moves with
    the load other engineers put on the machine — the fairer comparison between servers (contention
    still adds to it). Also split: the server's processes, and PostgreSQL's backends."""
    server_before, database_before = server_cpu_split(pid, database)
    result = wrk(url, **wrk_args)
    server_after, database_after = server_cpu_split(pid, database)
    requests = result["requests"]

    def per_request(seconds: float):
        return round(seconds * 1000 / requests, 3) if requests else None

    result["server_cpu_ms_per_request"] = per_request(server_after - server_before + database_after - database_before)
    result["server_process_cpu_ms_per_request"] = per_request(server_after - server_before)
    result["database_cpu_ms_per_request"] = per_request(database_after - database_before)
    return result


def rss_mb(pid: int) -> float:
    import psutil
    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def report(result: dict, rows: list[tuple]) -> None:
    """One JSON document on stdout; a short table (what, figure, budget, ok) on stderr."""
    print(json.dumps(result), flush=True)
    width = max(len(str(r[0])) for r in rows) if rows else 10
    for what, figure, budget, ok in rows:
        mark = "" if ok is None else ("  ok" if ok else "  MISSES")
        print(f"  {what:<{width}}  {figure:>14}  {budget:<28}{mark}", file=sys.stderr, flush=True)


def seed_run(app, events: int, *, status: str = "running") -> tuple[str, int]:
    """One experiment and one agent run with `events` events of realistic sizes (tool calls
    with their input, tool results of a few KB, assistant text); returns (run id, last seq)."""
    import uuid
    from datetime import timedelta

    import sqlalchemy as sa

    from models import AgentRun, RunEvent, db
    from services.core.actors import Actor
    from services.core.clock import utcnow
    from services.workflow import experiments

    kinds = ("assistant_text", "tool_call", "tool_result", "pod_progress")
    with app.app_context():
        experiment = experiments.create_experiment({"title": "Run page bench"}, Actor("owner", None, "bench"))
        run = AgentRun(id=uuid.uuid4(), kind="apply", agent="experiment-orchestrator", request="Bench the run page.",
                       scope_id=experiment.id, status=status, model="claude-bench", last_seq=events,
                       heartbeat_at=utcnow())
        db.session.add(run)
        db.session.flush()
        start = utcnow() - timedelta(seconds=events)
        rows = []
        for seq in range(1, events + 1):
            kind = kinds[seq % len(kinds)]
            body, metadata = {
                "assistant_text": (f"Step {seq}: the loss curve flattens after warmup; checking the next shard. " * 4,
                                   None),
                "tool_call": ("read_file", {"tool": "read_file", "input": {"path": f"src/train_{seq % 50}.py"}}),
                "tool_result": ("\n".join(f"{i:4d}  x = layer_{i}(x)  # shard {seq}" for i in range(60)),
                                {"tool": "read_file", "is_error": False}),
                "pod_progress": (f"{seq % 100}% · step {seq}", {"seq": seq}),
            }[kind]
            rows.append({"id": uuid.uuid4(), "run_id": run.id, "seq": seq, "event_type": kind, "body": body,
                         "metadata_": metadata, "created_at": start + timedelta(seconds=seq),
                         "updated_at": start + timedelta(seconds=seq)})
            if len(rows) == 2000:
                db.session.execute(sa.insert(RunEvent), rows)
                rows = []
        if rows:
            db.session.execute(sa.insert(RunEvent), rows)
        db.session.commit()
        db.session.execute(sa.text("ANALYZE"))
        db.session.commit()
        return str(run.id), events


def machine() -> dict:
    """What the figures were measured on, and how busy it was."""
    import platform
    return {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version()}
