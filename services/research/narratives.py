"""A project's narrative (SPEC §11.1): its story in markdown, versioned. Every save is a new
draft version; publishing one archives the version published before it, so a project has
at most one published narrative, and that one is all a share link ever shows."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from models import db
from models.research import Project, ProjectNarrative
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import NotFound
from services.core.sanitize import clean_markdown_document, render_markdown


@dataclass(frozen=True)
class ShownNarrative:
    """A narrative version with its markdown rendered through the one sanitizer."""
    row: ProjectNarrative
    html: str


def shown(row: ProjectNarrative | None) -> ShownNarrative | None:
    return ShownNarrative(row, render_markdown(row.body_md)) if row is not None else None


def clean_body(raw) -> str:
    return clean_markdown_document(raw, "The narrative", "The narrative is empty; write the project's story first.")


def _lock(project: Project) -> None:
    """Take the project's row lock: saves and publishes of one project take turns, so two
    saves never pick one version number and two publishes never leave two published."""
    db.session.execute(sa.select(Project.id).where(Project.id == project.id).with_for_update())


def save_draft(project: Project, body, actor: Actor) -> ProjectNarrative:
    """Save the text as the project's next version, a draft; the caller commits."""
    body = clean_body(body)
    _lock(project)
    latest = db.session.scalar(sa.select(sa.func.max(ProjectNarrative.version))
                               .where(ProjectNarrative.project_id == project.id)) or 0
    row = ProjectNarrative(id=uuid.uuid4(), project_id=project.id, version=latest + 1, body_md=body,
                           status="draft", author_kind=actor.kind, author_label=actor.label or "")
    db.session.add(row)
    db.session.flush()
    return row


def versions(project: Project) -> list[ProjectNarrative]:
    """Every version, newest first."""
    return list(db.session.scalars(sa.select(ProjectNarrative).where(ProjectNarrative.project_id == project.id)
                                   .order_by(ProjectNarrative.version.desc())))


def get_version(project: Project, version: int) -> ProjectNarrative:
    row = db.session.scalar(sa.select(ProjectNarrative).where(ProjectNarrative.project_id == project.id,
                                                              ProjectNarrative.version == version))
    if row is None:
        raise NotFound(f"The narrative has no version {version}.")
    return row


def published(project_id) -> ProjectNarrative | None:
    """The published version, if one is."""
    return db.session.scalar(sa.select(ProjectNarrative).where(ProjectNarrative.project_id == project_id,
                                                               ProjectNarrative.status == "published")
                             .order_by(ProjectNarrative.version.desc()).limit(1))


def latest(project: Project) -> ProjectNarrative | None:
    return db.session.scalar(sa.select(ProjectNarrative).where(ProjectNarrative.project_id == project.id)
                             .order_by(ProjectNarrative.version.desc()).limit(1))


def publish(project: Project, version: int, actor: Actor) -> ProjectNarrative:
    """Publish one version; the one published before is archived. Publishing the published
    version again changes nothing. The caller commits."""
    _lock(project)
    row = get_version(project, version)
    if row.status == "published":
        return row
    db.session.execute(sa.update(ProjectNarrative)
                       .where(ProjectNarrative.project_id == project.id, ProjectNarrative.status == "published")
                       .values(status="archived").execution_options(synchronize_session="fetch"))
    row.status = "published"
    row.published_at = utcnow()
    db.session.flush()
    return row
