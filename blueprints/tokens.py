"""The owner's API tokens page: create (secret shown once), list, revoke."""
from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, url_for

from blueprints import access
from models import db
from services import auth as auth_service
from services import registry
from services.errors import ValidationError

bp = Blueprint("tokens", __name__)


@bp.get("/api-tokens")
@access.owner
def index():
    """List tokens with prefix, scopes and last use."""
    return render_template("tokens/index.html", tokens=auth_service.list_tokens(),
                           scopes=registry.API_TOKEN_SCOPES, new_secret=None, error=None, form={})


@bp.post("/api-tokens")
@access.owner
def create():
    """Create a token and show its secret exactly once."""
    from flask_login import current_user
    scopes = request.form.getlist("scopes")
    try:
        token, secret = auth_service.create_token(request.form.get("name", ""), scopes, current_user)
    except ValidationError as exc:
        db.session.rollback()
        return render_template("tokens/index.html", tokens=auth_service.list_tokens(),
                               scopes=registry.API_TOKEN_SCOPES, new_secret=None, error=exc.message,
                               form={"name": request.form.get("name", ""), "scopes": scopes}), 200
    db.session.commit()
    response = render_template("tokens/index.html", tokens=auth_service.list_tokens(),
                               scopes=registry.API_TOKEN_SCOPES, new_secret=secret, new_token=token,
                               error=None, form={})
    # The page carries a secret: never cache it.
    return response, 200, {"Cache-Control": "no-store"}


@bp.post("/api-tokens/<token_id>/revoke")
@access.owner
def revoke(token_id: str):
    """Revoke a token; it stops working at once."""
    auth_service.revoke_token(token_id)
    db.session.commit()
    return redirect(url_for("tokens.index"), code=303)
