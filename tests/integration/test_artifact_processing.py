"""Large artifacts are processed (redacted, their figure sanitized) by jobs on the `artifacts`
queue, which worker processes of their own serve: an agent job never waits behind one, a job
past its time limit leaves the artifact `failed` with the reason, and the scheduler's sweep
catches what a killed job left behind. Markup too large to be a figure is kept as a file."""
from __future__ import annotations

import importlib.util
import signal
import subprocess
import time
from datetime import timedelta

import psutil
import pytest
import sqlalchemy as sa
from rq import Worker
from rq.job import Job

from models import Artifact, ArtifactUsage, Figure, db
from services.core import clock, redis_store
from services.dispatch import artifacts
from services.workflow import jobs
from tests.fakes.anthropic_server import reply, text
from tests.integration.test_progress_ingest import upload
from tests.integration.test_worker_faults import (
    ROOT,
    kill_tree,
    model_env,
    queued_plan_run,
    start_worker,
    wait_until,
    worker_env,
)
from workers import queues, runtime

_spec = importlib.util.spec_from_file_location("run_embedded", ROOT / "scripts" / "run_embedded.py")
run_embedded = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_embedded)

SECRET = "rpa_ABCDEFGHIJKLMNOPQRSTUV"


def flat_svg(size: int) -> bytes:
    """A harmless SVG of about `size` bytes: one flat layer of dots (a scatter plot's shape), a
    script that must not survive."""
    dot = '<circle cx="{}" cy="{}" r="1"/>'
    dots = "".join(dot.format(i % 500, i // 500) for i in range(size // 34))
    return f'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script>{dots}</svg>'.encode()


def artifact_row(app, name: str) -> Artifact:
    with app.app_context():
        row = db.session.scalar(sa.select(Artifact).where(Artifact.name == name)
                                .options(sa.orm.undefer(Artifact.pending_content)))
        db.session.expunge(row)
        return row


@pytest.fixture
def job_app(app):
    """Jobs run in the test app; signal handlers a worker installs are put back afterwards."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    runtime.set_app(app)
    yield app
    runtime.set_app(None)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def run_artifact_worker(app) -> None:
    """A real forking worker on the `artifacts` queue, until it is empty."""
    with app.app_context():
        worker = runtime.SaganWorker([queues.get_queue(queues.ARTIFACTS)], connection=redis_store.connection())
    worker.work(burst=True)


def test_a_large_text_upload_is_unreadable_until_its_job_redacts_it(app, client, make_live_pod, worker, api_client):
    """Is a 600 KB log stored `processing` with nothing readable (its content empty, the download a
    409), then redacted by the job on the artifacts queue, readable, and its budgets following
    the redacted size?"""
    pod = make_live_pod("Big log")
    log = (f"RUNPOD_API_KEY={SECRET}\n" + "epoch 1 loss 0.5\n" * 40_000).encode()
    response = upload(client, pod.secret, "train.log", log, "text/plain")
    assert response.status_code == 201 and response.get_json()["status"] == "processing"
    row = artifact_row(app, "train.log")
    assert row.status == "processing" and row.content == b"" and row.pending_content == log
    with app.app_context():
        job = Job.fetch(artifacts.job_id(row.id, row.sha256), connection=redis_store.connection(),
                        serializer=jobs.SERIALIZER)
        assert job.origin == "artifacts"
    reader = api_client("read")
    waiting = reader.get(f"/api/artifacts/{row.id}")
    assert waiting.status_code == 409 and waiting.get_json()["error"] == "artifact_processing"
    assert SECRET.encode() not in waiting.data
    worker()
    row = artifact_row(app, "train.log")
    assert row.status == "ready" and row.pending_content is None
    assert SECRET.encode() not in row.content and b"[REDACTED]" in row.content
    downloaded = reader.get(f"/api/artifacts/{row.id}")
    assert downloaded.status_code == 200 and downloaded.data == row.content
    with app.app_context():
        assert db.session.get(ArtifactUsage, pod.id).bytes == len(row.content) == row.size


def test_a_19_mb_flat_svg_is_kept_as_a_file_at_once_and_queues_nothing(app, client, make_live_pod):
    """The SVG that held the only worker for 80 s: over the figure limit, is it stored `ready` as
    a file to download in well under the old cost, with a note saying why it is not a figure,
    no figure and no job?"""
    pod = make_live_pod("Huge SVG")
    svg = flat_svg(19 * 1024 * 1024)
    started = time.process_time()
    response = upload(client, pod.secret, "figures/scatter.svg", svg, "image/svg+xml")
    seconds = time.process_time() - started
    assert response.status_code == 201 and response.get_json()["status"] == "ready"
    assert seconds < 3.0  # the request's CPU time; sanitizing it took 80 s
    row = artifact_row(app, "figures/scatter.svg")
    assert row.content == svg and "not shown as a figure" in row.status_note
    assert "SAGAN_FIGURE_MARKUP_MAX_BYTES" in row.status_note
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Figure.id))) == 0
        assert jobs.queue(jobs.ARTIFACTS).count == 0


def test_a_markup_figure_within_the_limit_is_sanitized_by_the_job(app, client, make_live_pod, worker):
    """A 300 KB SVG: processing at first with an empty figure, then sanitized (script gone) and ready."""
    pod = make_live_pod("Mid SVG")
    svg = flat_svg(300 * 1024)
    assert upload(client, pod.secret, "dots.svg", svg, "image/svg+xml").get_json()["status"] == "processing"
    worker()
    row = artifact_row(app, "dots.svg")
    assert row.status == "ready" and row.content == svg and row.status_note is None
    with app.app_context():
        content = db.session.scalar(sa.select(Figure.content).where(Figure.artifact_id == row.id))
    assert "<circle" in content and "alert" not in content


def test_a_job_past_its_time_limit_leaves_the_artifact_failed_with_the_reason(
        app, client, owner, make_live_pod, monkeypatch, tmp_path):
    """With a 1 s limit on the artifacts queue, does a real worker process stop the sanitizing of
    a 1.9 MB SVG (about 3.6 s of work on an idle machine; 600 KB took 1.4 s, too close), and the
    artifact end `failed` with "took longer than 1 s", its upload dropped, shown on the pod card
    and refused for download? The worker is its own process, as deployed: a work horse forked
    from a long test session inherited that session's state, and its time limit did not fire
    in full runs."""
    monkeypatch.setitem(app.config, "JOB_TIMEOUT_ARTIFACTS", 1)
    pod = make_live_pod("Slow SVG")
    assert upload(client, pod.secret, "slow.svg", flat_svg(1900 * 1024), "image/svg+xml").status_code == 201
    process = start_worker(worker_env(tmp_path), "artifacts")
    try:
        wait_until(lambda: artifact_row(app, "slow.svg").status != "processing", "the artifact job never ended")
    finally:
        kill_tree(process)
    row = artifact_row(app, "slow.svg")
    assert row.status == "failed" and row.pending_content is None
    assert row.status_note == "Could not be processed: took longer than 1 s (SAGAN_JOB_TIMEOUT_ARTIFACTS)."
    page = client.get(f"/experiments/{pod.number}")
    assert "slow.svg: Could not be processed: took longer than 1 s" in page.text
    download = client.get(f"/artifacts/{row.id}")
    assert download.status_code == 409 and "took longer than 1 s" in download.text


def test_the_sweep_fails_an_artifact_whose_job_died_with_its_process(app, client, make_live_pod, tmp_path,
                                                                     monkeypatch):
    """SIGKILL the work horse of a real artifact worker mid-job (as the kernel's OOM killer
    would): RQ records the job failed, and does the scheduler's sweep then mark the artifact
    failed with that reason instead of leaving it `processing` for ever?"""
    monkeypatch.setitem(app.config, "JOB_TIMEOUT_ARTIFACTS", 600)
    pod = make_live_pod("Killed SVG")
    upload(client, pod.secret, "big.svg", flat_svg(1500 * 1024), "image/svg+xml")
    row = artifact_row(app, "big.svg")
    process = start_worker(worker_env(tmp_path), "artifacts")
    try:
        with app.app_context():
            job = Job.fetch(artifacts.job_id(row.id, row.sha256), connection=redis_store.connection(),
                            serializer=jobs.SERIALIZER)
        wait_until(lambda: job.get_status() == "started", "the artifact worker never started the job")
        wait_until(lambda: psutil.Process(process.pid).children(), "no work horse")
        for horse in psutil.Process(process.pid).children():
            horse.kill()
        wait_until(lambda: job.get_status() == "failed", "RQ never failed the job")
    finally:
        kill_tree(process)
    with app.app_context():
        assert artifacts.reconcile()["failed"] == [row.id]
        assert artifacts.reconcile()["failed"] == []  # once
    failed = artifact_row(app, "big.svg")
    assert failed.status == "failed" and failed.status_note == artifacts.KILLED_NOTE


def test_the_sweep_queues_again_an_artifact_whose_job_was_lost(app, client, make_live_pod):
    """Redis flushed after the upload: does the sweep put the job back on the artifacts queue?"""
    pod = make_live_pod("Lost job")
    upload(client, pod.secret, "dots.svg", flat_svg(200 * 1024), "image/svg+xml")
    row = artifact_row(app, "dots.svg")
    with app.app_context():
        redis_store.connection().flushdb()
        assert artifacts.reconcile()["queued"] == [row.id]
        assert jobs.queue(jobs.ARTIFACTS).job_ids == [artifacts.job_id(row.id, row.sha256)]
        assert artifacts.reconcile()["queued"] == []  # the job is live now


def test_an_artifact_waiting_with_no_artifact_worker_says_so(app, client, make_live_pod, monkeypatch):
    """Past the queue's time limit with its job still queued and no worker serving `artifacts`,
    does the artifact say what it waits for (never a silent stall)?"""
    monkeypatch.setitem(app.config, "JOB_TIMEOUT_ARTIFACTS", 60)
    pod = make_live_pod("No worker")
    upload(client, pod.secret, "dots.svg", flat_svg(200 * 1024), "image/svg+xml")
    with app.app_context():
        assert artifacts.reconcile()["waiting"] == []  # not yet: within its time
        clock.advance(timedelta(seconds=61))
        assert len(artifacts.reconcile()["waiting"]) == 1
    row = artifact_row(app, "dots.svg")
    assert row.status == "processing" and row.status_note == artifacts.NO_WORKER_NOTE


def test_a_newer_upload_supersedes_the_queued_job_of_the_older(app, client, make_live_pod, worker):
    """The same file uploaded twice before the worker ran: is the newer one processed and the
    older job a no-op, rather than the older content winning?"""
    pod = make_live_pod("Twice")
    first, second = flat_svg(200 * 1024), flat_svg(220 * 1024)
    upload(client, pod.secret, "dots.svg", first, "image/svg+xml")
    upload(client, pod.secret, "dots.svg", second, "image/svg+xml")
    worker()
    row = artifact_row(app, "dots.svg")
    assert row.status == "ready" and row.content == second
    with app.app_context():
        assert db.session.get(ArtifactUsage, pod.id).bytes == len(second)


@pytest.mark.slow
def test_an_agent_job_starts_while_a_slow_artifact_job_runs(app, client, make_live_pod, make_experiment,
                                                            fake_anthropic, tmp_path, monkeypatch):
    """The worker processes `make run` starts (scripts/run_embedded.py's WORKERS), for real: while
    the artifact worker sanitizes a 3 MB SVG (many seconds), is a planner run enqueued meanwhile
    started at once — its model call made while the artifact is still processing?"""
    monkeypatch.setitem(app.config, "FIGURE_MARKUP_MAX_BYTES", 4 * 1024 * 1024)
    monkeypatch.setitem(app.config, "JOB_TIMEOUT_ARTIFACTS", 600)
    env = worker_env(tmp_path, SAGAN_FIGURE_MARKUP_MAX_BYTES=str(4 * 1024 * 1024), **model_env(fake_anthropic))
    # As `make run` starts them, less the scheduler (its ticks would watch this test's pods).
    processes = [subprocess.Popen(argv if "--no-scheduler" in argv else [*argv, "--no-scheduler"], cwd=ROOT,
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
                 for argv in run_embedded.WORKERS.values()]
    try:
        with app.app_context():
            connection = redis_store.connection()
        wait_until(lambda: len(Worker.all(connection=connection)) == len(processes), "the workers never started",
                   timeout=60)
        pod = make_live_pod("Slow artifact")
        upload(client, pod.secret, "huge.svg", flat_svg(3 * 1024 * 1024), "image/svg+xml")
        row = artifact_row(app, "huge.svg")
        job = Job.fetch(artifacts.job_id(row.id, row.sha256), connection=connection, serializer=jobs.SERIALIZER)
        wait_until(lambda: job.get_status() == "started", "the artifact worker never started its job")
        fake_anthropic.script(reply(text("Planned.")))
        number = make_experiment("Meanwhile", status="planning")
        queued_plan_run(app, number)
        # What matters is the order, not a time (this machine's load decides that): the agent
        # job reaches the model while the artifact job is still at work. With one worker for
        # both queues, as before, it reached it only after.
        wait_until(lambda: fake_anthropic.requests or job.get_status() != "started",
                   "neither the agent job nor the artifact job moved", timeout=120)
        assert fake_anthropic.requests, "the agent job waited for the artifact job to end"
        assert job.get_status() == "started" and artifact_row(app, "huge.svg").status == "processing"
    finally:
        for process in processes:
            kill_tree(process)
