"""Render a page, or just its fragment when htmx asked for a swap (STYLE §5), and answer
the polls that refresh them.

Every fragment decision goes through `render` or `fragment_or_page`, so every answer from
a URL that serves both says `Vary: HX-Request` (a cache must not hand the fragment to a
full-page load, or the page to a swap). Every poll with a version (the board, the
experiment page, the metric charts) answers through `unless_unchanged`."""
from __future__ import annotations

from typing import Callable

from flask import Response, make_response, render_template, request


def is_fragment_request() -> bool:
    """A real htmx swap: not boosted navigation, not a history restore (htmx-flask's request.htmx)."""
    htmx = request.htmx
    return bool(htmx) and not htmx.boosted and not htmx.history_restore_request


def _finish(response: Response, status: int | None, headers: dict | None) -> Response:
    if status is not None:
        response.status_code = status
    response.headers["Vary"] = "HX-Request"
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response


def render(page_template: str, fragment_template: str, status: int = 200,
           headers: dict | None = None, **context) -> Response:
    """The whole page, or only `fragment_template` for an htmx swap, from one context."""
    template = fragment_template if is_fragment_request() else page_template
    return _finish(make_response(render_template(template, **context)), status, headers)


def fragment_or_page(fragment: Callable[[], str | Response], page: Callable[[], str | Response],
                     status: int | None = None, headers: dict | None = None) -> Response:
    """Like `render` when the fragment and the page need different work: only the one
    this request asked for is built (`fragment` / `page` return a body or a response)."""
    body = fragment() if is_fragment_request() else page()
    return _finish(make_response(body), status, headers)


def unless_unchanged(version: str | None, answer: Callable[[], str | Response | dict],
                     cache_control: str = "no-cache") -> Response:
    """A poll's answer: a bodiless 304 when the client already holds `version` (its
    If-None-Match), else `answer()` built afresh; either way with the version as the ETag
    and `cache_control` (no-cache: a cache must ask again every time). No `version` (nothing
    to compare yet) always builds the answer."""
    if version and version in request.if_none_match:
        response = make_response("", 304)
    else:
        response = make_response(answer())
    if version:
        response.set_etag(version)
    response.headers["Cache-Control"] = cache_control
    return response
