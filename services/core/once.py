"""Things that happen once: a form key that lets its action run a single time, and a
stash that a redirect's next page reads a single time (SPEC §9.1).

Both live in Redis with an expiry, never in the database: they are conveniences of one
browser tab (a refusal and what the owner typed, a new secret shown once), not records.
A stash can hold what a cookie cannot: a pasted plan is up to MARKDOWN_MAX characters.
"""
from __future__ import annotations

import json
import secrets

from services.core import redis_store

FORM_KEY_SECONDS = 24 * 3600   # a form left open all day still posts once, and only once
STASH_SECONDS = 10 * 60        # a redirect is followed at once; ten minutes is plenty
_FORM_PREFIX = "sagan:form-key:"
_STASH_PREFIX = "sagan:stash:"
FORM_KEY_MAX = 64


def new_form_key() -> str:
    """A fresh key for one rendered form (its hidden `form_key` field)."""
    return secrets.token_urlsafe(18)


def claim_form_key(key: str) -> bool:
    """True the first time `key` is presented, False ever after (until it expires).

    SET NX is atomic, so two taps that arrive together cannot both win."""
    return bool(redis_store.connection().set(_FORM_PREFIX + key, "1", nx=True, ex=FORM_KEY_SECONDS))


def release_form_key(key: str) -> None:
    """The action was refused (nothing happened): the same form may be sent again."""
    redis_store.connection().delete(_FORM_PREFIX + key)


def stash(payload: dict) -> str:
    """Keep `payload` (JSON-able) for the next page; returns the key that reads it once."""
    key = secrets.token_urlsafe(18)
    redis_store.connection().set(_STASH_PREFIX + key, json.dumps(payload), ex=STASH_SECONDS)
    return key


def take(key: str) -> dict | None:
    """The stashed payload, deleted in the same step (GET and DEL in one MULTI, which
    the embedded Redis 6 supports where GETDEL may not exist)."""
    pipe = redis_store.connection().pipeline(transaction=True)
    pipe.get(_STASH_PREFIX + key)
    pipe.delete(_STASH_PREFIX + key)
    raw, _ = pipe.execute()
    return json.loads(raw) if raw else None
