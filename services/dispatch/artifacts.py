"""What an artifact must fit and what it needs before anyone reads it: the upload budgets,
and its processing (redaction, a figure's sanitizing) — inline when small, else by a job on
the `artifacts` queue.

Budgets. `ArtifactUsage` keeps, per pod and per experiment, how many artifacts are stored
and their bytes. `room_for` tells an upload, before its body is read, how many bytes it may
send (a 413 naming the budget when its count is full); `charge` adds a stored file to both
rows with one conditional UPDATE each, as the last statement of the upload's transaction.
On PostgreSQL the UPDATE takes the row's lock, and the second of two racing uploads
re-checks its condition against the first's committed total (READ COMMITTED re-reads the
row it waited for): both cannot pass the budget. SQLite takes its write lock at BEGIN
(app.py), so uploads are serialized there anyway. The experiment's row is updated before
the pod's, always, so two uploads never wait on each other crosswise.

Processing. Redacting text costs about a second per megabyte, sanitizing markup about five
(docs/performance.md): an upload small enough is processed inside its request. A larger
one is stored `processing`, its bytes in `pending_content` (its `content` stays empty, so
no reader can serve it unredacted), and `process` — on the `artifacts` queue, which only
worker processes of its own serve — redacts it, sanitizes its figure and marks it `ready`.
A job that fails, or passes JOB_TIMEOUT_ARTIFACTS, marks it `failed` with the reason; the
scheduler's `reconcile` queues again an artifact whose job was lost, and fails one whose
job died with its process. Markup over FIGURE_MARKUP_MAX_BYTES is not made a figure at all:
it is kept as a file to download.
"""
from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from flask import current_app
from rq import Worker, get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.timeouts import JobTimeoutException
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError

from models import Artifact, ArtifactUsage, Figure, db
from services.core import redis_store
from services.core.clock import utcnow
from services.core.errors import TooLarge, ValidationError
from services.core.redact import redact, redact_json_text
from services.core.sanitize import check_nesting, sanitize_result_html
from services.core.unlocked import release_reads
from services.workflow import jobs

log = logging.getLogger(__name__)

# Up to these sizes the work is done inside the upload (well under a second each); above,
# by the job. A pod's uploaded log (its last 1 MB, scripts/pod_bootstrap.sh) is text.
INLINE_REDACT_BYTES = 512 * 1024
INLINE_SANITIZE_BYTES = 64 * 1024
FIGURE_KINDS = {"image/svg+xml": "svg", "image/png": "image", "image/jpeg": "image", "text/html": "html_artifact"}
MARKUP_KINDS = ("svg", "html_artifact")
PROCESS_JOB = "workers.artifacts.process"


# --- budgets -------------------------------------------------------------------------------------

# (scope, measure) → the setting that holds its limit.
BUDGET_SETTINGS = {
    ("pod", "count"): "ARTIFACT_POD_MAX_COUNT", ("pod", "bytes"): "ARTIFACT_POD_MAX_BYTES",
    ("experiment", "count"): "ARTIFACT_EXPERIMENT_MAX_COUNT", ("experiment", "bytes"): "ARTIFACT_EXPERIMENT_MAX_BYTES",
}


def _limit(scope: str, measure: str) -> int:
    return int(current_app.config[BUDGET_SETTINGS[(scope, measure)]])


def over_budget(scope: str, measure: str, *, used: int, size: int, name: str, at_least: bool = False) -> TooLarge:
    """The 413 for an upload that does not fit: which budget, its limit, what is used, and
    what the upload would add (one file, or `size` bytes — `at_least` for a chunked body,
    whose reading stopped there)."""
    limit = _limit(scope, measure)
    whose = "this pod" if scope == "pod" else "this experiment"
    setting = "SAGAN_" + BUDGET_SETTINGS[(scope, measure)]
    if measure == "count":
        message = (f"{whose.capitalize()} has stored {used:,} artifacts, its limit ({setting}={limit:,}): {name} "
                   "was not stored. Upload fewer, larger files (an archive of many small ones).")
    else:
        adds = f"at least {size:,}" if at_least else f"{size:,}"
        message = (f"{name} would take {whose}'s artifacts past their budget of {limit:,} bytes ({setting}): "
                   f"{used:,} bytes are stored and the upload adds {adds}. Nothing was stored.")
    return TooLarge(message, code="artifact_budget", budget=f"{scope}_{measure}", limit=limit, used=used,
                    size=1 if measure == "count" else size)


