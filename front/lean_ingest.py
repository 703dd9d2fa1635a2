"""An ordinary progress post, answered before Flask's request machinery.

Every running pod posts `POST /api/progress` every few seconds, and the post is already
one autocommit statement that checks the pod token and writes (services/dispatch/
progress.py). What it still cost through Flask was the request context, routing, the
before/after hooks, the ORM engine's connection checkout and SQLAlchemy's execution of
a 20-parameter statement (docs/performance.md, "Ingest: metrics and progress"). This WSGI
layer, inside the trusted-proxy fix (so it sees the client's address as Flask does),
answers exactly the common case, the quiet polls' precedent (front/quiet_polls.py):

1. `POST /api/progress`, no query string, `Content-Type: application/json`, a declared
   `Content-Length` of at most LEAN_BODY_MAX bytes (and within the request limit), an
   `Authorization: Bearer spt_…` of a pod token's shape, from an address this process
   has not seen pass the bad-token limit;
2. the body parses and validates by the view's own rules (`input_shape.parse_json`,
   `progress.parse_progress`, which also redacts), and is an ordinary post: no exit code,
   not a bootstrap milestone (those need `watcher.after_progress`);
3. the same statement the view runs, compiled once and run on the lean autocommit
   connection (services/core/lean_reads.py), finds a pod with that valid token.

Then it answers what the view answers — the same JSON, the same headers, the security
headers — and nothing else ran. Anything else passes to Flask untouched, the body put
back as it came: an unknown or expired token (the statement wrote nothing; Flask runs it
again, answers 401 and counts the failure towards the 429 limit), a refused body (400,
413), another content type, an exit or bootstrap post, a database error (503). So every
refusal still comes from one place, the view and its access rule (`pod`, token checked
in the write), which the app checks at start-up (it refuses to start if they moved).
"""
from __future__ import annotations

import io

import sqlalchemy as sa
from flask import Flask

from blueprints import access
from front import headers, security_headers
from services.core import input_shape, lean_reads
from services.core.clock import utcnow
from services.core.errors import SaganError
from services.dispatch import progress
from services.dispatch import tokens as pod_tokens

PATH = "/api/progress"
ENDPOINT = "progress.post_progress"
# A progress post is a few hundred bytes (a 2,000-character message and 50 metrics stay
# under this); anything larger takes the view's path and its limits.
LEAN_BODY_MAX = 16 * 1024


class LeanIngest:
    """WSGI middleware in front of the Flask app (see the module docstring)."""

    def __init__(self, app: Flask, wsgi_app):
        self.app = app
        self.wsgi_app = wsgi_app
        self._check_route()
        self.security = [("Content-Security-Policy", security_headers.CONTENT_SECURITY_POLICY),
                         *security_headers.HEADERS.items()]

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == PATH and environ.get("REQUEST_METHOD") == "POST":
            answer = self._answer(environ)
            if answer is not None:
                # The view's headers; `Vary: Cookie` as Flask adds it (the request's hooks read the session).
                start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer))),
                                          ("Vary", "Cookie"), *self.security])
                return [answer]
        return self.wsgi_app(environ, start_response)

    def _answer(self, environ) -> bytes | None:
        """The body of the view's answer to an ordinary post, or None (Flask's path)."""
        secret = headers.bearer_secret(environ.get("HTTP_AUTHORIZATION", ""))
        length = headers.content_length(environ)
        limit = self.app.config.get("MAX_CONTENT_LENGTH")
        if (environ.get("QUERY_STRING") or secret is None or not pod_tokens.could_be_token(secret)
                or headers.media_type(environ) != "application/json"
                or length is None or length > LEAN_BODY_MAX or (limit is not None and length > limit)
                or headers.streamed_body(environ)
                or access.limited_here(environ.get("REMOTE_ADDR") or "unknown")):
            return None
        token_digest = pod_tokens.digest(secret)
        if not pod_tokens.known_valid(token_digest) and not self._token_found(token_digest):
            return None  # the view's access rule answers 401, before the body too
        raw = environ["wsgi.input"].read(length)
        # From here on Flask must find the body as it came, whatever this layer decides.
        environ["wsgi.input"] = io.BytesIO(raw)
        environ["wsgi.input_terminated"] = True
        if len(raw) != length:
            return None  # a short body: the view's path says what it says
        with self.app.app_context():
            try:
                data = input_shape.parse_json(raw)
                post = progress.parse_progress(data)
            except SaganError:
                return None  # the view refuses it (after the token check)
            if post.exit_code is not None or post.is_bootstrap or not lean_reads.available():
                return None
            try:
                recorded = progress.record_progress(token_digest, post, progress.lean_connection)
            except sa.exc.SQLAlchemyError:
                return None  # the view runs it again, or answers 503 with the usual page
            if recorded is None:
                return None  # unknown or expired token: the view answers 401 and counts it
            answer = {"ok": True, "id": str(recorded.event_id) if recorded.created else None,
                      "duplicate": not recorded.created}
            return _as_flask_json(self.app, answer)

    def _token_found(self, token_digest: str) -> bool:
        """Look up a token this process has not seen lately, before its body is read: a
        stranger's post waits for none of its bytes (front/gate.py)."""
        with self.app.app_context():
            if not lean_reads.available():
                return False
            params = {"token_digest": token_digest, "ended_after": pod_tokens.ended_after(utcnow())}
            try:
                found = lean_reads.first_row(pod_tokens.VALID_POD, params) is not None
            except sa.exc.SQLAlchemyError:
                return False  # the view's path says what it says
        if found:
            pod_tokens.remember_valid(token_digest)
        return found

    def _check_route(self) -> None:
        """PATH must still be the view's, under the `pod` rule with the token checked in its
        write: a moved or re-ruled route must not leave this layer answering for it."""
        rules = [rule for rule in self.app.url_map.iter_rules() if rule.rule == PATH and "POST" in rule.methods]
        view = self.app.view_functions.get(ENDPOINT)
        if [rule.endpoint for rule in rules] != [ENDPOINT] or getattr(view, "access_rule", None) != ("pod", None) \
                or not getattr(view, "pod_token_in_write", False):
            raise RuntimeError(f"front/lean_ingest.py answers POST {PATH} as {ENDPOINT} under the pod rule "
                               "(token checked in the write); the route changed, so change this layer with it.")


def _as_flask_json(app: Flask, value: dict) -> bytes:
    """The bytes Flask's JSON provider writes for a view that returns `value`."""
    provider = app.json
    indent = (provider.compact is None and app.debug) or provider.compact is False
    options = {"indent": 2} if indent else {"separators": (",", ":")}
    return f"{provider.dumps(value, **options)}\n".encode()


def init_app(app: Flask) -> None:
    """Put the layer in front of the Flask app (call before any outer middleware wraps it)."""
    app.wsgi_app = LeanIngest(app, app.wsgi_app)
