"""What pods post: progress and artifacts, authenticated by the pod's own token."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

from flask import Blueprint, g, request, send_file

from blueprints import access
from models import db
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
    event_id, created = progress.record_progress(g.pod, post)
    db.session.commit()
    if created:
        watcher.after_progress(pod_id, post)
    return {"ok": True, "id": str(event_id) if event_id else None, "duplicate": not created}


@bp.post("/metrics")
@access.pod
def post_metrics():
    """A batch of scalar metric points; a repeated (pod, seq) answers ok without storing it again."""
    data = request.get_json(silent=True)
    if data is None:
        raise ValidationError("The body is not valid JSON.", code="invalid_json")
    batch = metrics.parse_batch(data)
    created = metrics.record_batch(g.pod, batch)
    db.session.commit()
    return {"ok": True, "points": len(batch) if created else 0, "duplicate": not created}


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
    artifact = progress.store_artifact(g.pod, name, content,
                                       request.content_type)
    db.session.commit()
    progress.enqueue_figure_sanitizing(artifact)
    return {"ok": True, "id": str(artifact.id), "name": artifact.name, "size": artifact.size,
            "sha256": artifact.sha256}, 201
