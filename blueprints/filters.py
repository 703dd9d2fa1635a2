"""Jinja filters and globals shared by every page."""
from __future__ import annotations

from datetime import datetime

from flask import Flask
from flask_login import current_user
from markupsafe import Markup

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


def sanitized(html: str | None) -> Markup:
    """Mark HTML safe that services.sanitize produced when it was stored (the `*_html` fields).

    The only way a template shows markup; never use it on anything else.
    """
    return Markup(html or "")


def words(key: str) -> str:
    """A textbox key in words: "budget-notes" → "Budget notes"."""
    text = key.replace("-", " ").replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def money(value) -> str:
    return "price unknown" if value is None else f"${value:,.2f}"


def usd(value: float) -> str:
    """A known amount: cents, or three significant digits below a cent, so a real spend of a
    fraction of a cent never reads as $0.00."""
    if 0 < abs(value) < 0.01:
        return f"${value:.3g}"
    return f"${value:,.2f}"


def metric_value(value: float) -> str:
    """A metric as a person reads it: four significant digits, no exponent for everyday sizes."""
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return f"{value:.3e}"


def init_app(app: Flask) -> None:
    app.add_template_filter(age)
    app.add_template_filter(usd)
    app.add_template_filter(metric_value)
    app.add_template_filter(column_of)
    app.add_template_filter(sanitized)
    app.add_template_filter(words)
    app.add_template_filter(money)

    @app.context_processor
    def globals_():
        def your_turn_count() -> int:
            # Lazy: only pages that render the header pay for the query.
            if not current_user.is_authenticated:
                return 0
            from services.experiments import owner_turn_count
            return owner_turn_count()
        def fleet_incident():
            if not current_user.is_authenticated:
                return None
            from services.dispatch.watcher import open_incident
            return open_incident()
        return {"your_turn_count": your_turn_count, "registry": registry, "fleet_incident": fleet_incident,
                "agents_enabled": bool(app.config.get("ANTHROPIC_API_KEY")),
                "demo_agents": bool(app.config.get("SAGAN_DEMO_AGENTS"))}