@dataclass(frozen=True)
class Room:
    """How many bytes an upload may send, and the budget that says so (None: the per-file cap)."""

    bytes: int
    scope: str | None
    used: int  # that budget's bytes in use, not counting a file the upload replaces

    def refusal(self, size: int, name: str, *, at_least: bool = False) -> TooLarge:
        if self.scope is None:
            if at_least:
                return TooLarge(f"{name} is more than {self.bytes:,} bytes, the limit per file "
                                "(SAGAN_ARTIFACT_MAX_BYTES).")
            return TooLarge(f"{name} is {size:,} bytes; the limit per file is {self.bytes:,} (SAGAN_ARTIFACT_MAX_BYTES).")
        return over_budget(self.scope, "bytes", used=self.used, size=size, name=name, at_least=at_least)


def _usage(scope_ids) -> dict:
    scope_ids = [i for i in scope_ids if i]
    if not scope_ids:
        return {}
    rows = db.session.execute(sa.select(ArtifactUsage.scope_id, ArtifactUsage.files, ArtifactUsage.bytes)
                              .where(ArtifactUsage.scope_id.in_(scope_ids))).all()
    return {row.scope_id: (row.files, row.bytes) for row in rows}


def room_for(experiment_id, pod_id, name: str) -> Room:
    """Before an upload's body is read: the bytes it may have. A count budget that is full
    is refused here (a 413); a replaced file frees its own count and bytes. A hint only:
    `charge` decides, under the rows' locks."""
    replaced = db.session.scalar(sa.select(Artifact.size).where(Artifact.pod_id == pod_id, Artifact.name == name)) \
        if pod_id else None
    usage = _usage((experiment_id, pod_id))
    scopes = [("experiment", experiment_id)] + ([("pod", pod_id)] if pod_id else [])
    room = Room(int(current_app.config["ARTIFACT_MAX_BYTES"]), None, 0)
    for scope, scope_id in scopes:
        files, stored = usage.get(scope_id, (0, 0))
        if replaced is None and files + 1 > _limit(scope, "count"):
            raise over_budget(scope, "count", used=files, size=1, name=name)
        used = stored - (replaced or 0)
        free = _limit(scope, "bytes") - used
        if free < room.bytes:
            room = Room(max(free, 0), scope, used)
    return room


def ensure_usage_rows(experiment_id, pod_id) -> None:
    """The experiment's usage row, and the pod's when there is one, created empty if missing."""
    rows = [{"scope_id": experiment_id, "scope": "experiment", "experiment_id": experiment_id, "files": 0,
             "bytes": 0}]
    if pod_id:
        rows.append({"scope_id": pod_id, "scope": "pod", "experiment_id": experiment_id, "files": 0, "bytes": 0})
    if db.engine.dialect.name == "postgresql":
        db.session.execute(pg_insert(ArtifactUsage).values(rows).on_conflict_do_nothing())
    else:
        db.session.execute(sa.insert(ArtifactUsage).values(rows).prefix_with("OR IGNORE"))


def charge(experiment_id, pod_id, *, files: int, size: int, name: str) -> None:
    """Add `files` artifacts and `size` bytes (either may be negative, for a replaced file)
    to the experiment's usage and the pod's, or raise the 413 of the first budget they would
    pass; the caller rolls back. Call it last before the commit: it holds the rows' locks."""
    ensure_usage_rows(experiment_id, pod_id)
    for scope, scope_id in (("experiment", experiment_id), ("pod", pod_id)):
        if scope_id is None:
            continue
        conditions = [ArtifactUsage.scope_id == scope_id]
        # Only what grows is checked: a smaller replacement is always let through, even
        # past a budget lowered since.
        if files > 0:
            conditions.append(ArtifactUsage.files + files <= _limit(scope, "count"))
        if size > 0:
            conditions.append(ArtifactUsage.bytes + size <= _limit(scope, "bytes"))
        added = db.session.execute(
            sa.update(ArtifactUsage).where(*conditions)
            .values(files=ArtifactUsage.files + files, bytes=ArtifactUsage.bytes + size)
            .returning(ArtifactUsage.scope_id).execution_options(synchronize_session=False)).first()
        if added is None:
            used_files, used_bytes = _usage((scope_id,)).get(scope_id, (0, 0))
            if files > 0 and used_files + files > _limit(scope, "count"):
                raise over_budget(scope, "count", used=used_files, size=files, name=name)
            raise over_budget(scope, "bytes", used=used_bytes, size=size, name=name)


