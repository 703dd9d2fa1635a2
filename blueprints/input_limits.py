"""Form fields and query arguments with a NUL character answer 400.

PostgreSQL text cannot hold NUL, so one in a title or a filter used to reach the database
and answer 500. JSON bodies get the same check (and more) in services.core.input_shape.
"""
from __future__ import annotations

from flask import Flask, request

from services.core.input_shape import check_text


def refuse_invalid_text() -> None:
    """before_request hook: every query argument and form value (not uploaded files)."""
    # Only real forms are parsed here: a raw upload's body (an artifact) is left unread.
    forms = request.mimetype in ("application/x-www-form-urlencoded", "multipart/form-data")
    for source in (request.args, request.form) if forms else (request.args,):
        for name, values in source.lists():
            check_text(name, name[:40])
            for value in values:
                check_text(value, name[:40])


def init_app(app: Flask) -> None:
    app.before_request(refuse_invalid_text)
