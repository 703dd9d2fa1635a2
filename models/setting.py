"""Owner-editable settings (GPU prices, caps, research repository, webhook)."""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, db


class Setting(TimestampMixin, db.Model):
    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(sa.String(120), primary_key=True)
    value: Mapped[dict | list | str | int | float | bool | None] = mapped_column(JSONType)
