"""What pods post: progress and artifacts, authenticated by the pod's own token."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable
from urllib.parse import unquote

from flask import Blueprint, g, request, send_file
from werkzeug.exceptions import RequestEntityTooLarge

from blueprints import access
from blueprints._actions import perform
from services.core import input_shape
from services.core.errors import LengthRequired, SaganError, ValidationError
from services.dispatch import artifacts, metrics, progress, run_config, watcher
from services.dispatch import tokens as pod_tokens

bp = Blueprint("progress", __name__, url_prefix="/api")

# The helper a training script imports to post metrics; the bootstrap fetches it from here,
# so a pod always runs the helper of the server it reports to.
METRICS_HELPER = Path(__file__).resolve().parents[1] / "scripts" / "sagan_metrics.py"


def _parsed_or_refused(parse: Callable, raw: bytes):
    """`parse(raw)`; when it refuses the body, a bad token still answers 401 first (the token
    is otherwise checked by the write itself: access.pod_token_checked_in_write)."""
    try:
        return parse(raw)
    except SaganError:  # a 400, or a 413 for too many points
        if pod_tokens.pod_for_digest(g.pod_token_digest) is None:
            raise PodTokenRefused() from None
        raise


class PodTokenRefused(Exception):
    """The pod token of an ingest post is unknown or expired (answered 401 below)."""


@bp.errorhandler(PodTokenRefused)
def _pod_token_refused(_error):
    return access.refuse_pod_token()


def _progress_body(raw: bytes) -> progress.ProgressPost:
    data = input_shape.parse_json(raw)
    if not isinstance(data, dict):
        raise ValidationError("The body must be a JSON object.", code="invalid_json")
    return progress.parse_progress(data)


@bp.post("/progress")
@access.pod
@access.pod_token_checked_in_write
def post_progress():
    """One progress post; a repeated (pod, seq) answers ok without storing it again.

    Not through _actions.perform: the post is one autocommit statement that checks the
    token and writes (docs/performance.md), so there is no session transaction to commit or
    roll back, and a pod's post carries no form key."""
    post = _parsed_or_refused(_progress_body, request.get_data())
    recorded = progress.record_progress(g.pod_token_digest, post)
    if recorded is None:
        raise PodTokenRefused()
    if recorded.created:
        watcher.after_progress(recorded.pod_id, post)
    return {"ok": True, "id": str(recorded.event_id) if recorded.created else None, "duplicate": not recorded.created}


def _metrics_body(raw: bytes) -> metrics.Batch:
    """The batch, parsed straight from the bytes: a batch is 60 KB of JSON with 1,000
    objects, too many brackets for input_shape's depth walk to be cheap; the decoder's own
    recursion limit answers for nesting instead, and every string of a batch is checked
    by parse_batch (names printable, nothing else kept)."""
    if not request.is_json:
        raise ValidationError("The body is not valid JSON (send Content-Type: application/json).",
                              code="invalid_json")
    try:
        data = json.loads(raw)
    except ValueError:  # also what a body that is not UTF-8 raises
        raise ValidationError("The body is not valid JSON.", code="invalid_json") from None
    except RecursionError:
        raise ValidationError("The JSON nests too deep.", code="invalid_json") from None
    return metrics.parse_batch(data)


@bp.post("/metrics")
@access.pod
@access.pod_token_checked_in_write
def post_metrics():
    """A batch of scalar metric points; a repeated (pod, seq) answers ok without storing it again."""
    batch = _parsed_or_refused(_metrics_body, request.get_data())
    recorded = metrics.record_batch_for_token(g.pod_token_digest, batch)
    if recorded is None:
        raise PodTokenRefused()
    answer = {"ok": True, "points": len(batch) if recorded.created else 0, "duplicate": not recorded.created}
    if batch.non_finite and recorded.created:
        # Stored, but as marks on the chart rather than values: say so, the pod's log shows it.
        answer["non_finite"] = batch.non_finite
    return answer


@bp.post("/metrics/config")
@access.pod
def post_metrics_config():
    """The settings the training script runs with (seed, condition…), merged into the pod's
    configuration so charts can group runs by them (services/dispatch/run_config.py)."""
    config = run_config.parse(input_shape.parse_json(request.get_data()))
    return {"ok": True, "config": run_config.record(g.pod.id, config)}


@bp.get("/metrics/helper.py")
@access.pod
def metrics_helper():
    """scripts/sagan_metrics.py, for the pod's bootstrap to put on the training script's path."""
    return send_file(METRICS_HELPER, mimetype="text/x-python", max_age=0)


@bp.post("/artifacts")
@access.pod
@access.body_limit("ARTIFACT_MAX_BYTES")
def post_artifact():
    """One file from the pod's artifact folder, as the raw request body.

    The per-file cap (ARTIFACT_MAX_BYTES, above the 2 MB of every other request) was applied
    before the view ran (access.body_limit); the budgets are checked here before the body is
    read, against its Content-Length, and again, under the counters' locks, as it is stored."""
    pod = g.pod
    # The bootstrap percent-encodes names with non-ASCII characters or '%'.
    name = progress.clean_artifact_name(unquote(request.headers.get("X-Sagan-Artifact-Name") or ""))
    progress.artifact_type(name, request.content_type)
    content = _upload_body(artifacts.room_for(pod.experiment_id, pod.id, name), name)
    stored = {}

    def store():
        stored["artifact"] = artifacts.Stored.of(progress.store_artifact(pod, name, content, request.content_type))

    def done():
        artifact = stored["artifact"]
        artifacts.enqueue_processing(artifact)  # after the commit: the job reads the row
        return {"ok": True, "id": str(artifact.id), "name": artifact.name, "size": artifact.size,
                "sha256": artifact.sha256, "status": artifact.status}, 201

    return perform(store, done=done)


READ_CHUNK = 1024 * 1024


def _upload_body(room: artifacts.Room, name: str) -> bytes:
    """The request body, read only as far as `room` allows: a declared length that cannot
    fit is refused before a byte is read; a chunked body is refused as soon as it passes."""
    declared = request.headers.get("Content-Length")
    if declared is not None and not (declared.strip().isdigit() and declared.strip().isascii()):
        raise ValidationError("Content-Length must be the body's size in bytes.", field="Content-Length")
    length = request.content_length
    if length is None and not request.environ.get("wsgi.input_terminated"):
        # Without a length, a server that does not end the body itself hands over nothing:
        # storing that would keep an empty file in the artifact's place.
        raise LengthRequired("Send the file with a Content-Length header.")
    if length is not None and length > room.bytes:
        raise room.refusal(length, name)
    chunks, received = [], 0
    try:
        while chunk := request.stream.read(min(READ_CHUNK, room.bytes + 1 - received)):
            chunks.append(chunk)
            received += len(chunk)
            if received > room.bytes:
                raise room.refusal(received, name, at_least=True)
    except RequestEntityTooLarge:  # a chunked body past the per-file cap (werkzeug's own limit)
        raise artifacts.Room(request.max_content_length, None, 0).refusal(received, name, at_least=True) from None
    return b"".join(chunks)
