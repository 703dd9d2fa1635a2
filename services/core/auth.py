"""Accounts (the owner and invited members), passwords, login throttling and API tokens."""
from __future__ import annotations

import secrets
import uuid

import sqlalchemy as sa
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from flask import current_app
from sqlalchemy.orm.attributes import set_committed_value

from models import ApiToken, User, db
from services.core import input_shape, permissions, redis_store, registry
from services.core.clock import utcnow
from services.core.errors import NotFound, RateLimited, ValidationError
from services.core.records import get_by_id
from services.core.token_hash import digest

_hasher = PasswordHasher()  # argon2id with the library's current recommended parameters
# Verified against when the email is unknown, so timing does not reveal which emails exist.
_DUMMY_HASH = _hasher.hash("not-a-real-password")
PASSWORD_MIN = 10


# --- users ---------------------------------------------------------------------------

def hash_password(password: str) -> str:
    return _hasher.hash(password)


def create_owner(email: str, password: str, display_name: str = "") -> User:
    """Create an owner account; the caller commits."""
    email = (email or "").strip().lower()
    if "@" not in email or len(email) > 320 or any(c.isspace() for c in email):
        raise ValidationError("Give a valid email address.", field="email")
    if len(password or "") < PASSWORD_MIN:
        raise ValidationError(f"The password needs at least {PASSWORD_MIN} characters.", field="password")
    if db.session.scalar(sa.select(User).where(User.email == email)):
        raise ValidationError(f"An account for {email} already exists.", field="email")
    user = User(id=uuid.uuid4(), email=email, password_hash=hash_password(password),
                display_name=display_name.strip() or email.split("@")[0])
    db.session.add(user)
    db.session.flush()
    return user


def owner_exists() -> bool:
    return db.session.scalar(sa.select(sa.func.count(User.id)).where(User.role == "owner")) > 0


def ensure_owner_from_env() -> tuple[User, str | None] | None:
    """First-run owner: from SAGAN_OWNER_EMAIL/PASSWORD, or generated and returned once.

    Returns (user, generated_password) when an owner was created, None if one existed.
    """
    if owner_exists():
        return None
    email = current_app.config["SAGAN_OWNER_EMAIL"] or "owner@localhost"
    password = current_app.config["SAGAN_OWNER_PASSWORD"]
    generated = None
    if not password:
        generated = password = secrets.token_urlsafe(12)
    user = create_owner(email, password)
    db.session.commit()
    return user, generated


def load_user(session_id: str) -> User | None:
    """Flask-Login's loader: ids carry a session version so a password change ends sessions."""
    try:
        raw_id, version = session_id.split(":", 1)
        user = db.session.get(User, uuid.UUID(raw_id))
    except (ValueError, AttributeError):
        return None
    if user is None or str(user.session_version) != version or user.removed_at is not None:
        return None
    return user


def _throttle_key(address: str) -> str:
    return f"sagan:login-failures:{address}"


def check_login_allowed(address: str) -> None:
    """Raise RateLimited after too many recent failures from one address (SPEC §10)."""
    cfg = current_app.config
    failures = redis_store.connection().get(_throttle_key(address))
    if failures and int(failures) >= cfg["LOGIN_MAX_FAILURES"]:
        raise RateLimited("Too many failed logins from your address; wait a minute and try again.")


def authenticate(email: str, password: str, address: str) -> User:
    """Check a login; records failures per address. Raises ValidationError or RateLimited."""
    check_login_allowed(address)
    user = db.session.scalar(sa.select(User).where(User.email == (email or "").strip().lower()))
    try:
        _hasher.verify(user.password_hash if user else _DUMMY_HASH, password or "")
        ok = user is not None and user.removed_at is None  # a removed member cannot sign in
    except (VerificationError, InvalidHashError):
        ok = False
    if not ok:
        redis_store.count_in_window(_throttle_key(address), current_app.config["LOGIN_FAILURE_WINDOW"])
        raise ValidationError("Wrong email or password.", field="password")
    if _hasher.check_needs_rehash(user.password_hash):
        user.password_hash = hash_password(password)
        db.session.commit()
    redis_store.connection().delete(_throttle_key(address))
    return user


# --- API tokens ----------------------------------------------------------------------

TOKEN_PREFIX = "sk_"



