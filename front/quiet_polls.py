"""The live polls' "nothing changed", answered before Flask's request machinery.

An open experiment page asks `GET /experiments/<n>/live` (If-None-Match: its version)
every few seconds, an open run page `GET /runs/<id>/events?after=<seq>`, an open Today
`GET /today/live` (If-None-Match: its version); nearly every
answer is "nothing changed" (304, 204). Through Flask each cost the request context,
routing, every before/after hook, Flask-Login's user load through the ORM and the
session's save (docs/performance.md, "The live polls"). This WSGI layer,
inside the trusted-proxy fix, answers exactly that case with one query and nothing else:

1. the path, method and headers are a quiet poll's (anything else: Flask);
2. the session cookie is verified as Flask verifies it (the app's own signing serializer,
   the same max age) and names a user as Flask-Login keeps it (`_user_id` =
   `<id>:<session version>`, and under session protection the same client identifier);
   what a cookie verified once says is kept by its exact text (`QuietPolls._verified`),
   its age and the client identifier checked again on every poll;
3. one query (services/core/lean_reads.py) reads the answer and, beside it, that user's
   session version; only if the versions match — the rule `services.core.auth.load_user`
   applies — and nothing changed does the layer answer, with the security headers every
   response carries.

Everything else passes to Flask untouched — no cookie, a bad signature, a remember-me
cookie alone, a session Flask or Flask-Login would write back (permanent, a remember-me
cookie to set or clear), a different client identifier, a stale session version, no such
experiment or run, something new to show, a database error — and the route's own access rule
(`owner`) and view answer it as any request. So this layer only ever says "nothing
changed" to a credential the full check accepts; every refusal, 404 and 400 comes from
the usual place, and a logout refuses the very next poll. No answer is cached: each poll
reads the database.
"""
from __future__ import annotations

import re
import time
import uuid
from hashlib import sha512

import flask_login.utils
import sqlalchemy as sa
from flask import Flask
from flask.sessions import SecureCookieSessionInterface
from itsdangerous import BadSignature
from werkzeug.http import parse_cookie

from front import headers, security_headers
from services.core import registry
from services.planning import today
from services.workflow import experiments, runs

EXPERIMENT_LIVE = re.compile(r"/experiments/([0-9]{1,9})/live")
RUN_EVENTS = re.compile(r"/runs/([0-9a-fA-F-]{32,36})/events")
AFTER_ONLY = re.compile(r"after=([0-9]{1,18})")
RUN_STATE_KEY = "sagan.quiet_polls.run_state"
# The routes this layer answers for, and the rule they must keep (checked at start-up).
ROUTES = {"/experiments/<int:number>/live": "experiments.live", "/runs/<run_id>/events": "runs.events",
          "/today/live": "today.live"}
TODAY_LIVE = "/today/live"
# Verified session cookies kept at once (a few hundred bytes each); past it, all are dropped.
MAX_CLAIMS = 1_000


