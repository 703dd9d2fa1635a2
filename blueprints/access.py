"""Access rules: every route declares who may call it, and a request hook enforces it.

Deny by default: a view without a rule answers 403 (and the URL-map test fails), so a
new route cannot be forgotten. Rules:

- ``public``   — anyone (login page, health check, static files);
- ``owner``    — the logged-in owner's session (a member's session gets 403);
- ``allow(action)`` — any signed-in account whose role may do `action`
  (services/core/permissions.py, the one place that decides); the view still checks the
  record's project with `permissions.can(account, action, record)` and answers 404 outside it;
- ``api(scope)`` — a bearer API token holding `scope`, or the owner's session;
- ``owner_api`` — JSON endpoints reserved to the owner's session (no token can);
- ``member_api(action)`` — JSON routes under /api/m/ for any account whose role may do
  `action`, by session or by that account's token (`read` scope for reading, `write` else);

Deny by default for members too: every rule but ``public``, ``share``, ``allow`` and
``member_api`` is the owner's alone (``permissions.OWNER_ONLY``), and a member's API token
opens only ``member_api`` routes.
- ``share``    — a mentor's share link (`/s/<token>`): the token in the path is checked by
  the view; no session is read or written there and no owner credential is used;
- ``signed``   — a link Sagan signed and emailed (one-click unsubscribe, `/email/unsubscribe/<token>`):
  the view checks the signature; no session credential is used, so no CSRF token either
  (a mail client posts it, RFC 8058);
- ``api("write+promote")`` — a token needs every scope joined by `+`.

CSRF is enforced here for every state-changing request made with a session; bearer
requests carry no ambient credential, so they need none. Bearer requests with unknown
tokens are counted per address; past SAGAN_BEARER_MAX_FAILURES in the window, that
address's bearer requests get 429 before any token is looked up.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Callable
from urllib.parse import urlsplit

import redis
from flask import Flask, current_app, g, jsonify, redirect, request, url_for
from flask_login import current_user
from flask_wtf.csrf import CSRFError

from blueprints.errors import error_response, wants_json, with_message
from extensions import csrf
from front import headers
from services.core import auth as auth_service
from services.core import members, permissions, redis_store
from services.core.actors import Actor
from services.core.clock import utcnow

log = logging.getLogger(__name__)

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


def _mark(kind: str, scope: str | None = None) -> Callable:
    def decorator(view: Callable) -> Callable:
        view.access_rule = (kind, scope)
        return view
    return decorator


public = _mark("public")
owner = _mark("owner")
owner_api = _mark("owner_api")
share = _mark("share")
signed = _mark("signed")
# A pod's own `spt_` token: only its progress and artifact posts (SPEC §6.5).
pod = _mark("pod")


def pod_token_checked_in_write(view: Callable) -> Callable:
    """With `pod`: the view's own write statement looks the token up (progress and metric
    ingest, the hot paths: one round trip per post instead of a lookup, then the write).
    The hook still applies the bad-token throttle and refuses what cannot be a pod token;
    it leaves the token's digest in `g.pod_token_digest`, and the view must answer
    `refuse_pod_token()` before doing anything when its statement (or, for a body it
    refuses, `tokens.pod_for_digest`) finds no valid pod — so a bad token is a 401 first,
    whatever the body."""
    view.pod_token_in_write = True
    return view


def api(scope: str) -> Callable:
    return _mark("api", scope)


def allow(action: str) -> Callable:
    """Open a session route to every role that may do `action` (the owner always may)."""
    return _mark("allow", action)


def member_api(action: str) -> Callable:
    """Open a JSON route to every role that may do `action`, with a session or with an API
    token of the account: a `read_…` action needs the token's `read` scope, any other its
    `write`. The view scopes what it reads or writes to `account()`'s projects."""
    return _mark("member_api", action)


def member_api_scope(action: str) -> str:
    """The token scope a `member_api` route of `action` needs."""
    return "read" if action.startswith("read_") else "write"


def body_limit(setting: str) -> Callable:
    """Let this view accept bodies up to the `setting` config value instead of
    MAX_CONTENT_LENGTH (artifact uploads)."""
    def decorator(view: Callable) -> Callable:
        view.body_limit_setting = setting
        return view
    return decorator


def _refuse_oversized_body() -> None:
    """413 before any work when the declared body is over the view's cap (a view that never
    reads its body would otherwise answer 404 or 200 to a 50 MB request)."""
    view = current_app.view_functions.get(request.endpoint or "")
    setting = getattr(view, "body_limit_setting", None)
    if setting:
        request.max_content_length = current_app.config[setting]
    limit = request.max_content_length
    if limit is not None and request.content_length is not None and request.content_length > limit:
        from services.core.errors import TooLarge
        raise TooLarge(f"The request is too large: {request.content_length:,} bytes; the limit here is {limit:,}.")


