"""Error pages and JSON errors: clear sentences, no stack traces, no configuration."""
from __future__ import annotations

import logging

from flask import Flask, render_template
from werkzeug.exceptions import HTTPException

from blueprints.access import wants_json
from services.errors import SaganError

log = logging.getLogger(__name__)

CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
         405: "method_not_allowed", 409: "conflict", 413: "too_large", 422: "unprocessable",
         429: "rate_limited"}


def init_app(app: Flask) -> None:
    @app.errorhandler(SaganError)
    def domain_error(error: SaganError):
        if wants_json():
            return error.to_json(), error.status_code
        return render_template("errors/error.html", title="That did not work",
                               message=error.message), error.status_code

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException):
        status = error.code or 500
        message = {404: "Nothing here.",
                   413: "That request is too large."}.get(status, error.description)
        if wants_json():
            return {"error": CODES.get(status, "error"), "message": message}, status
        return render_template("errors/error.html", title=error.name, message=message), status

    @app.errorhandler(Exception)
    def unexpected(error: Exception):
        if isinstance(error, HTTPException):
            return http_error(error)
        log.exception("unhandled error")
        message = "Something went wrong on our side; it has been logged."
        if wants_json():
            return {"error": "internal_error", "message": message}, 500
        return render_template("errors/error.html", title="Server error", message=message), 500