def clean_scopes(raw) -> list[str]:
    if isinstance(raw, str):
        raw = [s for s in raw.replace(" ", ",").split(",") if s]
    scopes = []
    for scope in raw or []:
        if scope not in registry.API_TOKEN_SCOPES:
            raise ValidationError(
                f"Unknown scope {scope!r}; choose from {', '.join(registry.API_TOKEN_SCOPES)}.",
                field="scopes")
        if scope not in scopes:
            scopes.append(scope)
    if not scopes:
        raise ValidationError("Choose at least one scope.", field="scopes")
    return scopes


def create_token(name: str, scopes, user: User | None = None) -> tuple[ApiToken, str]:
    """Mint a token; returns the row and the secret, which is never shown again. A member's
    token holds no scope beyond their role (services/core/permissions.py)."""
    name = " ".join((name or "").split())
    if not input_shape.has_visible_text(name) or len(name) > 120:
        raise ValidationError("Give the token a name of 1–120 characters, at least one of them visible.",
                              field="name")
    scopes = clean_scopes(scopes)
    if user is not None:
        if user.removed_at is not None:
            raise ValidationError("A removed member holds no tokens.", field="scopes")
        allowed = permissions.token_scopes_allowed(user.role)
        beyond = [scope for scope in scopes if scope not in allowed]
        if beyond:
            raise ValidationError(f"A {user.role}'s token cannot hold the {beyond[0]!r} scope; "
                                  f"it may hold {', '.join(allowed)}.", field="scopes")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(id=uuid.uuid4(), name=name, prefix=secret[:10], secret_hash=digest(secret),
                     scopes=scopes, user_id=user.id if user else None)
    db.session.add(token)
    db.session.flush()
    return token, secret


def list_tokens() -> list[ApiToken]:
    return list(db.session.scalars(sa.select(ApiToken).where(ApiToken.experiment_id.is_(None))
                                   .order_by(ApiToken.revoked_at.is_not(None), ApiToken.created_at.desc())))


def revoke_token(token_id) -> ApiToken:
    token = get_by_id(ApiToken, token_id, "No such token.")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    return token


def verify_token(secret: str) -> ApiToken | None:
    """The active token for a bearer secret, or None; records its use."""
    if not secret or not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        return None
    # The holder's role and removal in the same round trip: a removed member's token is dead
    # even if its revocation were missed, and a member's token is known as one (blueprints/access.py).
    row = db.session.execute(sa.select(ApiToken, User.role, User.removed_at)
                             .outerjoin(User, User.id == ApiToken.user_id)
                             .where(ApiToken.secret_hash == digest(secret))).one_or_none()
    now = utcnow()
    if row is None:
        return None
    token, holder_role, holder_removed_at = row
    if token.revoked_at is not None or (token.expires_at and token.expires_at <= now) or holder_removed_at:
        return None
    # Not a column: tokens without a holder (agent runs' tokens, scripts' older ones) act as before.
    token.holder_role = holder_role or "owner"
    # Write last use at most once a minute: a busy script must not turn reads into writes.
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        db.session.execute(sa.update(ApiToken).where(ApiToken.id == token.id).values(last_used_at=now))
        db.session.commit()
        # Known to be stored: set without marking the row changed, so the request's
        # transaction has still written nothing (services.core.unlocked ends it to render).
        set_committed_value(token, "last_used_at", now)
    return token


def end_sessions(user: User) -> None:
    """End every session and remember-me cookie of `user`, server-side; the caller commits.

    Cookies are signed, not stored, so a captured one stays valid until the id it carries
    (`<id>:<session_version>`, see User.get_id) stops matching: bumping the version does
    that for every copy at once.
    """
    db.session.execute(sa.update(User).where(User.id == user.id)
                       .values(session_version=User.session_version + 1))
    db.session.refresh(user)


def set_password(email: str, password: str) -> User:
    """Change a password and end the user's existing sessions; the caller commits."""
    user = db.session.scalar(sa.select(User).where(User.email == (email or "").strip().lower()))
    if user is None:
        raise NotFound(f"No account for {email}.")
    if len(password or "") < PASSWORD_MIN:
        raise ValidationError(f"The password needs at least {PASSWORD_MIN} characters.", field="password")
    user.password_hash = hash_password(password)
    user.session_version += 1
    return user
