"""The owner's API tokens page: create (secret shown once), list, revoke."""
from __future__ import annotations

from flask import Blueprint, make_response, redirect, render_template, request, url_for
from flask_login import current_user

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from models import db
from services.core import auth as auth_service
from services.core import members, registry

bp = Blueprint("tokens", __name__)


_STASH = "api-tokens"


@bp.get("/api-tokens")
@access.owner
def index():
    """List tokens with prefix, scopes and last use; right after a create, its secret, once."""
    stashed = take_stash(_STASH)
    tokens = auth_service.list_tokens()
    # Members' own tokens are listed too (the owner may revoke them), each under its holder's name.
    holders = members.names_of({t.user_id for t in tokens if t.user_id and t.user_id != current_user.id})
    new_token = next((t for t in tokens if str(t.id) == stashed.get("token_id")), None)
    response = make_response(render_template(
        "tokens/index.html", tokens=tokens, scopes=registry.API_TOKEN_SCOPES, holders=holders,
        new_secret=stashed.get("secret") if new_token else None, new_token=new_token,
        error=stashed.get("error"), form=stashed.get("form") or {}))
    # The page may carry a secret: never cache it.
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.post("/api-tokens")
@access.owner
def create():
    """Create a token; the redirect shows its secret exactly once (a reload, or a second
    tap with the same form key, creates nothing more)."""
    scopes = request.form.getlist("scopes")

    def make():
        token, secret = auth_service.create_token(request.form.get("name", ""), scopes, current_user)
        db.session.flush()
        stash_for(_STASH, {"token_id": str(token.id), "secret": secret})

    def refused(exc):
        stash_for(_STASH, {"error": exc.message, "form": {"name": request.form.get("name", ""), "scopes": scopes}})
        return redirect(url_for("tokens.index"), code=303)

    return perform(make, refused=refused, done=lambda: redirect(url_for("tokens.index"), code=303))


@bp.post("/api-tokens/<token_id>/revoke")
@access.owner
def revoke(token_id: str):
    """Revoke a token; it stops working at once."""
    return perform(lambda: auth_service.revoke_token(token_id),
                   done=lambda: redirect(url_for("tokens.index"), code=303))
