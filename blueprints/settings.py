"""Owner-editable settings: GPU prices and the auto-approve limit (more arrive with pods)."""
from __future__ import annotations

from flask import Blueprint, abort, current_app, make_response, redirect, render_template, request, url_for

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from models import db
from services.agents import web_tools
from services.core import pod_accounts, registry, settings
from services.core.errors import ValidationError
from services.dispatch import accounts, costs, pod_secrets, ssh_keys
from services.dispatch.spec import GPUS
from services.research import projects, zotero
from services.day import weekly_review
from services.results import shares
from services.workflow import email_notify, email_settings, experiments

bp = Blueprint("settings", __name__)
_SHARE_STASH = "share-links"


def _page(error=None, form=None, saved=False, webhook_error=None, share_error=None, share_form=None,
          new_share=None, repo_error=None, secrets_error=None, secrets_form=None, web_error=None, web_form=None,
          ssh_error=None, ssh_form=None, zotero_error=None, zotero_form=None, email_error=None, email_form=None,
          email_notice=None, review_error=None, review_form=None):
    stored = settings.get("gpu_prices") or {}
    links = shares.list_links()
    return render_template("settings/index.html", gpus=GPUS, stored=stored, error=error, form=form,
                           limit=settings.get("auto_approve_max_usd"), saved=saved,
                           webhook_url=settings.get("webhook_url") or "", webhook_error=webhook_error,
                           share_links=links, share_numbers=shares.experiment_numbers(links),
                           share_projects=projects.by_ids(link.project_id for link in links),
                           share_error=share_error, share_form=share_form or {}, new_share=new_share,
                           scope_labels=shares.SCOPE_LABELS,
                           repo={k: settings.get(k) or "" for k in settings.REPO_KEYS},
                           repo_error=repo_error, daily_cap=settings.get("daily_cap_usd"),
                           pod_accounts=accounts.scopes(current_app.config),
                           pod_secret_names=pod_secrets.allowlist(), secrets_error=secrets_error,
                           secrets_form=secrets_form, signed_out=request.args.get("signed_out") == "1",
                           web_enabled=web_tools.enabled(), web_domains=web_tools.allowed_domains(),
                           web_error=web_error, web_form=web_form,
                           ssh_accounts=[(account, bool((current_app.config.get(key) or "").strip()))
                                         for account, key in accounts.keys().items()],
                           ssh_keys=ssh_keys.views(), ssh_error=ssh_error or {}, ssh_form=ssh_form or {},
                           zotero=zotero.configured(), zotero_error=zotero_error,
                           zotero_form={k: v for k, v in (zotero_form or {}).items() if k != "api_key"},
                           email=email_settings.shown(), email_error=email_error, email_notice=email_notice,
                           email_form={k: v for k, v in (email_form or {}).items() if k != "password"},
                           security_labels=email_settings.SECURITY_LABELS,
                           kind_labels=registry.NOTIFICATION_KIND_LABELS, failed_emails=email_notify.failed_emails(),
                           time_zone=email_settings.owner_zone().key,
                           review_schedule=weekly_review.schedule(), weekdays=registry.WEEKDAYS,
                           review_error=review_error, review_form=review_form or {})


@bp.get("/settings")
@access.owner
def index():
    """Show the settings; right after a share link was created, its URL, once."""
    stashed = take_stash(_SHARE_STASH)
    new_share = None
    if stashed.get("link_id"):
        link = next((row for row in shares.list_links() if str(row.id) == stashed["link_id"]), None)
        new_share = {"link": link, "url": stashed["url"]} if link else None
    response = make_response(_page(saved=request.args.get("saved") == "1", new_share=new_share,
                                   share_error=stashed.get("error"), share_form=stashed.get("form")))
    response.headers["Cache-Control"] = "no-store"  # it may carry a link's secret
    return response


def _save(action, refused, anchor: str = ""):
    """One settings form: save through `perform`; an invalid value re-renders the page with
    the sentence beside its form (only ValidationError: any other refusal is the error page)."""
    return perform(action, refused=refused, refusals=(ValidationError,),
                   done=lambda: redirect(url_for("settings.index", saved=1) + anchor, code=303))


@bp.post("/settings/pricing")
@access.owner
def pricing():
    """Save GPU prices and the auto-approve limit; errors re-render with the message."""
    return _save(lambda: costs.update_pricing(request.form), lambda exc: _page(error=exc, form=request.form))


@bp.post("/settings/webhook")
@access.owner
def webhook():
    """Save the owner-turn webhook URL (https, public host), or clear it."""
    return _save(lambda: settings.update_webhook(request.form.get("webhook_url", "")),
                 lambda exc: _page(webhook_error=exc.message))


