"""Owner-editable settings: GPU prices and the auto-approve limit (more arrive with pods)."""
from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, url_for

from blueprints import access
from models import db
from services import settings
from services.dispatch.spec import GPUS
from services.errors import ValidationError

bp = Blueprint("settings", __name__)


def _page(error=None, form=None, saved=False, webhook_error=None):
    stored = settings.get("gpu_prices") or {}
    return render_template("settings/index.html", gpus=GPUS, stored=stored, error=error, form=form,
                           limit=settings.get("auto_approve_max_usd"), saved=saved,
                           webhook_url=settings.get("webhook_url") or "", webhook_error=webhook_error)


@bp.get("/settings")
@access.owner
def index():
    """Show the settings."""
    return _page(saved=request.args.get("saved") == "1")


@bp.post("/settings/pricing")
@access.owner
def pricing():
    """Save GPU prices and the auto-approve limit; errors re-render with the message."""
    try:
        settings.update_pricing(request.form)
    except ValidationError as exc:
        db.session.rollback()
        return _page(error=exc, form=request.form)
    db.session.commit()
    return redirect(url_for("settings.index", saved=1), code=303)


@bp.post("/settings/webhook")
@access.owner
def webhook():
    """Save the owner-turn webhook URL (https, public host), or clear it."""
    try:
        settings.update_webhook(request.form.get("webhook_url", ""))
    except ValidationError as exc:
        db.session.rollback()
        return _page(webhook_error=exc.message)
    db.session.commit()
    return redirect(url_for("settings.index", saved=1), code=303)
