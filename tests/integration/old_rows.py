"""Rows written the way an older schema knew them, for the migration tests.

A migration test upgrades a scratch database to an old revision, seeds it, then upgrades to
head. Seeding through today's models breaks as soon as a later migration adds a column (the
model's INSERT and SELECT name it before it exists), so experiments are seeded here with a
Core insert of the columns every revision since the first has had.
"""
from __future__ import annotations

import secrets
import uuid

import sqlalchemy as sa

from models import db
from services.core.clock import utcnow
from services.core.token_hash import digest

_EXPERIMENTS = sa.table(
    "experiments", sa.column("id", sa.Uuid()), sa.column("number", sa.Integer()), sa.column("title"),
    sa.column("status"), sa.column("kind"), sa.column("priority"), sa.column("assignee_kind"),
    sa.column("tags", sa.JSON()), sa.column("has_clean_result", sa.Boolean()),
    sa.column("auto_approve_plan", sa.Boolean()), sa.column("proposed_by_agent", sa.Boolean()),
    sa.column("runpod_account"), sa.column("body"), sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("updated_at", sa.DateTime(timezone=True)))


def old_experiment(number: int, title: str, *, status: str = "proposed", body: str | None = None,
                   account: str = "local") -> uuid.UUID:
    """Insert experiment #`number` as an old schema holds it (before 0019_pod_account named its
    account column `pod_account`); its id."""
    experiment_id, now = uuid.uuid4(), utcnow()
    db.session.execute(sa.insert(_EXPERIMENTS).values(
        id=experiment_id, number=number, title=title, status=status, kind="experiment", priority="normal",
        assignee_kind="agent", tags=[], has_clean_result=body is not None, auto_approve_plan=False,
        proposed_by_agent=False, runpod_account=account, body=body, created_at=now, updated_at=now))
    return experiment_id


_SHARE_LINKS = sa.table(
    "share_links", sa.column("id", sa.Uuid()), sa.column("token_hash"), sa.column("scope"), sa.column("label"),
    sa.column("include_comments", sa.Boolean()), sa.column("use_count", sa.Integer()),
    sa.column("created_at", sa.DateTime(timezone=True)), sa.column("updated_at", sa.DateTime(timezone=True)))


def old_share_link(scope: str = "all_promoted") -> str:
    """Insert a share link as the first schema holds it (before 0024 gave links a weekly
    review); its token, to open the link with."""
    token, now = secrets.token_urlsafe(24), utcnow()
    db.session.execute(sa.insert(_SHARE_LINKS).values(
        id=uuid.uuid4(), token_hash=digest(token), scope=scope, label="All promoted results", include_comments=False,
        use_count=0, created_at=now, updated_at=now))
    return token
