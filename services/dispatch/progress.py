"""Progress and artifact ingest from pods (SPEC §6.6, §6.10).

Hot path: on PostgreSQL one statement per post whatever the pod count, in autocommit: it
looks up the token, inserts the post — a duplicate `(pod, seq)` stops here —, updates the
pod, appends the timeline and run events. The pod's own row is the heartbeat; the watcher reads it.
"""
from __future__ import annotations

import json
import math
import posixpath
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import sqlalchemy as sa
from flask import current_app

from models import Artifact, Experiment, Pod, PodProgressPost, WorkflowEvent, db
from services.core import lean_reads
from services.core.clock import utcnow
from services.core.errors import TooLarge, ValidationError
from services.core.redact import redact
from services.dispatch import artifacts, tokens
from services.dispatch.metrics import NotANumber, metric_number
from services.workflow import runs

MESSAGE_MAX = 2_000
METRICS_MAX = 50
MILESTONE_MAX = 80
BOOTSTRAP_MARK = "bootstrap complete"
LAST_EVENT_TOUCH = timedelta(seconds=5)
ALLOWED_TYPES = {
    "json": "application/json", "csv": "text/csv", "tsv": "text/tab-separated-values",
    "txt": "text/plain", "log": "text/plain", "svg": "image/svg+xml", "png": "image/png",
    "jpeg": "image/jpeg", "jpg": "image/jpeg", "html": "text/html", "md": "text/markdown",
}


@dataclass
class ProgressPost:
    pct: float
    message: str
    milestone: str | None
    verdict: str | None
    seq: int | None
    exit_code: int | None
    metrics: dict | None

    @property
    def is_bootstrap(self) -> bool:
        """The pod's bootstrap finished (again): what the crash-loop check counts."""
        return self.milestone == "bootstrap" or BOOTSTRAP_MARK in self.message.lower()


def parse_progress(data) -> ProgressPost:
    """Validate a progress body; every problem is a clear 400."""
    if not isinstance(data, dict):
        raise ValidationError("The body must be a JSON object.", code="invalid_json")
    known = {"progressPct", "message", "milestone", "verdict", "seq", "exitCode", "metrics"}
    unknown = set(data) - known
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(sorted(unknown))}.", field=sorted(unknown)[0])
    pct = data.get("progressPct")
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not math.isfinite(pct) or not 0 <= pct <= 100:
        raise ValidationError("progressPct must be a number from 0 to 100.", field="progressPct")
    message = data.get("message", "")
    if not isinstance(message, str):
        raise ValidationError("message must be text.", field="message")
    if len(message) > MESSAGE_MAX:
        raise ValidationError(f"message is {len(message)} characters; the limit is {MESSAGE_MAX}.", field="message")
    for name in ("milestone", "verdict"):
        value = data.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > MILESTONE_MAX):
            raise ValidationError(f"{name} must be text of at most {MILESTONE_MAX} characters.", field=name)
    seq = data.get("seq")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**62):
        raise ValidationError("seq must be a non-negative whole number.", field="seq")
    exit_code = data.get("exitCode")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)
                                  or not -2**31 <= exit_code < 2**31):
        raise ValidationError("exitCode must be a whole number.", field="exitCode")
    metrics = data.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, dict):
            raise ValidationError("metrics must map names to numbers.", field="metrics")
        if len(metrics) > METRICS_MAX:
            raise ValidationError(f"At most {METRICS_MAX} metrics per post.", field="metrics")
        numbers = {}
        for key, value in metrics.items():
            if len(key) > 80:
                raise ValidationError(f"Metric {key[:40]!r}…: names have at most 80 characters.", field="metrics")
            try:
                # NaN, ±Infinity and numbers past ±1e300 are kept as null: a diverged loss is
                # worth seeing, and stored JSON (and PostgreSQL's jsonb) has no NaN.
                numbers[key] = metric_number(value)
            except NotANumber:
                raise ValidationError(f"Metric {key[:40]!r} must be a number.", field="metrics") from None
        metrics = numbers
    return ProgressPost(float(pct), redact(message) or "", redact(data.get("milestone")), redact(data.get("verdict")),
                        seq, exit_code, _redacted_names(metrics))


