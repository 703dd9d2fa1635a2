"""Mentor share links (SPEC §8.5): opaque, hashed, revocable, expiring, rate limited.

A link shows one experiment's promoted result, or every result promoted to `shared`,
newest promotion first — each as its latest promotion froze it (PromotedResult), never the
draft saved since. An experiment whose latest promotion was not to `shared`, or that was
never promoted, shows nothing. Nothing else is reachable from a link. A revoked, expired or
unknown token resolves to None, and callers answer all three the same way (404, no hint).
"""
from __future__ import annotations

import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from flask import current_app

from models import Experiment, PromotedResult, ShareLink, db
from services.core import input_shape, redis_store, registry
from services.core.clock import utcnow
from services.core.errors import RateLimited, ValidationError
from services.core.records import get_by_id
from services.core.token_hash import digest
from services.workflow import experiments

TOKEN_BYTES = 32
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{20,100}")
MAX_EXPIRY_DAYS = 3650
OWNER_SCOPES = ("experiment", "all_promoted", "project", "weekly_review")


def create_link(*, scope: str, experiment: Experiment | None = None, project=None, label: str = "",
                expires_in_days=None, include_comments: bool = False, weekly_review=None) -> tuple[ShareLink, str]:
    """Mint a link; returns the row and the token, which is never shown again. `project`
    (a Project) for a project link, `weekly_review` (a WeeklyReview) for a mentor update."""
    if scope not in OWNER_SCOPES:
        raise ValidationError("Share one experiment, a project or all promoted results.", field="scope")
    if scope == "weekly_review" and weekly_review is None:
        raise ValidationError("Choose the weekly review to share.", field="weekly_review")
    if scope == "experiment" and experiment is None:
        raise ValidationError("Choose the experiment to share.", field="experiment")
    if scope == "project" and project is None:
        raise ValidationError("Choose the project to share.", field="project")
    label = " ".join((label or "").split())
    if not input_shape.has_visible_text(label):
        label = ""  # a label that shows nothing gets the default one, as an empty label does
    if len(label) > 200:
        raise ValidationError("The label has at most 200 characters.", field="label")
    expires_at = None
    if expires_in_days not in (None, ""):
        try:
            days = int(str(expires_in_days).strip())
        except ValueError:
            days = 0
        if not 1 <= days <= MAX_EXPIRY_DAYS:
            raise ValidationError(f"Expiry must be a whole number of days from 1 to {MAX_EXPIRY_DAYS}, "
                                  "or empty for a link that does not expire.", field="expires_in_days")
        expires_at = utcnow() + timedelta(days=days)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    if scope == "experiment":
        default_label = f"#{experiment.number}"
    elif scope == "project":
        default_label = f"Project: {project.title}"[:200]
    elif scope == "weekly_review":
        default_label = f"Weekly review, week ending {weekly_review.week_end.isoformat()}"
    else:
        default_label = "All promoted results"
    link = ShareLink(id=uuid.uuid4(), token_hash=digest(token), scope=scope,
                     experiment_id=experiment.id if scope == "experiment" else None,
                     project_id=project.id if scope == "project" else None,
                     weekly_review_id=weekly_review.id if scope == "weekly_review" else None,
                     label=label or default_label,
                     include_comments=bool(include_comments), expires_at=expires_at, use_count=0)
    db.session.add(link)
    db.session.flush()
    return link, token


def list_links(project_id=None, weekly_review_id=None) -> list[ShareLink]:
    """Every link, live ones first; only one project's (or one weekly review's) links when given."""
    query = sa.select(ShareLink).order_by(ShareLink.revoked_at.is_not(None), ShareLink.created_at.desc())
    if project_id is not None:
        query = query.where(ShareLink.scope == "project", ShareLink.project_id == project_id)
    if weekly_review_id is not None:
        query = query.where(ShareLink.scope == "weekly_review", ShareLink.weekly_review_id == weekly_review_id)
    return list(db.session.scalars(query))


def experiment_numbers(links: list[ShareLink]) -> dict:
    return experiments.numbers_by_id(link.experiment_id for link in links)


def revoke(link_id) -> ShareLink:
    link = get_by_id(ShareLink, link_id, "No such share link.")
    if link.revoked_at is None:
        link.revoked_at = utcnow()
    return link


