"""Error pages and JSON errors: clear sentences, no stack traces, no configuration.

Every error response also carries its sentence in `X-Sagan-Message` (percent-encoded
UTF-8: header values are Latin-1) and its code in `X-Sagan-Error`. htmx does not swap
4xx/5xx answers, so without these a failed click would show nothing; static/js/sagan.js
reads them and shows the sentence in a toast.
"""
from __future__ import annotations

import logging
from urllib.parse import quote

import psycopg
import redis
import sqlalchemy as sa
from flask import Flask, current_app, make_response, render_template, request
from werkzeug.exceptions import HTTPException

from models import db
from services.core.errors import SaganError

log = logging.getLogger(__name__)

CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
         405: "method_not_allowed", 409: "conflict", 413: "too_large", 422: "unprocessable",
         429: "rate_limited", 503: "unavailable"}

MESSAGE_HEADER = "X-Sagan-Message"
CODE_HEADER = "X-Sagan-Error"


def wants_json() -> bool:
    """API and health answers are JSON; pages get HTML."""
    return request.path.startswith("/api/") or request.path == "/healthz"


def with_message(response, code: str, message: str):
    """Attach the human sentence and the error code as headers for the page script."""
    response.headers[MESSAGE_HEADER] = quote(message, safe=" ,.;:!?'()/#-_@")
    response.headers[CODE_HEADER] = code
    return response


def error_response(status: int, code: str, message: str, title: str, json_body: dict | None = None):
    """JSON for API clients, the error page for browsers; both with the message headers."""
    if wants_json():
        response = make_response(json_body or {"error": code, "message": message}, status)
    else:
        response = make_response(render_template("errors/error.html", title=title, message=message,
                                                 code=code), status)
    return with_message(response, code, message)


def _service_down(error: Exception) -> bool:
    """A lost or refused connection to PostgreSQL or Redis (not a bad query)."""
    if isinstance(error, (redis.ConnectionError, redis.TimeoutError)):
        return True
    if isinstance(error, sa.exc.DBAPIError):
        return bool(error.connection_invalidated) or isinstance(error, (sa.exc.OperationalError,
                                                                       sa.exc.InterfaceError))
    return False


def _statement_timed_out(error: Exception) -> bool:
    """PostgreSQL cancelled the statement at its statement_timeout."""
    return isinstance(error, sa.exc.DBAPIError) and isinstance(error.orig, psycopg.errors.QueryCanceled)


def _release_transaction() -> None:
    """Roll back the request's transaction before an error page is drawn: after a failed
    statement PostgreSQL refuses every further one in that transaction ("current transaction
    is aborted"), and the page's own reads (the signed-in user, the header's counts) would
    fail in turn, leaving the visitor Werkzeug's bare 500 instead of this page. A rollback
    that fails too (a connection already gone) is left to the pool."""
    try:
        db.session.rollback()
    except sa.exc.SQLAlchemyError:
        log.warning("could not roll back before the error page", exc_info=True)


def init_app(app: Flask) -> None:
    @app.errorhandler(SaganError)
    def domain_error(error: SaganError):
        return error_response(error.status_code, error.code, error.message, "That did not work",
                              error.to_json())

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException):
        status = error.code or 500
        message = {404: "Nothing here.",
                   413: "That request is too large."}.get(status, error.description)
        response = error_response(status, CODES.get(status, "error"), message, error.name)
        if getattr(error, "retry_after", None) is not None:  # werkzeug's 429 and 503 may carry one
            response.headers["Retry-After"] = str(error.retry_after)
        return response

    @app.errorhandler(Exception)
    def unexpected(error: Exception):
        if isinstance(error, HTTPException):
            return http_error(error)
        if _statement_timed_out(error):
            # The web server's statement timeout (serve.py) ended a statement that ran too
            # long: the database is up, so say what happened rather than "unreachable".
            log.warning("a statement ran past the statement timeout: %s", error.statement and error.statement[:200])
            _release_transaction()
            response = error_response(503, "timeout", "That took longer than Sagan lets one request use "
                                      "the database; try again in a moment.", "That took too long")
            response.headers["Retry-After"] = "5"
            return response
        if _service_down(error):
            # PostgreSQL or Redis is restarting or unreachable: say so, and let the client
            # retry. The pool drops broken connections, so the next request reconnects.
            log.warning("a backing service is unavailable: %s", error.__class__.__name__)
            message = "Sagan cannot reach its database or queue right now; try again in a moment."
            if wants_json():
                response = make_response({"error": "unavailable", "message": message}, 503)
            else:
                # Straight from Jinja: render_template's context processors would load the
                # session's user from the very database that is down.
                page = current_app.jinja_env.get_template("errors/unavailable.html")
                response = make_response(page.render(message=message, path=request.path), 503)
            response.headers["Retry-After"] = "5"
            return with_message(response, "unavailable", message)
        log.exception("unhandled error")
        _release_transaction()
        return error_response(500, "internal_error",
                              "Something went wrong on our side; it has been logged.", "Server error")