def _redacted_names(metrics: dict | None) -> dict | None:
    """Metric names are stored too, so they pass the redactor: all in one call (a hot path)."""
    if not metrics:
        return metrics
    names = list(metrics)
    cleaned = (redact("\n".join(names)) or "").split("\n")
    if len(cleaned) != len(names):  # a pattern spanned two names: redact them one by one
        cleaned = [redact(name) for name in names]
    return dict(zip(cleaned, metrics.values()))


# PostgreSQL does the whole post in one round trip: every write hangs off the insert of the
# post, so a duplicate (pod, seq) — the insert does nothing — writes nothing else either.
# `pod_row` is the pod the post is for, found by its token's digest: the token check and the
# write are one statement, run in autocommit (no BEGIN, no COMMIT round trip). An unknown or
# expired token finds no pod, so nothing is written, and the statement answers no pod id.
_PG_RECORD_TEMPLATE = """
WITH pod_row AS ({pod_row}), post AS (
  INSERT INTO pod_progress_posts (id, pod_id, seq, progress_pct, message, milestone, exit_code, metrics, created_at)
  SELECT :post_id, pod_row.id, CAST(:seq AS BIGINT), :pct, :message, :milestone, CAST(:exit_code AS INTEGER),
         CAST(:metrics AS JSONB), :now
  FROM pod_row
  ON CONFLICT ON CONSTRAINT uq_pod_progress_posts_pod_seq DO NOTHING
  RETURNING id
), pod AS (
  -- Posts may arrive out of order (a pod retries a failed post later): the progress shown
  -- is the newest seq's. Re-checked against the latest row version under concurrency.
  -- The exit post (exitCode) is the pod's last word whatever its seq: the bootstrap and
  -- the training script number their posts apart, so the script's may run higher.
  UPDATE pods SET
         progress_pct = CASE WHEN CAST(:seq AS BIGINT) IS NULL OR progress_seq IS NULL
                                  OR CAST(:seq AS BIGINT) >= progress_seq
                                  OR CAST(:exit_code AS INTEGER) IS NOT NULL THEN :pct ELSE progress_pct END,
         progress_message = CASE WHEN CAST(:seq AS BIGINT) IS NULL OR progress_seq IS NULL
                                  OR CAST(:seq AS BIGINT) >= progress_seq
                                  OR CAST(:exit_code AS INTEGER) IS NOT NULL THEN :message ELSE progress_message END,
         progress_seq = GREATEST(progress_seq, CAST(:seq AS BIGINT)),
         last_progress_at = :now,
         last_heartbeat_at = :now, updated_at = :now, bootstrap_count = bootstrap_count + :bootstrap_inc,
         exit_code = COALESCE(CAST(:exit_code AS INTEGER), exit_code),
         exited_at = CASE WHEN CAST(:exit_code AS INTEGER) IS NULL THEN exited_at ELSE :now END
  WHERE id = (SELECT id FROM pod_row) AND EXISTS (SELECT 1 FROM post)
), event AS (
  INSERT INTO workflow_events (id, entity_kind, entity_id, experiment_id, event_type, actor_kind, actor_id,
                               note, metadata, created_at, updated_at)
  SELECT :event_id, 'experiment', pod_row.experiment_id, pod_row.experiment_id, 'progress', 'pod',
         CAST(pod_row.id AS TEXT), :note,
         CAST(:event_meta AS JSONB) || jsonb_build_object('pod', pod_row.name, 'run_index', pod_row.run_index),
         :now, :now
  FROM pod_row WHERE EXISTS (SELECT 1 FROM post)
), touch AS (
  UPDATE experiments SET last_event_at = :now
  WHERE id = (SELECT experiment_id FROM pod_row) AND EXISTS (SELECT 1 FROM post)
    AND (last_event_at IS NULL OR last_event_at < :touch_before)
), seq AS (
  UPDATE agent_runs SET last_seq = last_seq + 1
  WHERE id = (SELECT agent_run_id FROM pod_row) AND EXISTS (SELECT 1 FROM post)
  RETURNING id, last_seq
), run_event AS (
  INSERT INTO run_events (id, run_id, seq, event_type, body, metadata, created_at, updated_at)
  SELECT :run_event_id, seq.id, seq.last_seq, 'pod_progress', :note,
         jsonb_build_object('pod_id', CAST(pod_row.id AS TEXT)) || CAST(:run_meta AS JSONB), :now, :now
  FROM seq, pod_row
)
SELECT (SELECT id FROM pod_row) AS pod_id, (SELECT id FROM post) AS post_id
"""
_PG_RECORD_BY_TOKEN = sa.text(_PG_RECORD_TEMPLATE.format(pod_row=tokens.VALID_POD_SQL))

