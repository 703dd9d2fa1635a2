"""Read-only share links for mentors. Only a hash of the token is kept."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import TimestampMixin, UUIDPrimaryKey, db, one_of
from services.core import registry


class ShareLink(UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "share_links"
    __table_args__ = (one_of("scope", registry.SHARE_SCOPES),)

    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    scope: Mapped[str] = mapped_column(sa.String(16), default="experiment")
    experiment_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[uuid.UUID | None]
    # A "weekly_review" link shows that review's published version as the mentor update.
    weekly_review_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("weekly_reviews.id", ondelete="CASCADE"), index=True)
    label: Mapped[str] = mapped_column(sa.String(200), default="")
    include_comments: Mapped[bool] = mapped_column(default=False)
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    use_count: Mapped[int] = mapped_column(default=0)