def usage_of(scope: str, scope_id) -> dict:
    """A pod's or an experiment's artifacts against its budgets, for pages and the API."""
    return usage_by_id(scope, [scope_id])[scope_id]


def usage_by_id(scope: str, scope_ids) -> dict:
    """`usage_of` for several pods (or experiments) in one query."""
    stored = _usage(scope_ids)
    limits = {"maxFiles": _limit(scope, "count"), "maxBytes": _limit(scope, "bytes")}
    return {scope_id: {"files": stored.get(scope_id, (0, 0))[0], "bytes": stored.get(scope_id, (0, 0))[1], **limits}
            for scope_id in scope_ids}


# --- storing and processing ----------------------------------------------------------------------

@dataclass(frozen=True)
class Stored:
    """What a caller says about a stored artifact after the commit (reading the row again
    then would load its content)."""

    id: uuid.UUID
    name: str
    size: int
    sha256: str
    status: str

    @classmethod
    def of(cls, artifact: Artifact) -> Stored:
        return cls(artifact.id, artifact.name, artifact.size, artifact.sha256, artifact.status)


def _is_text(content_type: str) -> bool:
    return content_type.startswith("text/") or content_type == "application/json"


def _redacted(content_type: str, content: bytes, name: str) -> bytes:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError(f"{name} is not UTF-8 text.", field="content") from None
    # JSON is redacted value by value, so a redaction never breaks the document.
    return (redact_json_text(text) if content_type == "application/json" else redact(text)).encode("utf-8")


def _makes_figure_markup(content_type: str, size: int) -> bool:
    return FIGURE_KINDS.get(content_type) in MARKUP_KINDS and size <= current_app.config["FIGURE_MARKUP_MAX_BYTES"]


def _figure_note(content_type: str, size: int) -> str | None:
    """Why an SVG or HTML artifact is not shown as a figure: its markup is over the limit."""
    if FIGURE_KINDS.get(content_type) not in MARKUP_KINDS or _makes_figure_markup(content_type, size):
        return None
    limit = current_app.config["FIGURE_MARKUP_MAX_BYTES"]
    return (f"Kept as a file to download, not shown as a figure: {size:,} bytes of markup is over the figure "
            f"limit of {limit:,} (SAGAN_FIGURE_MARKUP_MAX_BYTES).")


def _claim_row(experiment_id, pod_id, name: str, content_type: str) -> tuple[Artifact, int | None]:
    """The row this upload writes, locked until the commit: the pod's artifact of this name
    (and its size, which the upload frees) or a new one. Two uploads of one new name at
    once: the second's insert waits for the first, fails on the unique (pod, name), and
    replaces what the first stored instead of answering a 500."""
    for _attempt in range(2):
        if pod_id is not None:
            existing = db.session.scalar(sa.select(Artifact).where(Artifact.pod_id == pod_id, Artifact.name == name)
                                         .with_for_update())
            if existing is not None:
                return existing, existing.size
        artifact = Artifact(id=uuid.uuid4(), pod_id=pod_id, experiment_id=experiment_id, name=name,
                            content_type=content_type, size=0, sha256="", content=b"", status="processing")
        try:
            with db.session.begin_nested():
                db.session.add(artifact)
        except IntegrityError:
            if pod_id is None:
                raise
            continue
        return artifact, None
    raise ValidationError(f"{name} is being uploaded by another request right now; send it again.", field="name")


def store(*, experiment_id, pod_id, name: str, content_type: str, content: bytes) -> Artifact:
    """Store one artifact (a pod's replaces its file of the same name) and charge it to the
    budgets (a 413 when it does not fit; the caller rolls back). Processed now when small;
    a larger one is left `processing` for `enqueue_processing`, after the commit.

    `name` and `content_type` are already checked (services.dispatch.progress)."""
    is_text = _is_text(content_type)
    if is_text:
        try:
            content.decode("utf-8")  # milliseconds even for 20 MB: a bad file is a 400 now, not a failed job
        except UnicodeDecodeError:
            raise ValidationError(f"{name} is not UTF-8 text.", field="content") from None
    markup = _makes_figure_markup(content_type, len(content))
    if markup:
        check_nesting(content.decode("utf-8", errors="replace"))  # linear: a hostile document is a 400 now
    deferred = (is_text and len(content) > INLINE_REDACT_BYTES) or (markup and len(content) > INLINE_SANITIZE_BYTES)
    figure_markup = None
    if not deferred:
        # Redacting and sanitizing are pure work on the upload: done before the first write,
        # with the request's read-only transaction ended first (SQLite's write lock is not
        # held meanwhile; services.core.unlocked). Inside a caller's savepoint it stays open.
        release_reads()
        if is_text:
            content = _redacted(content_type, content, name)
        figure_markup = sanitize_result_html(content.decode("utf-8", errors="replace")) if markup else None
    artifact, replaced_size = _claim_row(experiment_id, pod_id, name, content_type)
    artifact.content_type = content_type
    artifact.status_note = _figure_note(content_type, len(content))
    if deferred:
        artifact.content, artifact.pending_content, artifact.status = b"", content, "processing"
    else:
        artifact.content, artifact.pending_content, artifact.status = content, None, "ready"
    artifact.size, artifact.sha256 = len(content), hashlib.sha256(content).hexdigest()
    db.session.flush()
    _keep_figure(artifact, markup, figure_markup)
    charge(experiment_id, pod_id, files=0 if replaced_size is not None else 1,
           size=artifact.size - (replaced_size or 0), name=name)
    return artifact


