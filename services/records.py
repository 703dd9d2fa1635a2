"""Finding one row by its id, the same way everywhere: a malformed id is simply not found."""
from __future__ import annotations

import uuid

from models import db
from services.errors import NotFound


def get_by_id(model, raw_id, message: str):
    """The `model` row whose id is `raw_id`, else NotFound(message) — also for an id that is not a UUID."""
    try:
        row = db.session.get(model, uuid.UUID(str(raw_id)))
    except ValueError:
        row = None
    if row is None:
        raise NotFound(message)
    return row
