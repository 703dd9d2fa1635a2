"""What pods post: progress and artifacts, authenticated by the pod's own token."""
from __future__ import annotations

from urllib.parse import unquote

from flask import Blueprint, current_app, g, request

from blueprints import access
from models import db
from services.dispatch import progress, watcher
from services.errors import TooLarge, ValidationError

bp = Blueprint("progress", __name__, url_prefix="/api")


@bp.post("/progress")
@access.pod
def post_progress():
    """One progress post; a repeated (pod, seq) answers ok without storing it again."""
    data = request.get_json(silent=True)
    if data is None:
        raise ValidationError("The body is not valid JSON.", code="invalid_json")
    post = progress.parse_progress(data)
    pod_id = g.pod.id
    event_id, created = progress.record_progress(g.pod, post)
    db.session.commit()
    if created:
        watcher.after_progress(pod_id, post)
    return {"ok": True, "id": str(event_id) if event_id else None, "duplicate": not created}


@bp.post("/artifacts")
@access.pod
@access.body_limit("ARTIFACT_MAX_BYTES")
def post_artifact():
    """One file from the pod's artifact folder, as the raw request body."""
    limit = current_app.config["ARTIFACT_MAX_BYTES"]
    # Uploads may be larger than the 2 MB cap on every other request (Flask ≥ 3.1).
    request.max_content_length = limit
    if request.content_length is not None and request.content_length > limit:
        raise TooLarge(f"The file is {request.content_length:,} bytes; the limit per file is {limit:,}.")
    content = request.get_data(cache=False)
    # The bootstrap percent-encodes names with non-ASCII characters or '%'.
    name = unquote(request.headers.get("X-Sagan-Artifact-Name") or "")
    artifact = progress.store_artifact(g.pod, name, content,
                                       request.content_type)
    db.session.commit()
    return {"ok": True, "id": str(artifact.id), "name": artifact.name, "size": artifact.size,
            "sha256": artifact.sha256}, 201