class QuietPolls:
    """WSGI middleware in front of the Flask app (see the module docstring)."""

    def __init__(self, app: Flask, wsgi_app):
        self.app = app
        self.wsgi_app = wsgi_app
        self._check_routes()
        self.security = [("Content-Security-Policy", security_headers.CONTENT_SECURITY_POLICY),
                         *security_headers.HEADERS.items()]
        self._claims: dict[str, tuple] = {}  # session cookie → its verified claim (`_verified`)

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") == "GET":
            answer = self._quiet_answer(environ)
            if answer is not None:
                status, headers = answer
                start_response(status, headers)
                return []
        return self.wsgi_app(environ, start_response)

    def _quiet_answer(self, environ) -> tuple[str, list] | None:
        path = environ.get("PATH_INFO", "")
        if (found := EXPERIMENT_LIVE.fullmatch(path)) is not None:
            return self._experiment(environ, int(found.group(1)))
        if (found := RUN_EVENTS.fullmatch(path)) is not None:
            return self._run(environ, found.group(1))
        if path == TODAY_LIVE:
            return self._today(environ)
        return None

    def _today(self, environ):
        asked = environ.get("HTTP_IF_NONE_MATCH")
        if not asked or environ.get("QUERY_STRING") or (claim := self._claim(environ)) is None:
            return None
        user_id, version = claim
        try:
            with self.app.app_context():
                poll = today.live_poll(user_id)
        except sa.exc.SQLAlchemyError:
            return None  # Flask answers (503 if the database is away)
        if str(poll.session_version) != version or asked != f'"{poll.version}"':
            return None
        # The headers the view's 304 has; `Vary: Cookie` as Flask adds for a session read.
        return "304 NOT MODIFIED", [("ETag", asked), ("Cache-Control", "no-cache"), ("Vary", "Cookie"),
                                    *self.security]

    def _experiment(self, environ, number: int):
        asked = environ.get("HTTP_IF_NONE_MATCH")
        if not asked or environ.get("QUERY_STRING") or (claim := self._claim(environ)) is None:
            return None
        user_id, version = claim
        try:
            with self.app.app_context():
                poll = experiments.live_poll(number, user_id)
        except sa.exc.SQLAlchemyError:
            return None  # Flask answers (503 if the database is away)
        if poll.version is None or str(poll.session_version) != version:
            return None
        etag = f'"{poll.version.version}"'
        if asked != etag:
            return None
        # The headers the view's 304 has; `Vary: Cookie` as Flask adds for a session read.
        return "304 NOT MODIFIED", [("ETag", etag), ("Cache-Control", "no-cache"), ("Vary", "Cookie"),
                                    *self.security]

    def _run(self, environ, raw_id: str):
        after = AFTER_ONLY.fullmatch(environ.get("QUERY_STRING", ""))
        if after is None or not headers.is_fragment_request(environ) or (claim := self._claim(environ)) is None:
            return None
        try:
            run_id = uuid.UUID(raw_id)
        except ValueError:
            return None
        user_id, version = claim
        try:
            with self.app.app_context():
                state = runs.poll_state(run_id, user_id)
        except sa.exc.SQLAlchemyError:
            return None
        if state is None or str(state.session_version) != version:
            return None
        if state.status in registry.RUN_TERMINAL_STATUSES or int(after.group(1)) < state.last_seq:
            # Something to show, or the end line: the view renders it, from this read
            # rather than a second one (`read_run_state`). A client cannot set this key:
            # the headers it sends arrive as HTTP_* keys.
            environ[RUN_STATE_KEY] = (run_id, state)
            return None
        return "204 NO CONTENT", [("Vary", "HX-Request, Cookie"), *self.security]

    def _claim(self, environ) -> tuple[uuid.UUID, str] | None:
        """(user id, session version) from a session cookie Flask and Flask-Login would take
        as they are, else None. Not a credential until the query confirms the version."""
        app = self.app
        interface = app.session_interface
        if not isinstance(interface, SecureCookieSessionInterface):
            return None
        cookie = parse_cookie(environ.get("HTTP_COOKIE", "")).get(app.config["SESSION_COOKIE_NAME"])
        if not cookie or app.config.get("REMEMBER_COOKIE_REFRESH_EACH_REQUEST"):
            return None  # no session; or Flask-Login would write a cookie on this request: its path
        max_age = int(app.permanent_session_lifetime.total_seconds())
        claim = self._claims.get(cookie)
        if claim is None:
            claim = self._verified(cookie, max_age)
            if claim is None:
                return None
        user_id, version, identifier, signed_at = claim
        if time.time() - signed_at > max_age:
            return None  # expired since it was verified: Flask's path refuses it
        manager = app.login_manager
        protection = app.config.get("SESSION_PROTECTION", manager.session_protection)
        if protection in ("basic", "strong"):
            # On a different identifier Flask-Login changes the session (or ends it): its path.
            if manager._session_identifier_generator is not flask_login.utils._create_identifier \
                    or identifier != client_identifier(environ):
                return None
        return user_id, version

    def _verified(self, cookie: str, max_age: int) -> tuple | None:
        """The claim a session cookie makes, verified as Flask verifies it (the signature,
        the age), kept by the cookie's exact text: a browser polling every few seconds sends
        the same cookie each time, and checking its signature and decoding it was a third of
        the poll's CPU. Only what the cookie itself says is kept; the age, the client
        identifier and (in the query) the session version are checked on every poll."""
        app = self.app
        serializer = app.session_interface.get_signing_serializer(app)
        if serializer is None:
            return None
        try:  # what SecureCookieSessionInterface.open_session does
            data, signed = serializer.loads(cookie, max_age=max_age, return_timestamp=True)
        except BadSignature:
            return None
        if not isinstance(data, dict) or data.get("_permanent") or "_remember" in data:
            return None  # Flask or Flask-Login would write a cookie on this request: their path
        user_ref = data.get("_user_id")
        if not isinstance(user_ref, str):
            return None  # no session login (perhaps a remember-me cookie): Flask-Login's path
        raw_id, _, version = user_ref.partition(":")
        try:
            claim = (uuid.UUID(raw_id), version, data.get("_id"), signed.timestamp())
        except ValueError:
            return None
        if len(self._claims) >= MAX_CLAIMS:
            self._claims = {}
        self._claims[cookie] = claim
        return claim

    def _check_routes(self) -> None:
        """The paths above must still be these endpoints under the `owner` rule: a moved or
        re-ruled route must not leave this layer answering for it."""
        found = {rule.rule: rule.endpoint for rule in self.app.url_map.iter_rules()}
        for path, endpoint in ROUTES.items():
            view = self.app.view_functions.get(endpoint)
            if found.get(path) != endpoint or getattr(view, "access_rule", None) != ("owner", None):
                raise RuntimeError(f"front/quiet_polls.py answers for {path} as {endpoint} under the "
                                   "owner rule; the route changed, so change this layer with it.")


def read_run_state(environ, run_id: uuid.UUID) -> runs.PollState | None:
    """The run's status and last seq as this layer read them for this request (for this
    run), or None: the run poll's view then needs no read of its own."""
    found = environ.get(RUN_STATE_KEY)
    return found[1] if found is not None and found[0] == run_id else None


def client_identifier(environ) -> str:
    """Flask-Login's session identifier (flask_login.utils._create_identifier) from the
    environ: the first X-Forwarded-For address (else the peer's) and the User-Agent."""
    address = environ.get("HTTP_X_FORWARDED_FOR", environ.get("REMOTE_ADDR"))
    if address is not None:
        address = address.encode("utf-8").split(b",")[0].strip()
    agent = environ.get("HTTP_USER_AGENT")
    if agent is not None:
        agent = agent.encode("utf-8")
    return sha512(f"{address}|{agent}".encode("utf8")).hexdigest()


def init_app(app: Flask) -> None:
    """Put the layer in front of the Flask app (call before any outer middleware wraps it)."""
    app.wsgi_app = QuietPolls(app, app.wsgi_app)
