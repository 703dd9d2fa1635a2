"""Members' accounts (SPEC §13): the owner's Settings → Members page, the invitation link a
new member follows to set a password, and a member's home page. Thin: services/core/members.py
decides; what members read and write in their projects is blueprints/member_pages.py."""
from __future__ import annotations

from flask import Blueprint, make_response, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from models import db
from services.core import auth, members, permissions, registry
from services.core.clock import utcnow
from services.core.errors import NotFound, ValidationError
from services.day import member_day
from services.research import projects

bp = Blueprint("members", __name__)
_STASH = "members"


@bp.app_template_global()
def account_name(user_id) -> str:
    """The name an account's work is shown under (a member's proposal on the owner's pages)."""
    return members.display_name(user_id)


@bp.app_template_global()
def member_names(events) -> dict:
    """Member id → name for the members among these timeline events' actors: one query for
    a page of events, none when no member acted."""
    return members.names_of({event.actor_id for event in events if event.actor_kind == "member" and event.actor_id})


def _no_store(response):
    """These pages may carry an invitation's secret: never cached, never sent as a referrer."""
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


@bp.get("/settings/members")
@access.owner
def index():
    """Members with their roles, projects and last activity; pending invitations; the invite
    form. Right after an invitation, its link, once (to copy when no email was sent)."""
    stashed = take_stash(_STASH)
    accounts = members.list_accounts()
    return _no_store(make_response(render_template(
        "members/index.html", accounts=accounts, projects_of=members.projects_by_member(accounts),
        invitations=[(invitation, members.invitation_projects(invitation))
                     for invitation in members.pending_invitations()],
        all_projects=projects.list_projects(), token_counts=members.live_token_counts(accounts),
        roles=registry.INVITABLE_ROLES, now=utcnow(), new_link=stashed.get("link"),
        new_email=stashed.get("email"), emailed=stashed.get("emailed"), error=stashed.get("error"),
        error_member=stashed.get("member"), form=stashed.get("form") or {})))


def _back():
    return redirect(url_for("members.index"), code=303)


def _refused_with_form(member_id=None):
    def refused(exc):
        stash_for(_STASH, {"error": exc.message, "member": member_id,
                           "form": {"email": request.form.get("email", ""),
                                    "display_name": request.form.get("display_name", ""),
                                    "role": request.form.get("role", ""),
                                    "projects": request.form.getlist("projects")}})
        return _back()
    return refused


@bp.post("/settings/members/invite")
@access.owner
def invite():
    """Store an invitation; hand it to email if a sender is set up, else show its link once."""
    made = {}

    def make():
        invitation, token = members.invite(current_user._get_current_object(), request.form.get("email", ""),
                                           request.form.get("role", ""), request.form.getlist("projects"),
                                           request.form.get("display_name", ""))
        made.update(invitation=invitation, link=url_for("members.join", token=token, _external=True))

    def sent():
        # After the commit: the invitation exists before its link leaves, and the SMTP
        # conversation holds no transaction. Nothing made (a repeated form key): nothing to send.
        if made:
            invitation, link = made["invitation"], made["link"]
            emailed = members.deliver(invitation, link)
            stash_for(_STASH, {"link": None if emailed else link, "email": invitation.email, "emailed": emailed})
        return _back()

    return perform(make, refused=_refused_with_form(), refusals=(ValidationError,), done=sent)


@bp.post("/settings/members/<uuid:member_id>")
@access.owner
def change(member_id):
    """Change a member's role and projects; it holds from their next request."""
    return perform(lambda: members.change(current_user._get_current_object(), member_id,
                                          request.form.get("role", ""), request.form.getlist("projects")),
                   refused=_refused_with_form(str(member_id)), refusals=(ValidationError,), done=_back)


@bp.post("/settings/members/<uuid:member_id>/remove")
@access.owner
def remove(member_id):
    """Remove a member: their sessions and tokens stop working at once."""
    return perform(lambda: members.remove(current_user._get_current_object(), member_id), done=_back)


@bp.post("/settings/invitations/<uuid:invitation_id>/withdraw")
@access.owner
def withdraw(invitation_id):
    """Withdraw a pending invitation: its link stops working."""
    return perform(lambda: members.withdraw_invitation(current_user._get_current_object(), invitation_id),
                   done=_back)


