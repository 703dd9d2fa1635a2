"""The accounts (the owner, invited collaborators and mentors) and their API tokens."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from flask_login import UserMixin
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, newest_change_index, one_of
from services.core import registry


class User(UUIDPrimaryKey, TimestampMixin, UserMixin, db.Model):
    __tablename__ = "users"
    __table_args__ = (newest_change_index("users"),
                      one_of("role", registry.ACCOUNT_ROLES),)

    email: Mapped[str] = mapped_column(sa.String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(255))
    display_name: Mapped[str] = mapped_column(sa.String(120), default="")
    # Bumped on password change so existing sessions end (Flask-Login's get_id).
    session_version: Mapped[int] = mapped_column(default=1)
    role: Mapped[str] = mapped_column(sa.String(16), default="owner", server_default="owner")
    # A removed member keeps their row (their comments stay attributed) but cannot sign in.
    removed_at: Mapped[datetime | None]
    # A member's last request, written at most once a minute (blueprints/access.py).
    last_seen_at: Mapped[datetime | None]

    def get_id(self) -> str:
        return f"{self.id}:{self.session_version}"

    @property
    def is_owner(self) -> bool:
        return self.role == "owner"


class MemberProject(db.Model):
    """A project a collaborator or mentor is invited to (their whole scope)."""

    __tablename__ = "member_projects"

    user_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"),
                                                  primary_key=True, index=True)


class Invitation(UUIDPrimaryKey, TimestampMixin, db.Model):
    """A one-time link (`/join/<token>`) that lets one person make an account with the role
    and projects the owner chose. Only the token's hash is kept; it expires, and it works once."""

    __tablename__ = "invitations"
    __table_args__ = (one_of("role", registry.INVITABLE_ROLES),)

    email: Mapped[str] = mapped_column(sa.String(320), index=True)
    display_name: Mapped[str] = mapped_column(sa.String(120), default="")
    role: Mapped[str] = mapped_column(sa.String(16))
    project_ids: Mapped[list] = mapped_column(JSONType, default=list)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    invited_by_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("users.id", ondelete="SET NULL"))
    expires_at: Mapped[datetime]
    accepted_at: Mapped[datetime | None]
    user_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("users.id", ondelete="SET NULL"))
    revoked_at: Mapped[datetime | None]


class ApiToken(UUIDPrimaryKey, TimestampMixin, db.Model):
    """A script's credential: `sk_<random>`; only the prefix and a hash are kept."""

    __tablename__ = "api_tokens"

    name: Mapped[str] = mapped_column(sa.String(120))
    prefix: Mapped[str] = mapped_column(sa.String(16))
    secret_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    scopes: Mapped[list] = mapped_column(JSONType, default=list)
    user_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("users.id", ondelete="SET NULL"))
    # A token minted for one agent run is confined to that run's experiment.
    experiment_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    expires_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]

    @property
    def active(self) -> bool:
        return self.revoked_at is None
