"""Members: invitations, the accounts they make, and the owner's changes to them (SPEC §13).

An invitation is a one-time link: only the hash of its token is kept, it expires after
INVITATION_LIFETIME, and accepting it is one conditional UPDATE, so two tabs racing with the
same link make one account. Removing a member ends every session and token they hold at once
(the same session-version bump as "sign out everywhere", and their tokens revoked).
"""
from __future__ import annotations

import secrets
import uuid
from datetime import timedelta
from typing import Callable

import sqlalchemy as sa
from sqlalchemy.orm.attributes import set_committed_value

from models import ApiToken, Invitation, MemberProject, Project, User, db
from services.core import auth, input_shape, permissions, registry
from services.core.clock import utcnow
from services.core.errors import Forbidden, NotFound, ValidationError
from services.core.records import get_by_id
from services.core.token_hash import digest

INVITATION_LIFETIME = timedelta(days=7)
INVITATION_PREFIX = "inv_"
NAME_MAX = 120
# A member's last activity is written at most this often (a busy reader must not write per request).
LAST_SEEN_EVERY = timedelta(minutes=1)
_GONE = "This invitation is not valid: it was already used, it expired, or it was withdrawn. Ask for a new one."

# Email delivery plugs in here: a sender takes (invitation, absolute link) and answers whether
# it sent the mail. With none registered (or every one declining), the owner copies the link.
invitation_senders: list[Callable[[Invitation, str], bool]] = []


def deliver(invitation: Invitation, link: str) -> bool:
    """Send the invitation by the first sender that takes it; False: show the link to copy."""
    return any(sender(invitation, link) for sender in invitation_senders)


# --- inviting -----------------------------------------------------------------------------

def _clean_email(raw: str) -> str:
    email = (raw or "").strip().lower()
    if "@" not in email or len(email) > 320 or any(c.isspace() for c in email):
        raise ValidationError("Give a valid email address.", field="email")
    return email


def _clean_name(raw: str, email: str) -> str:
    name = " ".join((raw or "").split())
    if len(name) > NAME_MAX:
        raise ValidationError(f"The name is {len(name)} characters; the limit is {NAME_MAX}.", field="display_name")
    if name and not input_shape.has_visible_text(name):
        raise ValidationError("The name shows nothing; give one with visible letters, or none.", field="display_name")
    return name or email.split("@")[0]


def _clean_role(role: str) -> str:
    if role not in registry.INVITABLE_ROLES:
        raise ValidationError(f"Choose a role: {' or '.join(registry.INVITABLE_ROLES)} (there is one owner).",
                              field="role")
    return role


def _clean_projects(raw_ids) -> list[uuid.UUID]:
    """The chosen projects, each existing; at least one (a member's whole scope)."""
    ids = []
    for raw in raw_ids or []:
        try:
            project_id = uuid.UUID(str(raw))
        except ValueError:
            raise ValidationError("One of the chosen projects is not a project.", field="projects") from None
        if project_id not in ids:
            ids.append(project_id)
    if not ids:
        raise ValidationError("Choose at least one project: a member sees only their projects.", field="projects")
    found = set(db.session.scalars(sa.select(Project.id).where(Project.id.in_(ids))))
    if len(found) != len(ids):
        raise ValidationError("One of the chosen projects does not exist.", field="projects")
    return ids


def _require_owner(inviter: User | None) -> None:
    if not permissions.can(inviter, "manage_members"):
        raise Forbidden("Only the owner invites, changes and removes members.")


def invite(inviter: User, email: str, role: str, project_ids, display_name: str = "") -> tuple[Invitation, str]:
    """Store an invitation; returns it and its token, which is never shown again. The
    caller commits. An earlier pending invitation for the same address is withdrawn."""
    _require_owner(inviter)
    email = _clean_email(email)
    role = _clean_role(role)
    projects = _clean_projects(project_ids)
    name = _clean_name(display_name, email)
    if db.session.scalar(sa.select(User.id).where(User.email == email, User.removed_at.is_(None))):
        raise ValidationError(f"{email} already has an account here.", field="email")
    now = utcnow()
    db.session.execute(sa.update(Invitation)
                       .where(Invitation.email == email, Invitation.accepted_at.is_(None),
                              Invitation.revoked_at.is_(None))
                       .values(revoked_at=now))
    token = INVITATION_PREFIX + secrets.token_urlsafe(32)
    invitation = Invitation(id=uuid.uuid4(), email=email, display_name=name, role=role,
                            project_ids=[str(p) for p in projects], token_hash=digest(token),
                            invited_by_id=inviter.id, expires_at=now + INVITATION_LIFETIME)
    db.session.add(invitation)
    db.session.flush()
    return invitation, token


