"""Jinja filters and globals shared by every page."""
from __future__ import annotations

from datetime import datetime

from flask import Flask, current_app, g, has_request_context, request, url_for
from flask_login import current_user
from markupsafe import Markup

from blueprints import access
from services.core import events, registry
from services.core.clock import utcnow
from services.core.sanitize import link_citations
from services.dispatch import cost_ledger
from services.research import literature


def age(moment: datetime | None, now: datetime | None = None) -> str:
    """'just now', '5m', '3h', '2d', '7w' — compact for cards. `now` for many at once."""
    if moment is None:
        return ""
    seconds = max(0, int(((now or utcnow()) - moment).total_seconds()))
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return "just now"


def column_of(status: str) -> str:
    return registry.STATUS_BY_NAME[status].column


def sanitized(html: str | None, frame: bool = False) -> Markup:
    """Mark HTML safe that services.core.sanitize produced when it was stored (the `*_html` fields).

    The only way a template shows markup; never use it on anything else. On the owner's pages a
    citation of a work in the library becomes a link to it (`frame`: the text is a clean result
    in its sandboxed frame, whose links open a new tab).
    """
    return Markup(with_library_links(html or "", new_tab=frame))


def with_library_links(html: str, new_tab: bool = False) -> str:
    """Sanitized HTML with citations (`arXiv:…`, `doi:…`) of works in the library linked to
    their pages, on pages only the owner sees; elsewhere (a mentor's share page) they stay
    text, since /library is the owner's. Each text costs at most one query, and none for a
    work already looked up during this request."""
    if not _owner_page():
        return html
    return link_citations(html, _library_targets, new_tab=new_tab)


def _owner_page() -> bool:
    # The route's rule, not the session: a share page never reads the session.
    if not has_request_context():
        return False
    rule = access.rule_for(request.endpoint)
    return rule is not None and rule[0] == "owner"


def _library_targets(keys) -> dict:
    known = g.setdefault("library_citations", {})
    missing = [key for key in keys if key not in known]
    if missing:
        items = literature.cited_items(missing)
        for key in missing:
            item = items.get(key)
            known[key] = (url_for("library.item", item_id=item.id), item.title) if item is not None else None
    return {key: known[key] for key in keys if known[key] is not None}


def words(key: str) -> str:
    """A textbox key in words: "budget-notes" → "Budget notes"."""
    text = key.replace("-", " ").replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def money(value) -> str:
    return "price unknown" if value is None else f"${value:,.2f}"


def usd(value: float) -> str:
    """A known amount: services/dispatch/cost_ledger.py's words for it."""
    return cost_ledger.usd(value)


def metric_value(value: float | None) -> str:
    """A metric as a person reads it: four significant digits, no exponent for everyday sizes;
    None is a value that was not finite (NaN, ±Infinity: services/dispatch/metrics.py)."""
    if value is None:
        return "not finite"
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return f"{value:.3e}"


def duration_since(moment: datetime | None) -> str:
    """How long since `moment`, for a person: "2 min", "3 h 10 min", "4 days"."""
    if moment is None:
        return ""
    minutes = max(0, int((utcnow() - moment).total_seconds()) // 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days = hours // 24
    return f"{days} day{'s' if days != 1 else ''}"


def marker_label(marker: str | None) -> str:
    """A workflow marker as a person reads it: "epm:clarify" → "Clarifying questions"."""
    return registry.marker_label(marker) if marker else ""


def turn(turn_text: str | None) -> str:
    """An experiment's turn as the owner reads it: without a model key Sagan's turns are the
    owner's ("write the plan"), since no agent will take them."""
    return registry.turn_as_read(turn_text or "", bool(current_app.config.get("ANTHROPIC_API_KEY")))


def status_label(status: str | None) -> str:
    return registry.STATUS_BY_NAME[status].label if status in registry.STATUS_BY_NAME else (status or "—")


def readable(note: str | None) -> str:
    """A stored note with the internal names in it (statuses, markers) in words; the note
    itself is stored as the SPEC words it, for the API and the audit trail."""
    return registry.humanize(note) if note else ""


def init_app(app: Flask) -> None:
    app.add_template_filter(age)
    app.add_template_filter(usd)
    app.add_template_filter(metric_value)
    app.add_template_filter(duration_since)
    app.add_template_filter(marker_label)
    app.add_template_filter(status_label)
    app.add_template_filter(turn)
    app.add_template_filter(readable)
    app.add_template_global(events.fold_progress, "fold_progress")
    app.add_template_filter(column_of)
    app.add_template_filter(sanitized)
    app.add_template_filter(words)
    app.add_template_filter(money)

    @app.context_processor
    def globals_():
        def your_turn_count() -> int:
            # Lazy: only pages that render the header pay for the query.
            if not current_user.is_authenticated or not current_user.is_owner:
                return 0
            from services.research.beliefs import owner_turn_total
            # Proposed belief updates wait for the owner too (one query for both counts).
            return owner_turn_total()
        def fleet_incident():
            if not current_user.is_authenticated or not current_user.is_owner:
                return None  # pods, their accounts and dispatch are the owner's alone
            from services.dispatch.watcher import open_incident
            return open_incident()
        return {"your_turn_count": your_turn_count, "registry": registry, "fleet_incident": fleet_incident,
                "agents_enabled": bool(app.config.get("ANTHROPIC_API_KEY")),
                "demo_agents": bool(app.config.get("SAGAN_DEMO_AGENTS"))}