@bp.post("/settings/share-links")
@access.owner
def create_share_link():
    """Create a mentor share link; the redirect shows its URL once (only a hash is kept).
    A reload or a second tap with the same form key creates no second link."""
    form = request.form

    def create():
        experiment = experiments.get_experiment(form["experiment"]) if form.get("experiment", "").strip() else None
        link, token = shares.create_link(scope=form.get("scope", ""), experiment=experiment,
                                         label=form.get("label", ""), expires_in_days=form.get("expires_in_days"),
                                         include_comments=form.get("include_comments") == "1")
        db.session.flush()
        stash_for(_SHARE_STASH, {"link_id": str(link.id), "url": url_for("share.view", token=token, _external=True)})

    def refused(exc):
        stash_for(_SHARE_STASH, {"error": exc.message, "form": {k: v for k, v in form.items() if k != "csrf_token"}})
        return _to_share_links()

    return perform(create, refused=refused, done=_to_share_links)


def _to_share_links():
    return redirect(url_for("settings.index") + "#share-links", code=303)


@bp.post("/settings/share-links/<link_id>/revoke")
@access.owner
def revoke_share_link(link_id: str):
    """Revoke a share link: it answers 404 from now on."""
    return perform(lambda: shares.revoke(link_id),
                   done=lambda: redirect(url_for("settings.index", saved=1) + "#share-links", code=303))


@bp.post("/settings/pod-secrets")
@access.owner
def pod_secret_allowlist():
    """Save the names of server secrets pods may receive (never values; never Sagan's own)."""
    raw = request.form.get("pod_secret_allowlist", "")
    return _save(lambda: pod_secrets.update_allowlist(raw),
                 lambda exc: _page(secrets_error=exc.message, secrets_form=raw), "#pod-secrets")


@bp.post("/settings/web-research")
@access.owner
def web_research():
    """Switch the agents' web search and fetch on or off and set the domains they may reach;
    a bad domain re-renders with the reason and saves nothing."""
    return _save(lambda: web_tools.update(request.form),
                 lambda exc: (_page(web_error=exc.message, web_form=request.form), 422), "#web-research")


@bp.post("/settings/research-repository")
@access.owner
def research_repository():
    """Save the repository pods check out (https/ssh), its default branch and commands."""
    return _save(lambda: settings.update_research_repo(request.form), lambda exc: _page(repo_error=exc.message))


@bp.post("/settings/research-repository/clear")
@access.owner
def clear_research_repository():
    """Forget the research repository, after the owner ticked the confirmation."""
    return _save(lambda: settings.clear_research_repo(request.form.get("confirm")),
                 lambda exc: _page(repo_error=exc.message), "#research-repository")


@bp.post("/settings/ssh-keys/<account>")
@access.owner
def ssh_keys_of(account: str):
    """Register the owner's SSH public keys on a RunPod account (and keep them); a bad key, a
    private key or RunPod refusing re-renders with the reason and changes nothing. A private
    key is never shown again, not even back in its own form."""
    if account not in pod_accounts.with_ssh():
        abort(404)
    raw = request.form.get("keys", "")
    typed = "" if ssh_keys.looks_private(raw) else raw
    return _save(lambda: ssh_keys.update(account, raw),
                 lambda exc: (_page(ssh_error={account: exc.message}, ssh_form={account: typed}), 422), "#ssh-keys")


@bp.post("/settings/zotero")
@access.owner
def zotero_library():
    """Save the Zotero library id and API key (the key is never shown back), or forget them."""
    return _save(lambda: zotero.update_settings(request.form),
                 lambda exc: (_page(zotero_error=exc.message, zotero_form=request.form), 422), "#zotero")


@bp.post("/settings/email")
@access.owner
def email_server():
    """Save the SMTP server and the two addresses (the password is never shown back); a bad
    value re-renders with the reason and saves nothing."""
    return _save(lambda: email_settings.update_smtp(request.form),
                 lambda exc: (_page(email_error=exc.message, email_form=request.form), 422), "#email")


@bp.post("/settings/email/preferences")
@access.owner
def email_preferences():
    """Save which kinds are emailed, quiet hours and the owner-turn interval."""
    return _save(lambda: email_settings.update_preferences(request.form),
                 lambda exc: (_page(email_error=exc.message, email_form=request.form), 422), "#email")


@bp.post("/settings/email/test")
@access.owner
def email_test():
    """Send a test email now and say what happened (sent, or the server's answer)."""
    try:
        notice = email_notify.send_test()
    except ValidationError as exc:
        return _page(email_error=exc.message), 422
    return _page(email_notice=notice)


@bp.post("/settings/email/failed/<uuid:email_id>/dismiss")
@access.owner
def dismiss_failed_email(email_id):
    """Forget an email that could not be sent, once read."""
    return _save(lambda: email_notify.dismiss_failed(email_id), lambda exc: _page(email_error=exc.message), "#email")


@bp.post("/settings/email/failed/<uuid:email_id>/retry")
@access.owner
def retry_failed_email(email_id):
    """Send an email that could not be sent again (with a fresh set of retries)."""
    return _save(lambda: email_notify.retry_failed(email_id), lambda exc: _page(email_error=exc.message), "#email")


@bp.post("/settings/weekly-review")
@access.owner
def weekly_review_schedule():
    """The day and hour (owner's time zone) the weekly review is drafted."""
    form = request.form
    return _save(lambda: weekly_review.save_schedule(form.get("day"), form.get("hour")),
                 lambda exc: (_page(review_error=exc.message, review_form=form), 422), "#weekly-review")