# Runs one statement and answers its first row as a tuple (None for no row): how the write
# reaches PostgreSQL. `autocommit_connection` by default; the lean ingest layer passes its
# own (services/core/lean_reads.py: compiled once, on this process's kept connection).
Connection = Callable[[sa.Executable, dict], "tuple | None"]


def autocommit_connection(statement: sa.Executable, params: dict) -> tuple | None:
    """The statement on a pooled connection of the app's engine, in autocommit: no BEGIN, no
    COMMIT round trip (the request's session has not touched the database)."""
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        row = conn.execute(statement, params).first()
    return tuple(row) if row is not None else None


def lean_connection(statement: sa.Executable, params: dict) -> tuple | None:
    """lean_reads' kept connection, for a write: never run twice after a dropped connection."""
    return lean_reads.first_row(statement, params, repeatable=False)


@dataclass
class Recorded:
    """What storing a post did: the pod it was for, and the timeline event when it was new."""
    pod_id: uuid.UUID
    event_id: uuid.UUID | None

    @property
    def created(self) -> bool:
        return self.event_id is not None


def record_progress(token_digest: str, post: ProgressPost,
                    connection: Connection = autocommit_connection) -> Recorded | None:
    """Store one post for the pod whose token has this digest, committed on return; None when
    no pod has a valid token by that digest (nothing is written then). A repeated (pod, seq)
    changes nothing.

    On PostgreSQL this is the whole request's database work: the token check and every write
    in one statement, run by `connection`. On SQLite (the embedded default) the same writes
    go statement by statement through the request's session. A database error propagates.
    """
    now = utcnow()
    if db.engine.dialect.name == "postgresql":
        params = _token_params(token_digest, post, now)
        row = connection(_PG_RECORD_BY_TOKEN, params)
        if row is None or row[0] is None:
            return None
        return Recorded(row[0], params["event_id"] if row[1] else None)
    pod = tokens.pod_for_digest(token_digest)
    if pod is None:
        return None
    event_id = _record_statement_by_statement(pod, post, now)
    db.session.commit()
    return Recorded(pod.id, event_id)


def _token_params(token_digest: str, post: ProgressPost, now) -> dict:
    return {**_pg_params(post, now), "token_digest": token_digest, "ended_after": tokens.ended_after(now)}


def _pg_params(post: ProgressPost, now) -> dict:
    """The statement's parameters that do not depend on how the pod is found."""
    return {
        "post_id": uuid.uuid4(), "seq": post.seq, "pct": post.pct, "message": post.message,
        "milestone": post.milestone, "exit_code": post.exit_code,
        "metrics": json.dumps(post.metrics) if post.metrics is not None else None, "now": now,
        "bootstrap_inc": 1 if post.is_bootstrap else 0, "event_id": uuid.uuid4(),
        "note": f"{post.pct:g}% · {post.message}"[:2000],
        # The statement adds the pod's name and run index (event) and id (run event).
        "event_meta": json.dumps({"seq": post.seq, "milestone": post.milestone, "verdict": post.verdict,
                                  "exitCode": post.exit_code, "metrics": post.metrics}),
        "touch_before": now - LAST_EVENT_TOUCH, "run_event_id": uuid.uuid4(),
        "run_meta": json.dumps({"seq": post.seq, "exitCode": post.exit_code}),
    }


