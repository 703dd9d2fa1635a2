"""Domain errors. Each carries a machine code, a human sentence and the HTTP status
the JSON API answers with; pages show the sentence."""
from __future__ import annotations


class SaganError(Exception):
    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, **details):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details

    def to_json(self) -> dict:
        return {"error": self.code, "message": self.message, **self.details}


class ValidationError(SaganError):
    status_code = 400
    code = "invalid_input"

    def __init__(self, message: str, *, field: str | None = None, **details):
        super().__init__(message, **details)
        self.field = field
        if field:
            self.details.setdefault("field", field)


class NotFound(SaganError):
    status_code = 404
    code = "not_found"


class Forbidden(SaganError):
    status_code = 403
    code = "forbidden"


class Conflict(SaganError):
    status_code = 409
    code = "conflict"


class LengthRequired(SaganError):
    status_code = 411
    code = "length_required"


class Unprocessable(SaganError):
    status_code = 422
    code = "unprocessable"


class RateLimited(SaganError):
    status_code = 429
    code = "rate_limited"


class TooLarge(SaganError):
    status_code = 413
    code = "too_large"
