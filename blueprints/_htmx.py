"""Render a page, or just its fragment when htmx asked for a swap (STYLE §5)."""
from __future__ import annotations

from flask import make_response, render_template, request


def is_fragment_request() -> bool:
    """A real htmx swap: not boosted navigation, not a history restore (htmx-flask's request.htmx)."""
    htmx = request.htmx
    return bool(htmx) and not htmx.boosted and not htmx.history_restore_request


def render(page_template: str, fragment_template: str, status: int = 200,
           headers: dict | None = None, **context):
    """The whole page, or only `fragment_template` for an htmx swap; always `Vary: HX-Request`."""
    template = fragment_template if is_fragment_request() else page_template
    response = make_response(render_template(template, **context), status)
    response.headers["Vary"] = "HX-Request"
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response
