"""What a member reads of their projects through the API (SPEC §13): projects,
experiments, beliefs, papers and shared results, each confined to the account's projects by
services/core/permissions.py. A record outside them is NotFound with the sentence a record
that does not exist gets, so a member learns nothing of another project by number or uuid.

The owner reads through the same functions (every project). What a member reads of an
experiment is chosen by the API's member serializer (blueprints/api/member_api.py): never its
runs, costs, plans, pods or agent logs.
"""
from __future__ import annotations

import uuid

import sqlalchemy as sa

from models import Belief, Experiment, LiteratureItem, Project, db
from services.core import permissions, registry
from services.core.errors import NotFound, ValidationError
from services.results import shares
from services.workflow import experiments as experiment_service

LIST_MAX = 500


def projects_of(account) -> list[Project]:
    """The account's projects by title (every project for the owner)."""
    query = sa.select(Project).order_by(Project.title)
    if not account.is_owner:
        query = query.where(Project.id.in_(permissions.project_ids(account)))
    return list(db.session.scalars(query))


def project(account, slug, action: str = "read_project") -> Project:
    """One of the account's projects by slug, if their role may do `action` there; else the
    NotFound a slug that names nothing gets."""
    found = db.session.scalar(sa.select(Project).where(Project.slug == slug)) \
        if isinstance(slug, str) and len(slug) <= 200 else None
    if found is None or not permissions.can(account, action, found):
        raise NotFound(f"No project {str(slug)[:200]!r}.")
    return found


def _scope(account, project_slug: str | None, action: str):
    """The project ids a list may read: the named project's, else every one of the account's."""
    if project_slug:
        return [project(account, project_slug, action).id]
    if account.is_owner:
        return None
    return list(permissions.project_ids(account))


def experiments(account, *, project_slug: str | None = None, status: str | None = None,
                limit: int = 100) -> list[Experiment]:
    """Experiments of the account's projects (or the one named), newest first; `status` filters."""
    if status and status not in registry.STATUS_NAMES:
        raise ValidationError(f"status must be one of: {', '.join(registry.STATUS_NAMES)}.", field="status")
    ids = _scope(account, project_slug, "read_experiment")
    query = sa.select(Experiment).where(Experiment.project_id.is_not(None)).order_by(Experiment.number.desc())
    if ids is not None:
        query = query.where(Experiment.project_id.in_(ids))
    if status:
        query = query.where(Experiment.status == status)
    return list(db.session.scalars(query.limit(min(max(limit, 1), LIST_MAX))))


def experiment(account, ref, action: str = "read_experiment") -> Experiment:
    """One experiment by number (`12`, `#12`) or uuid, if the account may do `action` on it."""
    try:
        found = experiment_service.get_experiment(ref)
    except NotFound:
        found = None
    if found is None or not permissions.can(account, action, found):
        raise NotFound(f"No experiment {str(ref)[:40]}.")
    return found


def commentable_experiment(account, ref) -> Experiment:
    """An experiment the account may comment on: one they read (a collaborator's), or one
    whose result was shared in their project (a mentor reads and discusses only those)."""
    found = experiment(account, ref, "comment")
    if permissions.can(account, "read_experiment", found) or shares.shared_in_project(found.project_id,
                                                                                       found.number):
        return found
    raise NotFound(f"No experiment {str(ref)[:40]}.")


def beliefs(account, project_slug: str | None = None) -> list[Belief]:
    ids = _scope(account, project_slug, "read_belief")
    query = sa.select(Belief).where(Belief.project_id.is_not(None)).order_by(Belief.number)
    if ids is not None:
        query = query.where(Belief.project_id.in_(ids))
    return list(db.session.scalars(query))


def literature(account, project_slug: str | None = None) -> list[LiteratureItem]:
    ids = _scope(account, project_slug, "read_literature")
    query = sa.select(LiteratureItem).where(LiteratureItem.project_id.is_not(None)) \
        .order_by(LiteratureItem.created_at.desc(), LiteratureItem.id)
    if ids is not None:
        query = query.where(LiteratureItem.project_id.in_(ids))
    return list(db.session.scalars(query.limit(LIST_MAX)))


def shared_results(account, project_slug: str | None = None) -> list[tuple[Project, shares.SharedResult]]:
    """Results promoted to `shared` in the account's projects (or the one named), what a
    member's result page shows; never a draft."""
    chosen = [project(account, project_slug, "read_result")] if project_slug else \
        [p for p in projects_of(account) if permissions.can(account, "read_result", p)]
    return [(p, shared) for p in chosen for shared in shares.shared_in_project(p.id)]


def project_slugs(ids) -> dict[uuid.UUID, str]:
    """Project id → slug, in one query (the serializer names each record's project)."""
    ids = {i for i in ids if i}
    if not ids:
        return {}
    return dict(db.session.execute(sa.select(Project.id, Project.slug).where(Project.id.in_(ids))).all())