def _record_statement_by_statement(pod, post: ProgressPost, now) -> uuid.UUID | None:
    """The statement's writes one by one (SQLite): the new timeline event's id, or None for
    a repeated (pod, seq)."""
    post_id = uuid.uuid4()
    values = dict(id=post_id, pod_id=pod.id, seq=post.seq, progress_pct=post.pct, message=post.message,
                  milestone=post.milestone, exit_code=post.exit_code, metrics=post.metrics, created_at=now)
    if post.seq is not None:
        stmt = sa.insert(PodProgressPost).values(**values).prefix_with("OR IGNORE").returning(PodProgressPost.id)
        if db.session.execute(stmt).scalar() is None:
            return None
    else:
        db.session.execute(sa.insert(PodProgressPost).values(**values))

    changes = dict(last_progress_at=now, last_heartbeat_at=now, updated_at=now)
    shown_seq = db.session.scalar(sa.select(Pod.progress_seq).where(Pod.id == pod.id))
    # A late, older post only beats the heartbeat; the exit post is shown whatever its seq
    # (the bootstrap's numbering is apart from the training script's).
    if post.seq is None or shown_seq is None or post.seq >= shown_seq or post.exit_code is not None:
        changes.update(progress_pct=post.pct, progress_message=post.message)
        if post.seq is not None:
            changes["progress_seq"] = post.seq
    if post.is_bootstrap:
        changes["bootstrap_count"] = Pod.bootstrap_count + 1
    if post.exit_code is not None:
        changes.update(exit_code=post.exit_code, exited_at=now)
    db.session.execute(sa.update(Pod).where(Pod.id == pod.id).values(**changes)
                       .execution_options(synchronize_session=False))
    note = f"{post.pct:g}% · {post.message}"[:2000]
    event_id = uuid.uuid4()
    db.session.execute(sa.insert(WorkflowEvent).values(
        id=event_id, entity_kind="experiment", entity_id=pod.experiment_id, experiment_id=pod.experiment_id,
        event_type="progress", actor_kind="pod", actor_id=str(pod.id), note=note,
        metadata_={"pod": pod.name, "run_index": pod.run_index, "seq": post.seq, "milestone": post.milestone,
                   "verdict": post.verdict, "exitCode": post.exit_code, "metrics": post.metrics},
        created_at=now, updated_at=now))
    # Every pod of an experiment posts here: touching the experiment row at most every few
    # seconds keeps its "last event" age right without making that row a lock hot spot.
    db.session.execute(sa.update(Experiment).where(
        Experiment.id == pod.experiment_id,
        sa.or_(Experiment.last_event_at.is_(None), Experiment.last_event_at < now - LAST_EVENT_TOUCH))
        .values(last_event_at=now).execution_options(synchronize_session=False))
    if pod.agent_run_id:
        runs.append_event(pod.agent_run_id, "pod_progress", note,
                          {"pod_id": str(pod.id), "seq": post.seq, "exitCode": post.exit_code})
    return event_id


# --- artifacts ---------------------------------------------------------------------------------

def clean_artifact_name(raw: str | None) -> str:
    """A relative path under the pod's artifact folder: no `..`, no absolute paths."""
    name = (raw or "").strip().replace("\\", "/")
    if not name:
        raise ValidationError("Name the file in the X-Sagan-Artifact-Name header.", field="name")
    if len(name) > 500 or name.startswith("/") or any(part in ("..", "") for part in name.split("/")) \
            or any(ord(c) < 32 for c in name):
        raise ValidationError("The artifact name must be a relative path without '..' (at most 500 characters).",
                              field="name")
    # Names are shown and stored like any text: a key in a file name is still a key.
    return redact(posixpath.normpath(name))


def artifact_type(name: str, declared: str | None) -> str:
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if extension not in ALLOWED_TYPES:
        raise ValidationError(f"Files of type .{extension or '(none)'} are not accepted; allowed: "
                              f"{', '.join(sorted(ALLOWED_TYPES))}.", field="name", code="unsupported_type")
    return ALLOWED_TYPES[extension]


def store_artifact(pod: Pod, name: str, content: bytes, declared_type: str | None) -> Artifact:
    """Store (or replace) one file a pod uploaded, within the per-file cap and the pod's and
    its experiment's budgets (services/dispatch/artifacts.py); queue its processing after the commit."""
    name = clean_artifact_name(name)
    content_type = artifact_type(name, declared_type)
    limit = current_app.config["ARTIFACT_MAX_BYTES"]
    if len(content) > limit:
        raise TooLarge(f"{name} is {len(content):,} bytes; the limit per file is {limit:,}.")
    artifact = artifacts.store(experiment_id=pod.experiment_id, pod_id=pod.id, name=name,
                               content_type=content_type, content=content)
    if pod.agent_run_id:
        runs.append_event(pod.agent_run_id, "artifact_uploaded", name,
                          {"pod_id": str(pod.id), "size": artifact.size, "sha256": artifact.sha256,
                           "status": artifact.status})
    return artifact
