"""Jinja filters and globals shared by every page."""
from __future__ import annotations

from datetime import datetime

from flask import Flask
from flask_login import current_user

from services import registry
from services.clock import utcnow


def age(moment: datetime | None) -> str:
    """'just now', '5m', '3h', '2d', '7w' — compact for cards."""
    if moment is None:
        return ""
    seconds = max(0, int((utcnow() - moment).total_seconds()))
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return "just now"


def column_of(status: str) -> str:
    return registry.STATUS_BY_NAME[status].column


def init_app(app: Flask) -> None:
    app.add_template_filter(age)
    app.add_template_filter(column_of)

    @app.context_processor
    def globals_():
        def your_turn_count() -> int:
            # Lazy: only pages that render the header pay for the query.
            if not current_user.is_authenticated:
                return 0
            from services.experiments import owner_turn_count
            return owner_turn_count()
        return {"your_turn_count": your_turn_count, "registry": registry}