def _has_body() -> bool:
    return bool(request.content_length) or "chunked" in request.headers.get("Transfer-Encoding", "").lower()


def rule_for(endpoint: str | None) -> tuple[str, str | None] | None:
    if endpoint == "static":
        return ("public", None)
    view = current_app.view_functions.get(endpoint or "")
    return getattr(view, "access_rule", None)


def _json_error(status: int, code: str, message: str):
    response = jsonify({"error": code, "message": message})
    response.status_code = status
    return with_message(response, code, message)


def _htmx_return_path() -> str:
    """The page htmx was on, as a local path: HX-Current-URL is absolute, and login only
    follows local paths, so passing it whole would always land on the board."""
    parts = urlsplit(request.htmx.current_url or "")
    if parts.netloc and parts.netloc != request.host:
        return "/"
    path = parts.path or "/"
    return f"{path}?{parts.query}" if parts.query else path


def _login_required():
    if request.htmx:
        # htmx would swap a login form into a card; send the whole page to login instead.
        # Not a fragment decision (blueprints/_htmx.py): every htmx request, boosted
        # navigation included, must leave for the login page.
        response = current_app.response_class(status=401)
        response.headers["HX-Redirect"] = url_for("auth.login", next=_htmx_return_path())
        return response
    if wants_json():
        return _json_error(401, "unauthorized", "Log in or send an API token (Authorization: Bearer sk_…).")
    return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))


def _not_for_role(account):
    """403 for a signed-in member on a route their role does not open: a page for a
    browser, JSON for the API, and for htmx a 403 its toast reports (nothing swapped)."""
    home = url_for("members.home")
    return error_response(403, "not_for_your_role", f"Your account ({account.role}) cannot open this; "
                          f"your projects are on {home}.", "Not open to your account")


def refuse_pod_token():
    """The 401 for an unknown or expired pod token, counted towards the address's limit."""
    _bearer_failed()
    return _json_error(401, "invalid_pod_token", "The pod token is unknown or expired "
                       "(a pod's token ends 15 minutes after the pod stops).")


def _bearer_secret() -> str | None:
    return headers.bearer_secret(request.headers.get("Authorization", ""))


# Addresses this process knows to be over the bad-token limit, and until when. The count
# itself is shared in Redis; each process learns of the limit from its own next failure
# (INCR's answer), so a limited address gets at most one more lookup per process per
# window, and requests with good tokens never pay a Redis round trip (the ingest path).
_throttled_until: dict[str, datetime] = {}


def limited_here(address: str) -> bool:
    """Has this process seen this address pass the bad-token limit (still maybe in force)?
    The lean ingest layer leaves such a request to `enforce`, which answers the 429."""
    return address in _throttled_until


def _bearer_throttled():
    """429 when this address sent too many unknown tokens lately — answered before any token
    is looked up, so guessing gains nothing — else None."""
    address = request.remote_addr or "unknown"
    until = _throttled_until.get(address)
    if until is None:
        return None
    try:  # only limited addresses pay this round trip: is the shared count still over?
        failures = int(redis_store.connection().get(f"sagan:bearer-failures:{address}") or 0)
    except redis.RedisError:
        failures = 0
    if until <= utcnow() or failures < current_app.config["BEARER_MAX_FAILURES"]:
        _throttled_until.pop(address, None)
        return None
    response = _json_error(429, "rate_limited", "Too many requests with an unknown or expired token from your "
                           "address; wait a minute, and check the token you send.")
    response.headers["Retry-After"] = str(max(1, int((until - utcnow()).total_seconds())))
    return response


def _bearer_failed() -> None:
    """Count a bad token for this address (Redis, shared by every process). Redis being
    down does not block pods and scripts: this limit is a brake on guessing, and the
    tokens are 256 bits."""
    address = request.remote_addr or "unknown"
    key = f"sagan:bearer-failures:{address}"
    window = current_app.config["BEARER_FAILURE_WINDOW"]
    try:
        # count_in_window, not INCR + EXPIRE … NX: NX needs Redis 7, and on the embedded
        # Redis 6.2 the whole pipeline failed, so no failure was ever counted.
        count, ttl = redis_store.count_in_window_with_ttl(key, window)
    except redis.RedisError:
        log.warning("bearer failure not counted: Redis is unavailable")
        return
    if count >= current_app.config["BEARER_MAX_FAILURES"]:
        now = utcnow()
        # A web worker runs requests on several threads: copy the items in one step (list()
        # of a dict view holds the GIL throughout) and let another thread's removal win.
        for stale, until in list(_throttled_until.items()):
            if until <= now:
                _throttled_until.pop(stale, None)
        _throttled_until[address] = now + timedelta(seconds=ttl if ttl and ttl > 0 else window)