def pending_invitations() -> list[Invitation]:
    """Invitations not used and not withdrawn, newest first (expired ones too, marked by the page)."""
    return list(db.session.scalars(sa.select(Invitation)
                                   .where(Invitation.accepted_at.is_(None), Invitation.revoked_at.is_(None))
                                   .order_by(Invitation.created_at.desc())))


def invitation_projects(invitation: Invitation) -> list[Project]:
    """The projects an invitation covers that still exist, by title."""
    ids = [uuid.UUID(p) for p in invitation.project_ids]
    return list(db.session.scalars(sa.select(Project).where(Project.id.in_(ids)).order_by(Project.title)))


def withdraw_invitation(inviter: User, invitation_id) -> Invitation:
    _require_owner(inviter)
    invitation = get_by_id(Invitation, invitation_id, "No such invitation.")
    if invitation.accepted_at is None and invitation.revoked_at is None:
        invitation.revoked_at = utcnow()
    return invitation


def open_invitation(token: str) -> Invitation:
    """The usable invitation for a link's token, else NotFound with the same sentence for a
    made-up, used, expired or withdrawn one."""
    if not token or not token.startswith(INVITATION_PREFIX) or len(token) > 200:
        raise NotFound(_GONE)
    invitation = db.session.scalar(sa.select(Invitation).where(Invitation.token_hash == digest(token)))
    if (invitation is None or invitation.accepted_at is not None or invitation.revoked_at is not None
            or invitation.expires_at <= utcnow()):
        raise NotFound(_GONE)
    return invitation


def accept(token: str, display_name: str, password: str, confirm: str) -> User:
    """Make the invited account (the invitation's role and projects) and spend the link;
    the caller commits. Password rules and hashing are the owner's (services/core/auth.py)."""
    invitation = open_invitation(token)
    name = _clean_name(display_name or invitation.display_name, invitation.email)
    if len(password or "") < auth.PASSWORD_MIN:
        raise ValidationError(f"The password needs at least {auth.PASSWORD_MIN} characters.", field="password")
    if password != confirm:
        raise ValidationError("The two passwords differ; type the same one twice.", field="confirm")
    returning = db.session.scalar(sa.select(User).where(User.email == invitation.email))
    if returning is not None and returning.removed_at is None:
        raise NotFound(_GONE)
    now = utcnow()
    # Spend the link first, conditionally: of two requests racing with one link, one wins.
    spent = db.session.execute(sa.update(Invitation)
                               .where(Invitation.id == invitation.id, Invitation.accepted_at.is_(None),
                                      Invitation.revoked_at.is_(None), Invitation.expires_at > now)
                               .values(accepted_at=now))
    if spent.rowcount != 1:
        raise NotFound(_GONE)
    if returning is not None:
        # A removed member invited again: the same row, so what they wrote before stays theirs;
        # nothing of the old account (password, sessions, tokens, projects) carries over.
        user = returning
        user.password_hash = auth.hash_password(password)
        user.display_name, user.role, user.removed_at, user.last_seen_at = name, invitation.role, None, now
        user.session_version += 1
    else:
        user = User(id=uuid.uuid4(), email=invitation.email, password_hash=auth.hash_password(password),
                    display_name=name, role=invitation.role, last_seen_at=now)
        db.session.add(user)
    db.session.flush()
    existing = set(db.session.scalars(sa.select(Project.id).where(
        Project.id.in_([uuid.UUID(p) for p in invitation.project_ids]))))
    db.session.add_all(MemberProject(user_id=user.id, project_id=p) for p in existing)
    db.session.execute(sa.update(Invitation).where(Invitation.id == invitation.id).values(user_id=user.id))
    return user


# --- the owner's list and changes ------------------------------------------------------------

def list_accounts() -> list[User]:
    """The owner first, then members by name; removed members last."""
    return list(db.session.scalars(sa.select(User).order_by(
        User.removed_at.is_not(None), User.role != "owner", sa.func.lower(User.display_name), User.email)))


def projects_by_member(accounts) -> dict[uuid.UUID, list[Project]]:
    """Each account's projects, by title, in one query."""
    ids = [a.id for a in accounts]
    found: dict[uuid.UUID, list[Project]] = {i: [] for i in ids}
    if ids:
        rows = db.session.execute(sa.select(MemberProject.user_id, Project)
                                  .join(Project, Project.id == MemberProject.project_id)
                                  .where(MemberProject.user_id.in_(ids)).order_by(Project.title))
        for user_id, project in rows:
            found[user_id].append(project)
    return found


def _member(member_id) -> User:
    member = get_by_id(User, member_id, "No such member.")
    if member.role == "owner":
        raise ValidationError("The owner's account is not a member's: it cannot be changed or removed here.")
    if member.removed_at is not None:
        raise ValidationError(f"{member.display_name} was removed; invite them again instead.")
    return member


