"""Security headers on every response (SPEC §10).

The Content-Security-Policy is what makes "no inline JS" a guarantee rather than a habit:
scripts load only from our own origin and nothing may `eval`. htmx needs neither inline
scripts nor eval here — its config sets `allowEval: false` and `includeIndicatorStyles:
false` (templates/base.html), poll triggers carry no JavaScript filters, and page
behaviour lives in static/js/sagan.js behind data attributes. Styles come only from our
stylesheet too, so `style-src` needs no 'unsafe-inline'.

One exception, by hash: a clean result is shown in an `<iframe srcdoc>`, and a srcdoc
document inherits the policy of the page that embeds it. So a page that embeds results
lists the SHA-256 of each of their (sanitized) `<style>` elements — exactly those
stylesheets may apply, in the frames; no other inline style can, in the page or the
frames. See `allow_styles()` and templates/results/_frame.html.
"""
from __future__ import annotations

from typing import Iterable

from flask import Flask, Response, g

DIRECTIVES = [
    ("default-src", "'self'"),
    ("script-src", "'self'"),
    ("style-src", "'self'"),
    ("img-src", "'self' data:"),
    ("font-src", "'self'"),
    ("connect-src", "'self'"),
    ("object-src", "'none'"),
    ("base-uri", "'self'"),
    ("frame-ancestors", "'none'"),
    ("form-action", "'self'"),
]


def content_security_policy(style_hashes: Iterable[str] = ()) -> str:
    extra = " ".join(sorted(set(style_hashes)))
    return "; ".join(f"{name} {value} {extra}" if name == "style-src" and extra else f"{name} {value}"
                     for name, value in DIRECTIVES)


CONTENT_SECURITY_POLICY = content_security_policy()

# The policy of a result's own document (inside srcdoc as a <meta>, or as the header of a
# preview frame): nothing loads but inline images and our frame stylesheet, nothing runs.
# 'self' is for static/css/result_frame.css, the frame's base stylesheet; 'unsafe-inline' is
# narrowed to the result's own hashed <style> by the embedding page's inherited policy.
FRAME_POLICY = ("default-src 'none'; style-src 'self' 'unsafe-inline'; img-src data:; font-src 'none'; "
                "base-uri 'none'; form-action 'none'")
# A preview frame is a real response, so it carries the sandbox itself and may be framed by us.
PREVIEW_FRAME_POLICY = (FRAME_POLICY + "; frame-ancestors 'self'; "
                        "sandbox allow-same-origin allow-popups allow-popups-to-escape-sandbox")

HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # For browsers that predate frame-ancestors.
    "X-Frame-Options": "DENY",
}


def allow_styles(hashes: Iterable[str]) -> None:
    """Let this response's pages apply these `<style>` hashes (results in srcdoc frames)."""
    current = g.setdefault("csp_style_hashes", set())
    current.update(hashes)


def add_security_headers(response: Response) -> Response:
    """after_request hook: set each header unless the view chose its own value."""
    response.headers.setdefault("Content-Security-Policy",
                                content_security_policy(g.get("csp_style_hashes", ())))
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def init_app(app: Flask) -> None:
    app.after_request(add_security_headers)
