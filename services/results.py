"""Clean results: the experiment's sanitized HTML write-up, kept in versions (SPEC §8.1).

The clean-results issue adds lint, figures, promotion and the result-grade sanitizer
(SVG subset, scoped <style>) behind `sanitize_html`.
"""
from __future__ import annotations

import sqlalchemy as sa
from flask import current_app

from models import CleanResultVersion, Experiment, db
from services import events
from services.actors import Actor
from services.errors import TooLarge, ValidationError
from services.redact import redact
from services.sanitize import sanitize_html


def save_clean_result(experiment: Experiment, html: str, actor: Actor, *, title: str | None = None) -> int:
    """Sanitize and store a clean-result body, keeping the previous one as a version."""
    limit = current_app.config["BODY_MAX"]
    if not isinstance(html, str) or not html.strip():
        raise ValidationError("The clean result is empty.", field="html")
    if len(html.encode()) > limit:
        raise TooLarge(f"The clean result is {len(html.encode()):,} bytes; the limit is {limit:,}.")
    if title is not None:
        from services.experiments import clean_fields
        experiment.title = clean_fields({"title": title}, partial=True)["title"]
    body = sanitize_html(redact(html))
    experiment.body = body
    experiment.has_clean_result = True
    count = db.session.scalar(sa.select(sa.func.count(CleanResultVersion.id))
                              .where(CleanResultVersion.experiment_id == experiment.id)) or 0
    db.session.add(CleanResultVersion(experiment_id=experiment.id, title=experiment.title, body=body,
                                      author_kind=actor.kind, author_id=actor.id))
    events.record(experiment, "note", actor, note=f"Clean result saved (version {count + 1}).",
                  metadata={"clean_result_version": count + 1})
    return count + 1