def enforce() -> object | None:
    """before_request hook: apply the endpoint's access rule and CSRF."""
    if request.endpoint is None:
        return None  # 404/405 are answered by the router
    _refuse_oversized_body()
    rule = rule_for(request.endpoint)
    if rule is None:
        return _json_error(403, "no_access_rule", "This route declares no access rule.")
    kind, scope = rule
    g.actor = None
    g.token = None
    g.account = None

    if kind == "pod":
        from services.dispatch import tokens as pod_tokens
        if (throttled := _bearer_throttled()) is not None:
            return throttled
        secret = _bearer_secret()
        if getattr(current_app.view_functions[request.endpoint], "pod_token_in_write", False):
            if not pod_tokens.could_be_token(secret):
                return refuse_pod_token()
            g.pod_token_digest = pod_tokens.digest(secret)
            # The token before the body: a stranger's upload is refused before any of it
            # is waited for (front/gate.py). The view's statement still checks it as it writes.
            if _has_body() and not pod_tokens.check_before_body(g.pod_token_digest):
                return refuse_pod_token()
            return None  # bearer requests need no CSRF check
        found = pod_tokens.pod_for_token(secret)
        if found is None:
            return refuse_pod_token()
        g.pod = found
        g.actor = Actor("pod", str(found.id), found.name)
        return None  # bearer requests carry no cookie, so no CSRF check

    if kind in ("share", "signed"):
        # Stateless: never touch the session or current_user here (blueprints/share.py,
        # blueprints/unsubscribe.py); the token in the path is the credential.
        return None

    if kind == "api" and (secret := _bearer_secret()) is not None:
        if (throttled := _bearer_throttled()) is not None:
            return throttled
        token = auth_service.verify_token(secret)
        if token is None:
            _bearer_failed()
            return _json_error(401, "invalid_token", "The API token is unknown, expired or revoked.")
        missing = [needed for needed in scope.split("+") if needed not in token.scopes]
        if missing:
            return _json_error(403, "missing_scope", f"This token lacks the {missing[0]!r} scope.")
        if not permissions.role_may(token.holder_role, permissions.OWNER_ONLY):
            return _json_error(403, "not_for_your_role", "This API route is not open to a "
                               f"{token.holder_role}'s token.")
        g.token = token
        g.actor = Actor.token(token)
        return None  # bearer requests carry no cookie, so no CSRF check

    if kind == "member_api" and (secret := _bearer_secret()) is not None:
        return _enforce_member_token(secret, scope)

    if kind in ("owner", "api", "owner_api", "allow", "member_api"):
        if kind == "owner_api" and _bearer_secret() is not None:
            return _json_error(403, "owner_session_required", "Only the owner's session can do this.")
        if not current_user.is_authenticated:
            return _login_required()
        account = current_user._get_current_object()
        if not account.is_owner:
            members.note_activity(account)
        needed = scope if kind in ("allow", "member_api") else permissions.OWNER_ONLY
        if not permissions.can(account, needed):
            return _not_for_role(account)
        g.account = account
        g.actor = Actor.owner(account) if account.is_owner else Actor.member(account)

    if request.method not in SAFE_METHODS:
        csrf.protect()  # raises CSRFError → handled below
    return None


def _enforce_member_token(secret: str, action: str):
    """A bearer token on a `member_api` route: valid, holding the action's scope, not an agent
    run's (confined to one experiment), and its holder's role may do `action`. The holder is
    the acting account, so a member's token acts as the member (their name on what it writes)."""
    if (throttled := _bearer_throttled()) is not None:
        return throttled
    token = auth_service.verify_token(secret)
    if token is None:
        _bearer_failed()
        return _json_error(401, "invalid_token", "The API token is unknown, expired or revoked.")
    needed = member_api_scope(action)
    if needed not in token.scopes:
        return _json_error(403, "missing_scope", f"This token lacks the {needed!r} scope.")
    if token.experiment_id is not None:
        return _json_error(403, "not_for_your_role", "An agent run's token reaches its own experiment only.")
    account = members.token_holder(token)
    if not permissions.can(account, action):
        return _json_error(403, "not_for_your_role", "This API route is not open to a "
                           f"{token.holder_role}'s token.")
    if not account.is_owner:
        members.note_activity(account)
    g.token = token
    g.account = account
    g.actor = Actor.member(account) if not account.is_owner else Actor.token(token)
    return None  # bearer requests carry no cookie, so no CSRF check


def init_app(app: Flask) -> None:
    app.before_request(enforce)

    @app.errorhandler(CSRFError)
    def csrf_failed(error: CSRFError):
        message = ("Your form expired or came from another site (CSRF check failed: "
                   f"{error.description}). Reload the page and try again.")
        # The page script offers a Reload button when it sees the csrf_failed code.
        return error_response(400, "csrf_failed", message, "Please reload")

    @app.context_processor
    def inject_actor():
        return {"actor": getattr(g, "actor", None)}


def account():
    """The signed-in account (a session's, or a `member_api` token's holder) of this request."""
    return g.account


def actor() -> Actor:
    """The acting credential of this request (set by `enforce`)."""
    return g.actor
