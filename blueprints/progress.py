"""What pods post: progress and artifacts, authenticated by the pod's own token."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

from flask import Blueprint, g, request, send_file

from blueprints import access
from blueprints._actions import perform
from services import input_shape, metrics
from services.dispatch import progress, watcher
from services.errors import ValidationError

bp = Blueprint("progress", __name__, url_prefix="/api")

# The helper a training script imports to post metrics; the bootstrap fetches it from here,
# so a pod always runs the helper of the server it reports to.
METRICS_HELPER = Path(__file__).resolve().parents[1] / "scripts" / "sagan_metrics.py"


@bp.post("/progress")
@access.pod
def post_progress():
    """One progress post; a repeated (pod, seq) answers ok without storing it again."""
    data = input_shape.parse_json(request.get_data())
    if not isinstance(data, dict):
        raise ValidationError("The body must be a JSON object.", code="invalid_json")
    post = progress.parse_progress(data)
    pod_id = g.pod.id
    recorded = {}

    def record():
        recorded["event_id"], recorded["created"] = progress.record_progress(g.pod, post)

    def done():
        if recorded["created"]:  # the watcher reacts after the commit, to a new post only
            watcher.after_progress(pod_id, post)
        event_id = recorded["event_id"]
        return {"ok": True, "id": str(event_id) if event_id else None, "duplicate": not recorded["created"]}

    return perform(record, done=done)


@bp.post("/metrics")
@access.pod
def post_metrics():
    """A batch of scalar metric points; a repeated (pod, seq) answers ok without storing it again."""
    data = request.get_json(silent=True)
    if data is None:
        raise ValidationError("The body is not valid JSON.", code="invalid_json")
    batch = metrics.parse_batch(data)
    recorded = {}

    def record():
        recorded["created"] = metrics.record_batch(g.pod, batch)

    return perform(record, done=lambda: {"ok": True, "points": len(batch) if recorded["created"] else 0,
                                         "duplicate": not recorded["created"]})


@bp.get("/metrics/helper.py")
@access.pod
def metrics_helper():
    """scripts/sagan_metrics.py, for the pod's bootstrap to put on the training script's path."""
    return send_file(METRICS_HELPER, mimetype="text/x-python", max_age=0)


@bp.post("/artifacts")
@access.pod
@access.body_limit("ARTIFACT_MAX_BYTES")
def post_artifact():
    """One file from the pod's artifact folder, as the raw request body."""
    # The per-file cap (ARTIFACT_MAX_BYTES, above the 2 MB of every other request) was applied
    # before the view ran: access.body_limit.
    content = request.get_data(cache=False)
    # The bootstrap percent-encodes names with non-ASCII characters or '%'.
    name = unquote(request.headers.get("X-Sagan-Artifact-Name") or "")
    stored = {}

    def store():
        stored["artifact"] = progress.store_artifact(g.pod, name, content, request.content_type)

    def done():
        artifact = stored["artifact"]
        progress.enqueue_figure_sanitizing(artifact)  # after the commit: the job reads the row
        return {"ok": True, "id": str(artifact.id), "name": artifact.name, "size": artifact.size,
                "sha256": artifact.sha256}, 201

    return perform(store, done=done)