def change(by: User, member_id, role: str, project_ids) -> User:
    """Set a member's role and projects. A narrower role or scope holds from their next
    request: permissions read both afresh on every request."""
    _require_owner(by)
    member = _member(member_id)
    role = _clean_role(role)
    projects = _clean_projects(project_ids)
    member.role = role
    db.session.execute(sa.delete(MemberProject).where(MemberProject.user_id == member.id))
    db.session.add_all(MemberProject(user_id=member.id, project_id=p) for p in projects)
    # A token may not keep scopes the new role lacks: revoke any that would exceed it.
    allowed = set(permissions.token_scopes_allowed(role))
    now = utcnow()
    for token in db.session.scalars(sa.select(ApiToken).where(ApiToken.user_id == member.id,
                                                              ApiToken.revoked_at.is_(None))):
        if not set(token.scopes) <= allowed:
            token.revoked_at = now
    return member


def remove(by: User, member_id) -> User:
    """Remove a member: their sessions and tokens end at once; the row stays so what they
    wrote keeps its author."""
    _require_owner(by)
    member = _member(member_id)
    now = utcnow()
    member.removed_at = now
    member.session_version += 1  # every cookie carries the old version (User.get_id)
    db.session.execute(sa.update(ApiToken).where(ApiToken.user_id == member.id, ApiToken.revoked_at.is_(None))
                       .values(revoked_at=now))
    db.session.execute(sa.delete(MemberProject).where(MemberProject.user_id == member.id))
    return member


# --- a member's own API tokens -----------------------------------------------------------------

# A member's live tokens at most: enough for every laptop and notebook, and a bound on rows
# an account the owner invited can make.
MEMBER_TOKEN_MAX = 20


def mint_own_token(account: User, name: str, scopes) -> tuple[ApiToken, str]:
    """A token for `account` within their role's scopes (auth.create_token refuses more); at
    most MEMBER_TOKEN_MAX live at once. Returns the row and the secret, shown once."""
    live = live_token_counts([account])[account.id]
    if live >= MEMBER_TOKEN_MAX:
        raise ValidationError(f"You hold {live} live tokens, the most a member may; revoke one you no longer use.",
                              field="name")
    return auth.create_token(name, scopes, account)


def own_tokens(account: User) -> list[ApiToken]:
    """The tokens `account` holds, live ones first, newest first."""
    return list(db.session.scalars(sa.select(ApiToken).where(ApiToken.user_id == account.id)
                                   .order_by(ApiToken.revoked_at.is_not(None), ApiToken.created_at.desc())))


def revoke_own_token(account: User, token_id) -> ApiToken:
    """Revoke one of `account`'s own tokens; anyone else's (or none) is NotFound, the same
    sentence either way, so a member cannot learn which token ids exist."""
    token = db.session.scalar(sa.select(ApiToken).where(ApiToken.id == token_id, ApiToken.user_id == account.id))
    if token is None:
        raise NotFound("You hold no such token.")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    return token


def token_holder(token: ApiToken) -> User | None:
    """The account a token acts for: its member, or the owner for tokens minted without a
    holder (scripts' older tokens)."""
    if token.user_id is not None:
        return db.session.get(User, token.user_id)
    return db.session.scalar(sa.select(User).where(User.role == "owner").limit(1))


def live_token_counts(accounts) -> dict[uuid.UUID, int]:
    """Each account's live (unrevoked, unexpired) tokens, in one query: the owner's Members page."""
    ids = [a.id for a in accounts]
    counts: dict[uuid.UUID, int] = {i: 0 for i in ids}
    if ids:
        now = utcnow()
        rows = db.session.execute(sa.select(ApiToken.user_id, sa.func.count())
                                  .where(ApiToken.user_id.in_(ids), ApiToken.revoked_at.is_(None),
                                         sa.or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now))
                                  .group_by(ApiToken.user_id))
        counts.update({user_id: count for user_id, count in rows})
    return counts


def display_name(user_id) -> str:
    """An account's name, or "a former member" when the row is gone."""
    user = db.session.get(User, user_id) if user_id else None
    return (user.display_name or user.email) if user is not None else "a former member"


def names_of(raw_ids) -> dict[str, str]:
    """str(user id) → name, in one query (nothing asked, no query)."""
    ids = []
    for raw in raw_ids:
        try:
            ids.append(uuid.UUID(str(raw)))
        except ValueError:
            continue
    if not ids:
        return {}
    rows = db.session.execute(sa.select(User.id, User.display_name, User.email).where(User.id.in_(ids)))
    return {str(row.id): row.display_name or row.email for row in rows}


def note_activity(account: User) -> None:
    """Record a member's request as their last activity, at most once a minute; commits its
    own one-row UPDATE and leaves the request's transaction clean (like verify_token)."""
    now = utcnow()
    if account.last_seen_at is not None and now - account.last_seen_at < LAST_SEEN_EVERY:
        return
    db.session.execute(sa.update(User).where(User.id == account.id).values(last_seen_at=now))
    db.session.commit()
    set_committed_value(account, "last_seen_at", now)
