"""One-click unsubscribe from one kind of email (SPEC §12.5): `/email/unsubscribe/<token>`.

The signed token in the path is the credential (services/workflow/email_notify.py): no login,
no session, and it changes only the one preference it names. GET asks first (a mail scanner
that follows links unsubscribes no one); POST unsubscribes — from the page's button, or from
the mail client itself (RFC 8058 `List-Unsubscribe-Post`). A tampered or expired token
changes nothing and says so.
"""
from __future__ import annotations

from flask import Blueprint, make_response, render_template, request

from blueprints import access
from services.core import registry
from services.workflow import email_notify

bp = Blueprint("unsubscribe", __name__, url_prefix="/email/unsubscribe")

HEADERS = {"X-Robots-Tag": "noindex, nofollow, noarchive", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store, private"}


def _answer(state: str, kind: str | None = None, status: int = 200):
    response = make_response(render_template("unsubscribe/page.html", state=state,
                                             label=registry.NOTIFICATION_KIND_LABELS.get(kind or "", "")), status)
    response.headers.update(HEADERS)
    return response


@bp.route("/<token>", methods=["GET", "POST"])
@access.signed
def page(token: str):
    """Ask (GET), or turn off the token's kind of email (POST)."""
    if request.method == "GET":
        kind = email_notify.kind_of_token(token)
        return _answer("ask", kind) if kind else _answer("invalid", status=404)
    kind = email_notify.unsubscribe(token)
    return _answer("done", kind) if kind else _answer("invalid", status=404)