def _keep_figure(artifact: Artifact, markup: bool, sanitized: str | None) -> None:
    """Images, and SVG and HTML within the figure limit, are figures (markup sanitized on
    write, SPEC §8.2; empty until the job has sanitized it). Markup over the limit is not:
    a figure this artifact had before goes."""
    kind = FIGURE_KINDS.get(artifact.content_type)
    if kind is None:
        return
    figure = db.session.scalar(sa.select(Figure).where(Figure.artifact_id == artifact.id))
    if kind in MARKUP_KINDS and not markup:
        if figure is not None:
            db.session.delete(figure)
        return
    if figure is None:
        db.session.add(Figure(id=uuid.uuid4(), experiment_id=artifact.experiment_id, kind=kind,
                              title=artifact.name, artifact_id=artifact.id, content=sanitized,
                              content_type=artifact.content_type))
    else:
        figure.content = sanitized


def job_id(artifact_id, digest: str) -> str:
    """One job per upload: a newer upload of the same file gets a job of its own, and the
    older job, finding another digest on the row, does nothing."""
    return f"artifact-{artifact_id}-{digest[:16]}"


def enqueue_processing(stored: Stored) -> str | None:
    """After the upload committed: queue the job of an artifact left `processing`."""
    if stored.status != "processing":
        return None
    return jobs.enqueue_unique(jobs.ARTIFACTS, PROCESS_JOB, str(stored.id), stored.sha256,
                               job_id=job_id(stored.id, stored.sha256))


def timeout_note(seconds: int) -> str:
    return f"Could not be processed: took longer than {seconds:,} s (SAGAN_JOB_TIMEOUT_ARTIFACTS)."


FAILED_NOTE = "Could not be processed: the job failed (the artifact worker's log has the error)."
KILLED_NOTE = "Could not be processed: its worker process ended in the middle (killed, or out of memory)."
NO_WORKER_NOTE = "Waiting for a worker on the artifacts queue: none is running (docs/deploy.md)."


def process(artifact_id, digest: str) -> str:
    """The job: redact the upload, sanitize its figure, mark it `ready` — unless a newer
    upload replaced it meanwhile. Fails it with the reason when the work fails or runs out
    of time (RQ's job timeout raises JobTimeoutException here), then lets RQ record it."""
    artifact_id = uuid.UUID(str(artifact_id))
    row = db.session.execute(sa.select(Artifact.content_type, Artifact.status, Artifact.sha256, Artifact.name,
                                       Artifact.size, Artifact.experiment_id, Artifact.pod_id,
                                       sa.func.coalesce(Artifact.pending_content, Artifact.content).label("raw"))
                             .where(Artifact.id == artifact_id)).first()
    if row is None or row.status != "processing" or row.sha256 != digest:
        return "superseded"
    db.session.commit()  # no transaction (SQLite's write lock) is held while working
    try:
        content = _redacted(row.content_type, row.raw, row.name) if _is_text(row.content_type) else row.raw
        markup = _makes_figure_markup(row.content_type, len(row.raw))
        sanitized = sanitize_result_html(content.decode("utf-8", errors="replace")) if markup else None
    except JobTimeoutException:
        job = get_current_job()
        _fail(artifact_id, digest, timeout_note(job.timeout if job else jobs.job_timeout(jobs.ARTIFACTS)))
        raise
    except ValidationError as exc:
        _fail(artifact_id, digest, f"Could not be processed: {exc.message}")
        return "failed"
    except Exception:
        _fail(artifact_id, digest, FAILED_NOTE)
        raise
    done = db.session.execute(
        sa.update(Artifact).where(Artifact.id == artifact_id, Artifact.sha256 == digest,
                                  Artifact.status == "processing")
        .values(content=content, pending_content=None, size=len(content),
                sha256=hashlib.sha256(content).hexdigest(), status="ready",
                status_note=_figure_note(row.content_type, len(row.raw)), updated_at=utcnow())
        .returning(Artifact.id).execution_options(synchronize_session=False)).first()
    if done is None:
        db.session.rollback()
        return "superseded"
    if markup:
        db.session.execute(sa.update(Figure).where(Figure.artifact_id == artifact_id).values(content=sanitized)
                           .execution_options(synchronize_session=False))
    grown = len(content) - row.size  # redaction changes the size; the budgets follow, unchecked
    if grown:
        for scope_id in (row.experiment_id, row.pod_id):  # the experiment's row first, as in `charge`
            if scope_id is not None:
                db.session.execute(sa.update(ArtifactUsage).where(ArtifactUsage.scope_id == scope_id)
                                   .values(bytes=ArtifactUsage.bytes + grown)
                                   .execution_options(synchronize_session=False))
    db.session.commit()
    return "ready"


