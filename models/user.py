"""The owner (later collaborators) and their API tokens."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from flask_login import UserMixin
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db


class User(UUIDPrimaryKey, TimestampMixin, UserMixin, db.Model):
    __tablename__ = "users"

    email: Mapped[str] = mapped_column(sa.String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(255))
    display_name: Mapped[str] = mapped_column(sa.String(120), default="")
    # Bumped on password change so existing sessions end (Flask-Login's get_id).
    session_version: Mapped[int] = mapped_column(default=1)

    def get_id(self) -> str:
        return f"{self.id}:{self.session_version}"


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
