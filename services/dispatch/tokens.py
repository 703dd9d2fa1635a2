"""Pod progress tokens (SPEC §6.5): one per pod, `spt_` + random, only a hash stored;
valid for that pod's progress and artifact posts until 15 minutes after it ends.

"Ends" is the first status change into an ended status (exited, stopped, terminated,
vanished, failed), recorded in `Pod.ended_at` by Sagan alone. The grace used to count
from `stopped_at`, else `updated_at` — and every post touches `updated_at`, so an ended pod
whose row had no `stopped_at` kept a working token for as long as it kept posting. The
bootstrap uploads its artifacts and log before its exit post, so the grace only has to
cover retries of that last post and a container restarted after the script finished.
"""
from __future__ import annotations

import secrets
import time
from datetime import datetime, timedelta

import sqlalchemy as sa
from flask import current_app

from models import Pod, db
from services.core import registry
from services.core.clock import utcnow
from services.core.token_hash import digest

PREFIX = "spt_"
ENDED = tuple(sorted(registry.POD_ENDED_STATUSES))


def new_token() -> tuple[str, str]:
    """(secret, hash): the secret goes into the pod's environment, the hash into the row."""
    secret = PREFIX + secrets.token_urlsafe(32)
    return secret, digest(secret)


def could_be_token(secret: str | None) -> bool:
    """The shape of a pod token, checked before any lookup."""
    return bool(secret) and secret.startswith(PREFIX) and len(secret) <= 200


def ended_after(now: datetime) -> datetime:
    """A pod that ended (Pod.ended_at) before this instant has a dead token (POD_TOKEN_GRACE_SECONDS)."""
    return now - timedelta(seconds=current_app.config["POD_TOKEN_GRACE_SECONDS"])


# The validity rule in SQL, for the ingest statements that look the token up themselves
# (services/dispatch/progress.py, services/dispatch/metrics.py): the same rule as pod_for_digest.
# An ended status without ended_at (a row nothing stamped) is refused, not trusted.
VALID_POD_SQL = f"""
  SELECT id, name, experiment_id, agent_run_id, run_index FROM pods
  WHERE progress_token_hash = :token_digest
    AND ((ended_at IS NULL AND status NOT IN ({", ".join(f"'{status}'" for status in ENDED)}))
         OR ended_at >= :ended_after)
"""


# The same, as a statement for the lean ingest layer's own connection.
VALID_POD = sa.text(VALID_POD_SQL)


def pod_for_token(secret: str | None):
    """The pod a bearer token belongs to, if the token is still valid.

    Returns a light row (id, name, experiment_id, agent_run_id, run_index, status): the
    progress endpoint is a hot path and needs no full ORM object.
    """
    if not could_be_token(secret):
        return None
    return pod_for_digest(digest(secret))


def pod_for_digest(token_digest: str):
    """pod_for_token, from the token's digest."""
    pod = db.session.execute(sa.select(
        Pod.id, Pod.name, Pod.experiment_id, Pod.agent_run_id, Pod.run_index, Pod.status,
        Pod.ended_at).where(Pod.progress_token_hash == token_digest)).first()
    if pod is None:
        return None
    if pod.ended_at is None:
        return None if pod.status in ENDED else pod
    return pod if pod.ended_at >= ended_after(utcnow()) else None


# Digests of tokens this process found valid lately, and until when (monotonic seconds).
# A body is read only for a token known to be valid (blueprints/access.py, the lean ingest
# layer), so a stranger with a token-shaped string is refused before any of its body is
# waited for; knowing one recently spares the hot path a lookup per post. It decides only
# whether to read the body: every write still checks the token in its own statement, so
# an entry that outlives its token costs a read, never an accepted post.
_KNOWN_FOR_SECONDS = 30.0
_KNOWN_MAX = 10_000
_known_valid: dict[str, float] = {}


def known_valid(token_digest: str) -> bool:
    """Was this digest a valid token moments ago in this process? (No lookup.)"""
    until = _known_valid.get(token_digest)
    return until is not None and until > time.monotonic()


def remember_valid(token_digest: str) -> None:
    """Note that this digest was just found valid (see _known_valid)."""
    if len(_known_valid) >= _KNOWN_MAX:
        _known_valid.clear()  # a burst of distinct pods; the next post of each looks up again
    _known_valid[token_digest] = time.monotonic() + _KNOWN_FOR_SECONDS


def check_before_body(token_digest: str) -> bool:
    """Is this a valid pod token? From memory when this process saw it lately, else looked up."""
    if known_valid(token_digest):
        return True
    if pod_for_digest(token_digest) is None:
        return False
    remember_valid(token_digest)
    return True