def _fail(artifact_id, digest: str, note: str) -> None:
    """Mark the upload `failed` with `note`; its unprocessed bytes are dropped (never readable)."""
    db.session.rollback()
    db.session.execute(sa.update(Artifact).where(Artifact.id == artifact_id, Artifact.sha256 == digest,
                                                 Artifact.status == "processing")
                       .values(status="failed", status_note=note[:500], pending_content=None, updated_at=utcnow())
                       .execution_options(synchronize_session=False))
    db.session.commit()
    log.warning("artifact %s: %s", artifact_id, note)


def reconcile() -> dict:
    """The scheduler's sweep over `processing` artifacts: queue again one whose job is gone
    (a lost enqueue, Redis flushed, rows the migration handed over); fail one whose job
    failed without saying so (its work horse killed, out of memory: RQ records the job
    failed, the artifact would wait for ever); say so on one that waits while no worker
    serves the `artifacts` queue."""
    rows = db.session.execute(sa.select(Artifact.id, Artifact.sha256, Artifact.updated_at, Artifact.status_note)
                              .where(Artifact.status == "processing").order_by(Artifact.updated_at)
                              .limit(500)).all()
    outcome: dict[str, list] = {"queued": [], "failed": [], "waiting": []}
    if not rows:
        return outcome
    connection = redis_store.connection()
    timeout = jobs.job_timeout(jobs.ARTIFACTS)
    served = None
    for row in rows:
        try:
            job = Job.fetch(job_id(row.id, row.sha256), connection=connection, serializer=jobs.SERIALIZER)
            state = job.get_status(refresh=False)
        except NoSuchJobError:
            job, state = None, None
        if state == "failed":
            _fail(row.id, row.sha256, _failure_note(job, timeout))
            outcome["failed"].append(row.id)
        elif state not in jobs.LIVE_JOB_STATES:
            enqueue_processing(Stored(row.id, "", 0, row.sha256, "processing"))
            outcome["queued"].append(row.id)
        elif state == "queued" and row.updated_at < utcnow() - timedelta(seconds=timeout):
            if served is None:
                served = any(jobs.ARTIFACTS in worker.queue_names() for worker in Worker.all(connection=connection))
            if not served and row.status_note != NO_WORKER_NOTE:
                db.session.execute(sa.update(Artifact).where(Artifact.id == row.id, Artifact.status == "processing")
                                   .values(status_note=NO_WORKER_NOTE).execution_options(synchronize_session=False))
                db.session.commit()
                outcome["waiting"].append(row.id)
    return outcome


def _failure_note(job: Job, timeout: int) -> str:
    result = job.latest_result()
    error = (result.exc_string if result is not None else None) or ""
    if "JobTimeoutException" in error:
        return timeout_note(job.timeout or timeout)
    if "terminated unexpectedly" in error:
        return KILLED_NOTE
    return FAILED_NOTE


def markup_of(artifact: Artifact) -> str | None:
    """The sanitized markup of an SVG or HTML artifact's figure (None when it has none)."""
    return db.session.scalar(sa.select(Figure.content).where(Figure.artifact_id == artifact.id,
                                                            Figure.kind.in_(MARKUP_KINDS)))