@bp.route("/join/<token>", methods=["GET", "POST"])
@access.public
def join(token: str):
    """The invitation link: the invited person chooses a name and a password, and is signed
    in. A used, expired, withdrawn or made-up link answers 404 with one sentence for all."""
    try:
        invitation = members.open_invitation(token)
    except NotFound as exc:
        return _no_store(make_response(render_template("members/join.html", gone=exc.message), 404))
    error = None
    if request.method == "POST":
        created = {}

        def make():
            created["user"] = members.accept(token, request.form.get("display_name", ""),
                                             request.form.get("password", ""), request.form.get("confirm", ""))

        def signed_in():
            session.clear()  # nothing from before (a planted cookie) carries into the new account
            login_user(created["user"])
            return redirect(url_for("members.home"), code=303)

        def refused(exc):
            nonlocal error
            error = exc
            return None

        answer = perform(make, refused=refused, done=signed_in, keyed=False)
        if error is None:
            return answer
        if isinstance(error, NotFound):
            return _no_store(make_response(render_template("members/join.html", gone=error.message), 404))
    return _no_store(make_response(render_template(
        "members/join.html", invitation=invitation, error=error, name=request.form.get("display_name"),
        project_titles=[p.title for p in members.invitation_projects(invitation)],
        password_min=auth.PASSWORD_MIN), 400 if error else 200))


@bp.get("/welcome")
@access.allow(permissions.SIGNED_IN)
def home():
    """A member's first page, their Today: their projects, the newest discussion in them and
    what became of their proposals. The owner, who has the board, goes there."""
    account = current_user._get_current_object()
    if account.is_owner:
        return redirect(url_for("board.index"))
    mine = members.projects_by_member([account])[account.id]
    return render_template("members/home.html", account=account, projects=mine, day=member_day.for_member(account),
                           may_read=permissions.role_may(account.role, "read_project"),
                           may_read_experiments=permissions.role_may(account.role, "read_experiment"),
                           may_work_on_todos=permissions.role_may(account.role, "work_on_assigned_todo"),
                           may_read_reviews=permissions.role_may(account.role, "read_shown_review"))


_TOKENS_STASH = "member-tokens"


@bp.get("/welcome/tokens")
@access.allow(permissions.SIGNED_IN)
def tokens():
    """A member's own API tokens: mint one (its secret shown once), see their last use, revoke.
    The scopes offered are those the role may hold; the service refuses any other. The owner
    has the full tokens page."""
    account = current_user._get_current_object()
    if account.is_owner:
        return redirect(url_for("tokens.index"))
    stashed = take_stash(_TOKENS_STASH)
    held = members.own_tokens(account)
    new_token = next((t for t in held if str(t.id) == stashed.get("token_id")), None)
    return _no_store(make_response(render_template(
        "members/tokens.html", account=account, tokens=held,
        scopes=permissions.token_scopes_allowed(account.role),
        new_secret=stashed.get("secret") if new_token else None, new_token=new_token,
        error=stashed.get("error"), form=stashed.get("form") or {})))


@bp.post("/welcome/tokens")
@access.allow(permissions.SIGNED_IN)
def create_token():
    """Mint a token for the signed-in member, within their role's scopes."""
    scopes = request.form.getlist("scopes")
    account = current_user._get_current_object()

    def make():
        token, secret = members.mint_own_token(account, request.form.get("name", ""), scopes)
        db.session.flush()
        stash_for(_TOKENS_STASH, {"token_id": str(token.id), "secret": secret})

    def refused(exc):
        stash_for(_TOKENS_STASH, {"error": exc.message, "form": {"name": request.form.get("name", ""),
                                                                  "scopes": scopes}})
        return redirect(url_for("members.tokens"), code=303)

    return perform(make, refused=refused, refusals=(ValidationError,),
                   done=lambda: redirect(url_for("members.tokens"), code=303))


@bp.post("/welcome/tokens/<uuid:token_id>/revoke")
@access.allow(permissions.SIGNED_IN)
def revoke_token(token_id):
    """Revoke one of the member's own tokens; another's answers 404 as one that does not exist."""
    return perform(lambda: members.revoke_own_token(current_user._get_current_object(), token_id),
                   done=lambda: redirect(url_for("members.tokens"), code=303))
