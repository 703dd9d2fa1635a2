"""Security headers on every response (SPEC §10).

The Content-Security-Policy is what makes "no inline JS" a guarantee rather than a habit:
scripts load only from our own origin and nothing may `eval`. htmx needs neither inline
scripts nor eval here — its config sets `allowEval: false` and `includeIndicatorStyles:
false` (templates/base.html), poll triggers carry no JavaScript filters, and page
behaviour lives in static/js/sagan.js behind data attributes. Styles come only from our
stylesheet too, so `style-src` needs no 'unsafe-inline'.
"""
from __future__ import annotations

from flask import Flask, Response

CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "frame-ancestors 'none'",
    "form-action 'self'",
])

HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # For browsers that predate frame-ancestors.
    "X-Frame-Options": "DENY",
}


def add_security_headers(response: Response) -> Response:
    """after_request hook: set each header unless the view chose its own value."""
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def init_app(app: Flask) -> None:
    app.after_request(add_security_headers)