def resolve(token: str) -> ShareLink | None:
    """The live link for a token, or None (unknown, revoked or expired alike)."""
    if not token or not _TOKEN_SHAPE.fullmatch(token):
        return None
    link = db.session.scalar(sa.select(ShareLink).where(ShareLink.token_hash == digest(token)))
    if link is None or link.revoked_at is not None or (link.expires_at and link.expires_at <= utcnow()):
        return None
    return link


def record_view(link: ShareLink) -> None:
    """Count one view (an atomic increment, so concurrent views are all counted); commits."""
    db.session.execute(sa.update(ShareLink).where(ShareLink.id == link.id)
                       .values(use_count=ShareLink.use_count + 1, last_used_at=utcnow())
                       .execution_options(synchronize_session=False))
    db.session.commit()


def check_rate(address: str | None) -> None:
    """At most SHARE_RATE_LIMIT share requests a minute per address (RateLimited otherwise)."""
    limit = current_app.config.get("SHARE_RATE_LIMIT", 60)
    key = f"sagan:share-rate:{address or 'unknown'}"
    if redis_store.count_in_window(key, 60) > limit:
        raise RateLimited("Too many requests; wait a minute and try again.")


@dataclass
class SharedResult:
    """An experiment as a link shows it: its number, and its result as promoted."""
    experiment: Experiment
    promotion: PromotedResult

    @property
    def number(self) -> int:
        return self.experiment.number


def _shared_promotions():
    """Experiments whose latest promotion was to `shared`, with that promotion."""
    return (sa.select(Experiment, PromotedResult).join(PromotedResult, PromotedResult.experiment_id == Experiment.id)
            .where(PromotedResult.promoted_to == "shared"))


def shared_results(link: ShareLink) -> list[SharedResult]:
    """What this link shows: the one experiment's result if it was promoted to `shared`, or
    every such result, newest promotion first; for a project link, those of the project's
    experiments (SPEC §11.4: nothing unpromoted reaches a link)."""
    if link.scope == "experiment":
        if link.experiment_id is None:
            return []
        query = _shared_promotions().where(Experiment.id == link.experiment_id)
    elif link.scope == "all_promoted":
        query = _shared_promotions().order_by(PromotedResult.promoted_at.desc(), Experiment.number.desc())
    elif link.scope == "project" and link.project_id is not None:
        query = _shared_promotions().where(Experiment.project_id == link.project_id) \
            .order_by(PromotedResult.promoted_at.desc(), Experiment.number.desc())
    else:
        return []
    return [SharedResult(experiment, promotion) for experiment, promotion in db.session.execute(query)]


def shared_in_project(project_id, number: int | None = None) -> list[SharedResult]:
    """The project's results promoted to `shared`, newest promotion first (what a mentor's
    account reads, SPEC §13); only experiment `number`'s when it is given."""
    query = _shared_promotions().where(Experiment.project_id == project_id) \
        .order_by(PromotedResult.promoted_at.desc(), Experiment.number.desc())
    if number is not None:
        query = query.where(Experiment.number == number)
    return [SharedResult(experiment, promotion) for experiment, promotion in db.session.execute(query)]


def shared_result(link: ShareLink, number: int) -> SharedResult | None:
    return next((r for r in shared_results(link) if r.number == number), None)


def openable_numbers(link: ShareLink, numbers: set[int]) -> set[int]:
    """Which of these experiment numbers a reader of `link` can open through it: other
    shared results of an "all promoted results" link, or of the same project for a project
    link; none for a one-experiment link."""
    if not numbers or link.scope not in ("all_promoted", "project"):
        return set()
    query = sa.select(Experiment.number).join(PromotedResult, PromotedResult.experiment_id == Experiment.id) \
        .where(Experiment.number.in_(sorted(numbers)), PromotedResult.promoted_to == "shared")
    if link.scope == "project":
        query = query.where(Experiment.project_id == link.project_id)
    return set(db.session.scalars(query))


SCOPE_LABELS = {"experiment": "one experiment", "all_promoted": "all promoted results",
                "project": "a project", "weekly_review": "a weekly review"}
assert set(SCOPE_LABELS) == set(registry.SHARE_SCOPES)
