"""Reading a request's headers from the raw WSGI environ: the one parser for the layers that
answer before Flask (front/) and for the access rule (blueprints/access.py), so a bearer token,
a body's length or an htmx swap is read the same way on every path."""
from __future__ import annotations


def bearer_secret(header: str) -> str | None:
    """The secret of an `Authorization: Bearer …` header (any case), or None."""
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    return None


def streamed_body(environ) -> bool:
    """Does the body run to the end of the stream (Transfer-Encoding) rather than a length?"""
    return "HTTP_TRANSFER_ENCODING" in environ


def content_length(environ) -> int | None:
    """The declared Content-Length as a number, or None when there is none or it is not a
    plain decimal (a sign, spaces inside, hex: what no client sends and no layer should guess at)."""
    raw = (environ.get("CONTENT_LENGTH") or "").strip()
    return int(raw) if raw.isdigit() else None


def media_type(environ) -> str:
    """The Content-Type without its parameters, lower case ("application/json")."""
    return (environ.get("CONTENT_TYPE") or "").split(";", 1)[0].strip().lower()


def is_fragment_request(environ) -> bool:
    """An htmx swap (HX-Request), not boosted navigation, not a history restore — as
    htmx-flask's `request.htmx` reads it for blueprints/_htmx.py."""
    def true(name: str) -> bool:
        return environ.get(name, "false").lower() == "true"
    return true("HTTP_HX_REQUEST") and not true("HTTP_HX_BOOSTED") and not true("HTTP_HX_HISTORY_RESTORE_REQUEST")
