"""Liveness for load balancers and the operator: names the failing part, no secrets."""
from __future__ import annotations

import sqlalchemy as sa
from flask import Blueprint, current_app

from blueprints import access
from models import db
from services.core import redis_store
from services.workflow.jobs import ARTIFACTS

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@access.public
def healthz():
    """Database, Redis and worker status as JSON; 503 when a part is down."""
    result = {"ok": True, "db": "ok", "redis": "ok", "workers": 0, "artifact_workers": 0,
              "version": current_app.config["VERSION"]}
    try:
        db.session.execute(sa.text("SELECT 1"))
    except Exception:  # noqa: BLE001 - any failure means "down"; the reason stays in the log
        # A probe, not an action (so not `perform`): the rollback only clears the failed
        # transaction so the rest of the request can still use the session.
        db.session.rollback()
        result.update(ok=False, db="down")
    try:
        from rq import Worker
        conn = redis_store.connection()
        conn.ping()
        workers = Worker.all(connection=conn)
        result["workers"] = len(workers)
        # The `artifacts` queue has worker processes of its own (workers/launcher.py): none
        # means large uploads wait, so say it; the rest of Sagan works without them.
        result["artifact_workers"] = sum(ARTIFACTS in worker.queue_names() for worker in workers)
    except Exception:  # noqa: BLE001
        result.update(ok=False, redis="down")
    return result, 200 if result["ok"] else 503
