"""Pod progress tokens (SPEC §6.5): one per pod, `spt_` + random, only a hash stored;
valid for that pod's progress and artifact posts until 15 minutes after it stops."""
from __future__ import annotations

import secrets
from datetime import timedelta

import sqlalchemy as sa
from flask import current_app

from models import Pod, db
from services.clock import utcnow
from services.token_hash import digest

PREFIX = "spt_"
ENDED = ("stopped", "terminated", "vanished", "failed")


def new_token() -> tuple[str, str]:
    """(secret, hash): the secret goes into the pod's environment, the hash into the row."""
    secret = PREFIX + secrets.token_urlsafe(32)
    return secret, digest(secret)


def pod_for_token(secret: str | None):
    """The pod a bearer token belongs to, if the token is still valid.

    Returns a light row (id, name, experiment_id, agent_run_id, run_index, status): the
    progress endpoint is a hot path and needs no full ORM object.
    """
    if not secret or not secret.startswith(PREFIX) or len(secret) > 200:
        return None
    pod = db.session.execute(sa.select(
        Pod.id, Pod.name, Pod.experiment_id, Pod.agent_run_id, Pod.run_index, Pod.status,
        Pod.stopped_at, Pod.terminated_at, Pod.updated_at).where(Pod.progress_token_hash == digest(secret))).first()
    if pod is None:
        return None
    if pod.status in ENDED:
        ended_at = pod.stopped_at or pod.terminated_at or pod.updated_at
        grace = timedelta(seconds=current_app.config["POD_TOKEN_GRACE_SECONDS"])
        if ended_at is None or utcnow() > ended_at + grace:
            return None
    return pod
