"""Signing in and out (the owner and invited members)."""
from __future__ import annotations

from urllib.parse import urlsplit

from flask import Blueprint, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user, logout_user

from blueprints import access
from blueprints._actions import perform
from services.core import auth as auth_service
from services.core import permissions
from services.core.errors import RateLimited, ValidationError

bp = Blueprint("auth", __name__)


def _safe_next(target: str | None) -> str:
    """Only same-site paths: an open redirect after login would be a phishing aid."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return url_for("today.index")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return url_for("today.index")
    return target


@bp.route("/login", methods=["GET", "POST"])
@access.public
def login():
    """Show the login form; check it on POST (rate limited per address).

    Not `perform`: a login decides no rows here (failed attempts are counted in Redis, and
    a password re-hash commits itself in the service), and its refusals are the form again
    with 401 or 429, not a domain refusal to roll back."""
    error = None
    status = 200
    email = request.form.get("email", "")
    if request.method == "POST":
        try:
            user = auth_service.authenticate(email, request.form.get("password", ""),
                                             request.remote_addr or "unknown")
        except RateLimited as exc:
            error, status = exc.message, 429
        except ValidationError as exc:
            error, status = exc.message, 401
        else:
            # A fresh session: nothing from before the login (a planted cookie, its CSRF
            # secret) carries over; Flask-WTF makes a new CSRF secret on the next form.
            session.clear()
            login_user(user, remember=bool(request.form.get("remember")))
            target = request.args.get("next")
            if not user.is_owner and not target:
                return redirect(url_for("members.home"))  # a member's first page is theirs, not the board
            return redirect(_safe_next(target))
    return render_template("auth/login.html", error=error, email=email), status


@bp.post("/logout")
@access.allow(permissions.SIGNED_IN)
def logout():
    """End the account's session server-side: a copy of the cookie taken earlier stops working too."""

    def signed_out():
        logout_user()
        session.clear()
        return redirect(url_for("auth.login"), code=303)

    return perform(lambda: auth_service.end_sessions(current_user._get_current_object()), done=signed_out)


@bp.post("/logout/everywhere")
@access.owner
def logout_everywhere():
    """Sign out every browser and remember-me cookie, then sign this browser back in."""
    user = current_user._get_current_object()

    def signed_back_in():
        session.clear()
        login_user(user)
        return redirect(url_for("settings.index", signed_out=1), code=303)

    return perform(lambda: auth_service.end_sessions(user), done=signed_back_in)
